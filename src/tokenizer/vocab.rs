//! The vocabulary read from GGUF metadata: token texts, scores and types, the text → id index,
//! the special ids (BOS, EOS, EOT, UNK, PAD …) and the end-of-generation set.
//!
//! Defaults and overrides follow llama.cpp's `llama_vocab::load`: model-kind defaults first
//! (SentencePiece: BOS 1, EOS 2, UNK 0; byte-level BPE: BOS = EOS = 11), replaced by the
//! metadata ids when those are in range; well-known end-of-turn texts (`<|im_end|>`,
//! `<|eot_id|>` …) are forced to control tokens and join the end-of-generation set.

use std::collections::HashMap;

use super::error::TokenizerError;
use crate::gguf::Metadata;

/// A token id (an index into the vocabulary).
pub type TokenId = u32;

/// llama.cpp's token types (`tokenizer.ggml.token_type`); unknown values read as `Undefined`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    pub fn from_i32(v: i32) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }

    /// Control and unknown tokens: hidden when decoding without `special`, and matched in text
    /// only with `parse_special`.
    pub fn is_special(self) -> bool {
        matches!(self, TokenType::Control | TokenType::Unknown)
    }
}

/// Which algorithm turns text pieces into ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// `tokenizer.ggml.model = "gpt2"`: byte-level BPE with merges ranked by order.
    Bpe,
    /// `tokenizer.ggml.model = "llama"`: SentencePiece BPE merged by score, `▁` for spaces.
    Spm,
}

/// Special token ids (None when the model has none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecialIds {
    pub bos: Option<TokenId>,
    pub eos: Option<TokenId>,
    pub eot: Option<TokenId>,
    pub eom: Option<TokenId>,
    pub unk: Option<TokenId>,
    pub sep: Option<TokenId>,
    pub pad: Option<TokenId>,
    pub mask: Option<TokenId>,
}

/// Texts llama.cpp (b11434, `llama_vocab::impl::load`) treats as end of generation and forces to
/// control type, whatever the GGUF's token type says (Gemma 3's `</s>` is a normal token there).
const EOG_TEXTS: [&str; 22] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
/// The subset that can be the end-of-turn id when the metadata has none (the lowest id found
/// wins; llama.cpp takes the first in hash order). All are in `EOG_TEXTS`.
const EOT_TEXTS: [&str; 11] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// The loaded vocabulary and the flags that steer encoding and decoding.
#[derive(Debug, Clone)]
pub(crate) struct Vocab {
    pub(crate) texts: Vec<String>,
    pub(crate) scores: Vec<f32>,
    pub(crate) types: Vec<TokenType>,
    pub(crate) index: HashMap<String, TokenId>,
    pub(crate) special: SpecialIds,
    /// End-of-generation ids, sorted.
    pub(crate) eog: Vec<TokenId>,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) add_space_prefix: bool,
    /// llama.cpp's `clean_spaces` (detokenizer drops spaces before `?!.,` and some `'`).
    pub(crate) clean_spaces: bool,
    /// Longest token text in bytes.
    pub(crate) max_token_len: usize,
}

/// Model-kind and pre-tokenizer defaults, applied before the metadata overrides.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VocabDefaults {
    pub add_bos: bool,
    pub add_space_prefix: bool,
    pub clean_spaces: bool,
    /// chatglm4 has no BOS whatever the metadata says.
    pub no_bos: bool,
}

fn key(name: &str) -> String {
    format!("tokenizer.ggml.{name}")
}

impl Vocab {
    /// Read the tables and flags; `kind` selects the default special ids.
    pub(crate) fn load(
        m: &Metadata,
        kind: ModelKind,
        d: VocabDefaults,
    ) -> Result<Vocab, TokenizerError> {
        let raw = m.str_array(&key("tokens"))?;
        if raw.is_empty() {
            return Err(TokenizerError::EmptyVocab);
        }
        let n = u32::try_from(raw.len()).map_err(|_| TokenizerError::VocabTooLarge {
            n_tokens: raw.len(),
            max: u32::MAX as usize,
        })?;
        let scores = m.opt(&key("scores"), Metadata::f32_array)?;
        let types = m.opt(&key("token_type"), Metadata::i32_array)?;
        let mut v = Vocab {
            texts: Vec::with_capacity(raw.len()),
            scores: Vec::with_capacity(raw.len()),
            types: Vec::with_capacity(raw.len()),
            index: HashMap::with_capacity(raw.len()),
            special: SpecialIds::default(),
            eog: Vec::new(),
            add_bos: d.add_bos,
            add_eos: false,
            add_space_prefix: d.add_space_prefix,
            clean_spaces: d.clean_spaces,
            max_token_len: 0,
        };
        for (id, text) in (0..n).zip(raw) {
            // An empty token would match everywhere; llama.cpp renames it the same way.
            let text = if text.is_empty() {
                format!("[EMPTY_{id}]")
            } else {
                text.clone()
            };
            if let Some(&first) = v.index.get(&text) {
                return Err(TokenizerError::DuplicateToken {
                    text,
                    first,
                    second: id,
                });
            }
            let i = id as usize;
            v.max_token_len = v.max_token_len.max(text.len());
            v.index.insert(text.clone(), id);
            v.texts.push(text);
            v.scores
                .push(scores.and_then(|s| s.get(i).copied()).unwrap_or(0.0));
            v.types.push(
                types
                    .and_then(|t| t.get(i).copied())
                    .map_or(TokenType::Normal, TokenType::from_i32),
            );
        }
        v.load_special(m, kind, d)?;
        Ok(v)
    }

    fn in_range(&self, id: i64) -> Option<TokenId> {
        u32::try_from(id)
            .ok()
            .filter(|&i| (i as usize) < self.texts.len())
    }

    fn load_special(
        &mut self,
        m: &Metadata,
        kind: ModelKind,
        d: VocabDefaults,
    ) -> Result<(), TokenizerError> {
        let (bos, eos, unk) = match kind {
            ModelKind::Spm => (Some(1), Some(2), Some(0)),
            ModelKind::Bpe => (Some(11), Some(11), None),
        };
        let mut s = SpecialIds {
            bos: if d.no_bos {
                None
            } else {
                bos.and_then(|i| self.in_range(i))
            },
            eos: eos.and_then(|i| self.in_range(i)),
            unk: unk.and_then(|i| self.in_range(i)),
            ..SpecialIds::default()
        };
        let slots: [(&str, &mut Option<TokenId>); 8] = [
            ("bos_token_id", &mut s.bos),
            ("eos_token_id", &mut s.eos),
            ("eot_token_id", &mut s.eot),
            ("eom_token_id", &mut s.eom),
            ("unknown_token_id", &mut s.unk),
            ("seperator_token_id", &mut s.sep),
            ("padding_token_id", &mut s.pad),
            ("mask_token_id", &mut s.mask),
        ];
        for (name, slot) in slots {
            // An id out of range (or -1, "none") keeps the default, as in llama.cpp.
            if let Some(id) = m
                .opt(&key(name), Metadata::i64)?
                .and_then(|i| self.in_range(i))
            {
                *slot = Some(id);
            }
        }
        if let Some(id) = m.opt(&key("separator_token_id"), Metadata::i64)? {
            s.sep = self.in_range(id).or(s.sep);
        }
        if let Some(b) = m.opt(&key("add_space_prefix"), Metadata::bool)? {
            self.add_space_prefix = b;
        }
        if let Some(b) = m.opt(&key("add_bos_token"), Metadata::bool)? {
            self.add_bos = b;
        }
        if let Some(b) = m.opt(&key("add_eos_token"), Metadata::bool)? {
            self.add_eos = b;
        }
        self.special = s;
        self.check_add_flags()?;
        self.mark_end_of_generation();
        Ok(())
    }

    pub(crate) fn check_add_flags(&self) -> Result<(), TokenizerError> {
        if self.add_bos && self.special.bos.is_none() {
            return Err(TokenizerError::MissingSpecialToken {
                flag: "add_bos_token",
                key: "tokenizer.ggml.bos_token_id",
            });
        }
        if self.add_eos && self.special.eos.is_none() {
            return Err(TokenizerError::MissingSpecialToken {
                flag: "add_eos_token",
                key: "tokenizer.ggml.eos_token_id",
            });
        }
        Ok(())
    }

    /// Find EOT by text when the metadata has none, force end-of-turn texts to control type,
    /// and collect the end-of-generation set (EOS, EOT, EOM and the well-known texts).
    fn mark_end_of_generation(&mut self) {
        if self.special.eot.is_none() {
            self.special.eot = EOT_TEXTS
                .iter()
                .filter_map(|t| self.index.get(*t).copied())
                .min();
        }
        if self.special.eom.is_none() {
            self.special.eom = self.index.get("<|eom_id|>").copied();
        }
        let mut eog: Vec<TokenId> = EOG_TEXTS
            .iter()
            .filter_map(|t| self.index.get(*t).copied())
            .collect();
        eog.extend(self.special.eos);
        eog.extend(self.special.eot);
        eog.extend(self.special.eom);
        eog.sort_unstable();
        eog.dedup();
        let has = |eog: &[TokenId], text: &str| {
            eog.iter()
                .copied()
                .find(|&id| self.texts.get(id as usize).is_some_and(|t| t == text))
        };
        // Only the well-known texts are forced to control type (not an EOS/EOT id that the
        // metadata points at a normal token), as in llama.cpp.
        for &id in &eog {
            let known = self
                .texts
                .get(id as usize)
                .is_some_and(|t| EOG_TEXTS.contains(&t.as_str()));
            if let Some(t) = self.types.get_mut(id as usize) {
                if known && !t.is_special() {
                    *t = TokenType::Control;
                }
            }
        }
        // Harmony-style vocabularies end a turn with `<|return|>` / `<|call|>` (or `<|calls|>` /
        // `<|flush|>`), not `<|end|>`: llama.cpp drops `<|end|>` from the set and makes it
        // user-defined.
        let call = has(&eog, "<|call|>").or(has(&eog, "<|calls|>"));
        if let (Some(_), Some(end)) = (call, has(&eog, "<|end|>")) {
            if has(&eog, "<|return|>").is_some() || has(&eog, "<|flush|>").is_some() {
                eog.retain(|&id| id != end);
                if let Some(t) = self.types.get_mut(end as usize) {
                    *t = TokenType::UserDefined;
                }
            }
        }
        // Gemma 4 and PLaMo have a normal `</s>`: with their marker tokens it stays normal.
        if let Some(s) = has(&eog, "</s>") {
            if has(&eog, "<|tool_response>").is_some() || has(&eog, "<|plamo:eos|>").is_some() {
                eog.retain(|&id| id != s);
                if let Some(t) = self.types.get_mut(s as usize) {
                    *t = TokenType::Normal;
                }
            }
        }
        self.eog = eog;
    }

    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    pub(crate) fn text(&self, id: TokenId) -> Option<&str> {
        self.texts.get(id as usize).map(String::as_str)
    }

    pub(crate) fn token_type(&self, id: TokenId) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    pub(crate) fn id(&self, text: &str) -> Option<TokenId> {
        self.index.get(text).copied()
    }

    /// Ids llama.cpp matches in raw text before pre-tokenizing (control, user-defined and
    /// unknown tokens), longest text first (ties by id, so the order is deterministic).
    pub(crate) fn special_match_order(&self) -> Vec<TokenId> {
        let mut ids: Vec<TokenId> = (0..self.texts.len() as u32)
            .filter(|&i| {
                matches!(
                    self.token_type(i),
                    Some(TokenType::Control | TokenType::UserDefined | TokenType::Unknown)
                )
            })
            .collect();
        ids.sort_by(|&a, &b| {
            let len = |i: TokenId| self.text(i).map_or(0, str::len);
            len(b).cmp(&len(a)).then(a.cmp(&b))
        });
        ids
    }
}
