//! SentencePiece-style BPE (`tokenizer.ggml.model = "llama"`), as llama.cpp's
//! `llm_tokenizer_spm_session` does it.
//!
//! The caller escapes spaces to `▁` (U+2581) and adds the prefix space. The text starts as one
//! symbol per UTF-8 character; every adjacent pair whose concatenation is a token is queued
//! with that token's score, and the best pair (highest score; ties: leftmost) is merged,
//! repeatedly — stale queue entries are skipped when popped. There is no pre-tokenization, so a
//! fragment is one "word": O(n log n) in its length. A final symbol that is not a token is
//! emitted byte by byte through the `<0xHH>` byte tokens (byte fallback), else the one-byte
//! token, else the unknown token.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::error::TokenizerError;
use super::vocab::{TokenId, Vocab};

const NONE: usize = usize::MAX;

#[derive(Debug, Clone, Copy)]
struct Sym {
    start: usize,
    end: usize,
    prev: usize,
    next: usize,
    alive: bool,
}

#[derive(Debug, Clone, Copy)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost pair.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}

/// Byte-fallback table of a SentencePiece vocabulary.
#[derive(Debug, Clone)]
pub(crate) struct Spm {
    byte_token: [Option<TokenId>; 256],
}

impl Spm {
    pub(crate) fn new(vocab: &Vocab) -> Spm {
        let mut byte_token = [None; 256];
        for (b, slot) in (0..=255u8).zip(byte_token.iter_mut()) {
            *slot = vocab.id(&format!("<0x{b:02X}>")).or_else(|| {
                // llama.cpp falls back to the byte as a one-character token (ASCII only here).
                b.is_ascii()
                    .then(|| vocab.id(char::from(b).encode_utf8(&mut [0; 4])))
                    .flatten()
            });
        }
        Spm { byte_token }
    }

    /// Encode an already escaped fragment onto `out`.
    pub(crate) fn encode(
        &self,
        vocab: &Vocab,
        text: &str,
        out: &mut Vec<TokenId>,
    ) -> Result<(), TokenizerError> {
        let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        let n = starts.len();
        let mut syms: Vec<Sym> = (0..n)
            .map(|i| Sym {
                start: starts.get(i).copied().unwrap_or(0),
                end: starts.get(i + 1).copied().unwrap_or(text.len()),
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == n { NONE } else { i + 1 },
                alive: true,
            })
            .collect();
        let mut heap = BinaryHeap::with_capacity(n);
        for i in 1..n {
            push_pair(vocab, text, &syms, i - 1, i, &mut heap);
        }
        while let Some(b) = heap.pop() {
            let (Some(&l), Some(&r)) = (syms.get(b.left), syms.get(b.right)) else {
                continue;
            };
            if !l.alive || !r.alive || l.next != b.right || r.end - l.start != b.size {
                continue; // stale
            }
            if let Some(s) = syms.get_mut(b.left) {
                s.end = r.end;
                s.next = r.next;
            }
            if let Some(s) = syms.get_mut(b.right) {
                s.alive = false;
            }
            if let Some(s) = syms.get_mut(r.next) {
                s.prev = b.left;
            }
            if l.prev != NONE {
                push_pair(vocab, text, &syms, l.prev, b.left, &mut heap);
            }
            if r.next != NONE {
                push_pair(vocab, text, &syms, b.left, r.next, &mut heap);
            }
        }
        let mut i = if n == 0 { NONE } else { 0 };
        while let Some(s) = syms.get(i) {
            let piece = text.get(s.start..s.end).unwrap_or_default();
            match vocab.id(piece) {
                Some(id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        let id = self.byte_token[b as usize]
                            .or(vocab.special.unk)
                            .ok_or(TokenizerError::NoTokenForByte { byte: b })?;
                        out.push(id);
                    }
                }
            }
            i = s.next;
        }
        Ok(())
    }
}

fn push_pair(
    vocab: &Vocab,
    text: &str,
    syms: &[Sym],
    left: usize,
    right: usize,
    heap: &mut BinaryHeap<Bigram>,
) {
    let (Some(l), Some(r)) = (syms.get(left), syms.get(right)) else {
        return;
    };
    let Some(merged) = text.get(l.start..r.end) else {
        return;
    };
    if let Some(id) = vocab.id(merged) {
        let score = vocab.scores.get(id as usize).copied().unwrap_or(0.0);
        heap.push(Bigram {
            score,
            left,
            right,
            size: merged.len(),
        });
    }
}
