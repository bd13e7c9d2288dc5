//! The tokenizer environment llguidance needs, built once per model from flint's vocabulary:
//! each token's raw bytes (what the model emits when it picks it), special tokens as
//! `0xFF` + their text (llguidance's `SPECIAL_TOKEN_MARKER`, so `<|im_end|>` can be named in a
//! Lark grammar and never matches text), the end-of-generation ids as its EOS set, and
//! canonical tokenization of forced bytes through flint's own encoder (fast-forward tokens
//! then match what a plain encode of the text gives).
//!
//! As llama.cpp's llguidance sampler (common/llguidance.cpp) does: a token whose piece is
//! empty without `special` (control tokens) is stored as special.

use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::tokenizer::{ModelKind, Tokenizer};

use super::GrammarError;

/// flint's tokenizer seen by llguidance.
pub struct FlintTokEnv {
    trie: TokTrie,
    tok: Tokenizer,
}

impl FlintTokEnv {
    /// The environment of `tok` over `n_vocab` ids (the LM head's rows: ids past the
    /// tokenizer's table are stored empty and never allowed).
    pub fn new(tok: &Tokenizer, n_vocab: u32) -> Result<FlintTokEnv, GrammarError> {
        let eog = tok.eog_ids().to_vec();
        let eos = tok
            .eos_id()
            .or_else(|| eog.first().copied())
            .ok_or_else(|| GrammarError::Vocab("no end-of-generation token".into()))?;
        if eos >= n_vocab {
            return Err(GrammarError::Vocab(format!(
                "EOS id {eos} is past the {n_vocab} logits"
            )));
        }
        let mut words = Vec::with_capacity(n_vocab as usize);
        for id in 0..n_vocab {
            let plain = tok.token_to_piece(id, false).unwrap_or_default();
            let word = if plain.is_empty() {
                let raw = tok.token_to_piece(id, true).unwrap_or_default();
                if raw.is_empty() {
                    Vec::new()
                } else {
                    let mut w = Vec::with_capacity(raw.len() + 1);
                    w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                    w.extend_from_slice(raw);
                    w
                }
            } else {
                plain.to_vec()
            };
            words.push(word);
        }
        let mut info = TokRxInfo::new(n_vocab, eos);
        info.tok_bos = tok.bos_id();
        let mut eos_set: Vec<TokenId> = vec![eos];
        eos_set.extend(eog.iter().copied().filter(|&t| t != eos && t < n_vocab));
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos_set);
        Ok(FlintTokEnv {
            trie,
            tok: tok.clone(),
        })
    }
}

impl TokenizerEnv for FlintTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // SentencePiece's encode adds a prefix space to the first piece: forced text is split
        // greedily over the trie there instead.
        if self.tok.kind() == ModelKind::Spm {
            return self.trie.greedy_tokenize(s);
        }
        // Text is encoded as a plain encode would (no BOS, special texts stay text); bytes that
        // are not UTF-8 fall back to the trie's greedy split.
        self.trie.tokenize_with_greedy_fallback(s, |text| {
            self.tok.encode(text, false, false).unwrap_or_default()
        })
    }
}
