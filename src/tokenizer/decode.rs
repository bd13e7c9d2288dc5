//! Decoding: token → piece bytes, ids → text (llama.cpp's `token_to_piece` and `detokenize`),
//! and the streaming decoder that never emits a broken UTF-8 sequence.
//!
//! A piece is bytes, not text: a byte token (`<0xE6>`) or a byte-level BPE token can hold part
//! of a character. [`Utf8Stream`] holds back an incomplete sequence until it completes, emits
//! U+FFFD for bytes that can never be valid, and only flushes an incomplete tail (as U+FFFD)
//! when the stream ends. The concatenated output for any split of a byte string equals
//! `String::from_utf8_lossy` of the whole string.

use super::bpe::decode_byte_text;
use super::error::TokenizerError;
use super::vocab::{ModelKind, TokenId, TokenType, Vocab};
use super::Tokenizer;

/// The piece of every token as llama.cpp caches it (`special = true`): control, unknown and
/// user-defined tokens as their text; normal tokens unescaped (`▁` → space for SentencePiece,
/// byte characters → bytes for byte-level BPE); byte tokens as their byte; unused and undefined
/// tokens as nothing.
pub(crate) fn build_pieces(vocab: &Vocab, kind: ModelKind) -> Vec<Vec<u8>> {
    vocab
        .texts
        .iter()
        .zip(&vocab.types)
        .map(|(text, ty)| match ty {
            TokenType::Control | TokenType::Unknown | TokenType::UserDefined => {
                text.as_bytes().to_vec()
            }
            TokenType::Normal => match kind {
                ModelKind::Spm => text.replace('\u{2581}', " ").into_bytes(),
                ModelKind::Bpe => {
                    let mut out = Vec::with_capacity(text.len());
                    decode_byte_text(text, &mut out);
                    out
                }
            },
            TokenType::Byte => text
                .get(3..5)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .map(|b| vec![b])
                .unwrap_or_default(),
            TokenType::Unused | TokenType::Undefined => Vec::new(),
        })
        .collect()
}

/// llama.cpp's `clean_spaces` post-pass: drop the space before `?!.,`, around a lone `'`, and
/// before `'s 'm 're 've`.
pub(crate) fn clean_spaces(text: &[u8]) -> Vec<u8> {
    let at = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    // Pass 1: " ?", " !", " .", " ,".
    let mut a = Vec::with_capacity(text.len());
    for (i, &x) in text.iter().enumerate() {
        if i > 0 && at(text, i - 1) == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            a.pop();
        }
        a.push(x);
    }
    // Pass 2: " ' " → "'".
    let mut b = Vec::with_capacity(a.len());
    let mut i = 0;
    while i < a.len() {
        let x = at(&a, i);
        if i > 0 && x == b'\'' && i + 1 < a.len() && at(&a, i - 1) == b' ' && at(&a, i + 1) == b' '
        {
            b.pop();
            i += 1;
            if let Some(s) = a.get_mut(i) {
                *s = 0; // the skipped space no longer counts as a space for the next check
            }
        }
        b.push(x);
        i += 1;
    }
    // Pass 3: " 's", " 'm", " 're", " 've" (not " 't", " 'd", " 'll").
    let mut c = Vec::with_capacity(b.len());
    for (i, &x) in b.iter().enumerate() {
        if i > 0 && at(&b, i - 1) == b' ' && x == b'\'' && i + 1 < b.len() {
            let (x1, x2) = (at(&b, i + 1), at(&b, i + 2));
            let drop = matches!(x1, b's' | b'm')
                || (i + 2 < b.len() && matches!((x1, x2), (b'r', b'e') | (b'v', b'e')));
            if drop {
                c.pop();
            }
        }
        c.push(x);
    }
    c
}

/// Bytes in, text out: an incomplete UTF-8 sequence is held back until it completes.
#[derive(Debug, Clone, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Utf8Stream {
        Utf8Stream::default()
    }

    /// Append bytes; returns the text that is now complete (possibly empty). Bytes that can
    /// never start or continue a valid sequence come out as U+FFFD at once.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = tail.get(n..).unwrap_or_default();
                        }
                        None => {
                            rest = tail; // an incomplete sequence at the end: wait for more
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// End of stream: the held-back bytes, if any, as U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    /// Bytes held back (an incomplete sequence, at most 3 bytes).
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }
}

/// Ids in, text out, one token at a time; see [`Utf8Stream`].
#[derive(Debug, Clone)]
pub struct StreamDecoder<'a> {
    pub(crate) tok: &'a Tokenizer,
    pub(crate) utf8: Utf8Stream,
    pub(crate) special: bool,
}

impl StreamDecoder<'_> {
    /// Add one token; returns the text completed by it (possibly empty).
    pub fn push(&mut self, id: TokenId) -> Result<String, TokenizerError> {
        let piece = self.tok.token_to_piece(id, self.special)?;
        Ok(self.utf8.push(piece))
    }

    /// End of stream: an unfinished character comes out as U+FFFD.
    pub fn finish(&mut self) -> String {
        self.utf8.finish()
    }
}
