//! The tokenizer: built from GGUF metadata (`tokenizer.ggml.*`), it encodes text to token ids
//! and decodes ids back, bit-compatible with llama.cpp's `llama_tokenize` / `llama_detokenize`,
//! and renders chat templates (`chat`), with client text kept from forming control tokens
//! (`literal`).
//!
//! Encoding, in llama.cpp's order: (1) split the text at special tokens (`special`), (2) for
//! byte-level BPE, pre-tokenize each text fragment with the pre-tokenizer's regexes
//! (`pretokenize`) and merge each word by rank (`bpe`); for SentencePiece, escape spaces to `▁`
//! with a prefix space and merge by score (`spm`); (3) add BOS/EOS as the metadata says.
//! Decoding maps each id to its piece bytes (`decode`); [`StreamDecoder`] turns a stream of ids
//! into text without ever emitting half a character. See docs/TOKENIZER.md.

pub(crate) mod bpe;
pub mod builtin_templates;
mod chat;
mod decode;
mod error;
mod literal;
mod pretokenize;
mod pycompat;
mod special;
mod spm;
mod vocab;

pub use chat::{read_template_file, ChatMessage, ChatTemplate};
pub use decode::{StreamDecoder, Utf8Stream};
pub use error::TokenizerError;
pub use literal::RenderedChat;
pub use pycompat::strftime;
pub use vocab::{ModelKind, SpecialIds, TokenId, TokenType};

use bpe::Bpe;
use pretokenize::PreTokenizer;
use special::Fragment;
use spm::Spm;
use vocab::{Vocab, VocabDefaults};

use crate::gguf::{Gguf, Metadata};

#[derive(Debug, Clone)]
enum Algo {
    Bpe {
        bpe: Box<Bpe>,
        pre: PreTokenizer,
        pre_kind: &'static str,
    },
    Spm(Box<Spm>),
}

/// A tokenizer loaded from GGUF metadata.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    vocab: Vocab,
    kind: ModelKind,
    pre: Option<String>,
    algo: Algo,
    /// Special-token ids, longest text first, and their automaton.
    special_order: special::Order,
    /// Every token's piece with `special = true`.
    pieces: Vec<Vec<u8>>,
    chat_template: Option<String>,
}

/// Options for [`Tokenizer::decode_with`], llama.cpp's `llama_detokenize` flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Drop a leading BOS and a trailing EOS when the model adds them.
    pub remove_special: bool,
    /// Render control and unknown tokens as their text (otherwise they decode to nothing).
    pub unparse_special: bool,
}

impl Tokenizer {
    /// The tokenizer of a parsed GGUF file.
    pub fn from_gguf(g: &Gguf) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_metadata(&g.metadata)
    }

    /// Build from the `tokenizer.*` metadata keys.
    pub fn from_metadata(m: &Metadata) -> Result<Tokenizer, TokenizerError> {
        let model = m.str("tokenizer.ggml.model")?;
        let pre = m.opt("tokenizer.ggml.pre", Metadata::str)?;
        let (kind, spec) = match model {
            "gpt2" => {
                let spec = pretokenize::lookup(pre).ok_or_else(|| {
                    TokenizerError::UnsupportedPreTokenizer {
                        pre: pre.unwrap_or_default().to_string(),
                    }
                })?;
                (ModelKind::Bpe, Some(spec))
            }
            "llama" => (ModelKind::Spm, None),
            other => {
                return Err(TokenizerError::UnsupportedModel {
                    model: other.to_string(),
                })
            }
        };
        let defaults = match spec {
            Some(s) => VocabDefaults {
                add_bos: s.add_bos,
                add_space_prefix: false,
                clean_spaces: s.clean_spaces,
                no_bos: s.no_bos,
            },
            None => VocabDefaults {
                add_bos: true,
                add_space_prefix: true,
                clean_spaces: false,
                no_bos: false,
            },
        };
        let vocab = Vocab::load(m, kind, defaults)?;
        let algo = match spec {
            Some(s) => {
                let merges = match m.opt("tokenizer.ggml.merges", Metadata::str_array)? {
                    Some(merges) => merges,
                    None => return Err(TokenizerError::MissingMerges),
                };
                Algo::Bpe {
                    bpe: Box::new(Bpe::new(&vocab, merges, s.ignore_merges)),
                    pre: PreTokenizer::new(s.patterns)?,
                    pre_kind: s.kind,
                }
            }
            None => Algo::Spm(Box::new(Spm::new(&vocab))),
        };
        Ok(Tokenizer {
            special_order: special::Order::new(&vocab),
            pieces: decode::build_pieces(&vocab, kind),
            chat_template: m
                .opt("tokenizer.chat_template", Metadata::str)?
                .map(str::to_string),
            pre: pre.map(str::to_string),
            kind,
            algo,
            vocab,
        })
    }

    /// Encode `text`. `add_special` adds BOS/EOS where the model asks for them;
    /// `parse_special` turns control-token texts (`<|im_start|>`) into their ids.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<TokenId>, TokenizerError> {
        self.encode_parts(text, add_special, parse_special, &[])
    }

    /// [`Tokenizer::encode`] with byte ranges of `text` read as plain text whatever
    /// `parse_special` says (sorted, disjoint, on character boundaries).
    fn encode_parts(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
        literal: &[std::ops::Range<usize>],
    ) -> Result<Vec<TokenId>, TokenizerError> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.vocab.add_bos {
            out.extend(self.vocab.special.bos);
        }
        let order = &self.special_order;
        let frags = special::partition(order, text, parse_special, literal);
        match &self.algo {
            Algo::Bpe { bpe, pre, .. } => {
                for f in frags {
                    match f {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(r) => {
                            let piece = text.get(r).unwrap_or_default();
                            for w in pre.split(piece)? {
                                let word = piece.as_bytes().get(w).unwrap_or_default();
                                bpe.encode_word(&self.vocab, word, &mut out);
                            }
                        }
                    }
                }
            }
            Algo::Spm(spm) => {
                let mut prev_special = true; // the first fragment gets the prefix space
                for f in frags {
                    match f {
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        Fragment::Text(r) => {
                            let raw = text.get(r).unwrap_or_default();
                            let prefix = self.vocab.add_space_prefix && prev_special;
                            let mut s = String::with_capacity(raw.len() * 3 + 3);
                            if prefix {
                                s.push('\u{2581}');
                            }
                            s.extend(raw.chars().map(|c| if c == ' ' { '\u{2581}' } else { c }));
                            spm.encode(&self.vocab, &s, &mut out)?;
                            prev_special = false;
                        }
                    }
                }
            }
        }
        if add_special && self.vocab.add_eos {
            out.extend(self.vocab.special.eos);
        }
        Ok(out)
    }

    fn check(&self, id: TokenId) -> Result<usize, TokenizerError> {
        let i = id as usize;
        if i < self.pieces.len() {
            Ok(i)
        } else {
            Err(TokenizerError::TokenOutOfRange {
                id,
                n_vocab: self.n_vocab(),
            })
        }
    }

    /// The bytes of one token. Control and unknown tokens give nothing unless `special`.
    pub fn token_to_piece(&self, id: TokenId, special: bool) -> Result<&[u8], TokenizerError> {
        let i = self.check(id)?;
        let hidden = !special && self.vocab.token_type(id).is_some_and(TokenType::is_special);
        Ok(if hidden {
            &[]
        } else {
            self.pieces.get(i).map_or(&[], Vec::as_slice)
        })
    }

    /// Decode to bytes (llama.cpp's `llama_detokenize`, clean-up pass included).
    pub fn decode_bytes(
        &self,
        ids: &[TokenId],
        opts: DecodeOptions,
    ) -> Result<Vec<u8>, TokenizerError> {
        let mut ids = ids;
        let mut strip_space = self.vocab.add_space_prefix;
        if opts.remove_special && self.vocab.add_bos {
            if let (Some(&first), Some(bos)) = (ids.first(), self.vocab.special.bos) {
                if first == bos {
                    strip_space = false;
                    ids = ids.get(1..).unwrap_or_default();
                }
            }
        }
        if opts.remove_special && self.vocab.add_eos {
            if let (Some((&last, rest)), Some(eos)) = (ids.split_last(), self.vocab.special.eos) {
                if last == eos {
                    ids = rest;
                }
            }
        }
        let mut out = Vec::new();
        for &id in ids {
            let mut piece = self.token_to_piece(id, opts.unparse_special)?;
            if strip_space {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
            }
            strip_space = false;
            out.extend_from_slice(piece);
        }
        Ok(if self.vocab.clean_spaces {
            decode::clean_spaces(&out)
        } else {
            out
        })
    }

    /// Decode to text (invalid UTF-8 becomes U+FFFD); `special` renders control tokens, as
    /// llama.cpp's `common_detokenize(…, special)`.
    pub fn decode(&self, ids: &[TokenId], special: bool) -> Result<String, TokenizerError> {
        self.decode_with(
            ids,
            DecodeOptions {
                remove_special: false,
                unparse_special: special,
            },
        )
    }

    pub fn decode_with(
        &self,
        ids: &[TokenId],
        opts: DecodeOptions,
    ) -> Result<String, TokenizerError> {
        let bytes = self.decode_bytes(ids, opts)?;
        Ok(String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// A streaming decoder for generated ids (no leading-space strip, no clean-up pass, like
    /// llama.cpp's per-token `token_to_piece`).
    pub fn stream_decoder(&self, special: bool) -> StreamDecoder<'_> {
        StreamDecoder {
            tok: self,
            utf8: Utf8Stream::new(),
            special,
        }
    }

    /// The chat template: `override_source` (e.g. from `--chat-template-file`) or the model's
    /// `tokenizer.chat_template`; it drops the BOS/EOS texts this tokenizer adds itself
    /// ([`ChatTemplate::strip_added_special`]).
    pub fn chat_template(
        &self,
        override_source: Option<&str>,
    ) -> Result<ChatTemplate, TokenizerError> {
        let source = override_source
            .or(self.chat_template.as_deref())
            .ok_or(TokenizerError::NoChatTemplate)?;
        let text = |id: Option<TokenId>| id.and_then(|i| self.vocab.text(i)).unwrap_or_default();
        Ok(ChatTemplate::new(
            source,
            text(self.vocab.special.bos),
            text(self.vocab.special.eos),
        )?
        .strip_added_special(self.vocab.add_bos, self.vocab.add_eos))
    }

    /// The model's own template text, if it has one.
    pub fn chat_template_source(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    pub fn n_vocab(&self) -> u32 {
        self.vocab.len() as u32
    }
    pub fn kind(&self) -> ModelKind {
        self.kind
    }
    /// `tokenizer.ggml.pre` as written in the file.
    pub fn pre(&self) -> Option<&str> {
        self.pre.as_deref()
    }
    /// The pre-tokenizer family flint runs (`llama3`, `qwen2`, `starcoder`, `gpt2` …); `None`
    /// for SentencePiece models.
    pub fn pre_kind(&self) -> Option<&'static str> {
        match &self.algo {
            Algo::Bpe { pre_kind, .. } => Some(pre_kind),
            Algo::Spm(_) => None,
        }
    }
    /// Number of BPE merges (0 for SentencePiece).
    pub fn n_merges(&self) -> usize {
        match &self.algo {
            Algo::Bpe { bpe, .. } => bpe.n_merges(),
            Algo::Spm(_) => 0,
        }
    }
    pub fn special_ids(&self) -> SpecialIds {
        self.vocab.special
    }
    pub fn bos_id(&self) -> Option<TokenId> {
        self.vocab.special.bos
    }
    pub fn eos_id(&self) -> Option<TokenId> {
        self.vocab.special.eos
    }
    /// End of generation: EOS, EOT, EOM and the well-known end-of-turn tokens.
    pub fn is_eog(&self, id: TokenId) -> bool {
        self.vocab.eog.binary_search(&id).is_ok()
    }
    pub fn eog_ids(&self) -> &[TokenId] {
        &self.vocab.eog
    }
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }
    /// Override `add_bos_token`; fails if the model has no BOS.
    pub fn set_add_bos(&mut self, yes: bool) -> Result<(), TokenizerError> {
        let old = self.vocab.add_bos;
        self.vocab.add_bos = yes;
        self.vocab
            .check_add_flags()
            .inspect_err(|_| self.vocab.add_bos = old)
    }
    /// Override `add_eos_token`; fails if the model has no EOS.
    pub fn set_add_eos(&mut self, yes: bool) -> Result<(), TokenizerError> {
        let old = self.vocab.add_eos;
        self.vocab.add_eos = yes;
        self.vocab
            .check_add_flags()
            .inspect_err(|_| self.vocab.add_eos = old)
    }
    /// The vocabulary text of a token (`Ġworld`, `▁the`, `<|im_end|>`).
    pub fn token_text(&self, id: TokenId) -> Option<&str> {
        self.vocab.text(id)
    }
    pub fn token_id(&self, text: &str) -> Option<TokenId> {
        self.vocab.id(text)
    }
    pub fn token_type(&self, id: TokenId) -> Option<TokenType> {
        self.vocab.token_type(id)
    }
    pub fn token_score(&self, id: TokenId) -> Option<f32> {
        self.vocab.scores.get(id as usize).copied()
    }
}
