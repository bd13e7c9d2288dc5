//! Special-token partitioning, before any pre-tokenization: llama.cpp's
//! `tokenizer_st_partition`.
//!
//! The special tokens (control, user-defined and unknown types) are tried longest first; each
//! one splits every remaining raw-text fragment at its non-overlapping occurrences (leftmost
//! first), so a special token is never split or merged by the regex or the BPE. Without
//! `parse_special`, control and unknown tokens are left as text and only user-defined tokens are
//! matched (as Hugging Face tokenizers do for added tokens).
//!
//! Byte ranges marked literal (special-token text a client wrote into a chat message) are read
//! as if `parse_special` were off, and no special token is matched across their edges; the text
//! around them joins them again before the BPE, so the ids are those of the plain-text encoding.

use std::ops::Range;

use super::vocab::{TokenId, Vocab};

/// A piece of the input: raw text (a byte range) or one special token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(Range<usize>),
    Token(TokenId),
}

/// A piece while partitioning: text knows whether control tokens may be matched in it.
enum Part {
    Text { range: Range<usize>, parse: bool },
    Token(TokenId),
}

/// Split `text` at the special tokens of `order` (longest first). `literal` holds sorted,
/// disjoint byte ranges on character boundaries that are read without `parse_special`.
pub(crate) fn partition(
    vocab: &Vocab,
    order: &[TokenId],
    text: &str,
    parse_special: bool,
    literal: &[Range<usize>],
) -> Vec<Fragment> {
    let mut parts = initial(text.len(), parse_special, literal);
    for &id in order {
        let Some(special) = vocab.text(id) else {
            continue;
        };
        let control = vocab.token_type(id).is_some_and(|t| t.is_special());
        if special.is_empty() || !text.contains(special) {
            continue;
        }
        let mut next = Vec::with_capacity(parts.len() + 2);
        for p in parts {
            let (r, parse) = match p {
                Part::Text { range, parse } if parse || !control => (range, parse),
                other => {
                    next.push(other);
                    continue;
                }
            };
            let piece = text.get(r.clone()).unwrap_or_default();
            let mut last = 0;
            for (pos, m) in piece.match_indices(special) {
                if pos > last {
                    let range = r.start + last..r.start + pos;
                    next.push(Part::Text { range, parse });
                }
                next.push(Part::Token(id));
                last = pos + m.len();
            }
            if last < piece.len() {
                let range = r.start + last..r.end;
                next.push(Part::Text { range, parse });
            }
        }
        parts = next;
    }
    merge(parts)
}

/// The text cut at the edges of the literal ranges.
fn initial(len: usize, parse_special: bool, literal: &[Range<usize>]) -> Vec<Part> {
    let mut parts = Vec::with_capacity(2 * literal.len() + 1);
    let mut at = 0;
    for r in literal {
        let (start, end) = (r.start.clamp(at, len), r.end.min(len));
        if start >= end {
            continue;
        }
        if start > at {
            parts.push(Part::Text {
                range: at..start,
                parse: parse_special,
            });
        }
        parts.push(Part::Text {
            range: start..end,
            parse: false,
        });
        at = end;
    }
    if at < len {
        parts.push(Part::Text {
            range: at..len,
            parse: parse_special,
        });
    }
    parts
}

/// Adjacent text pieces become one fragment again.
fn merge(parts: Vec<Part>) -> Vec<Fragment> {
    let mut out: Vec<Fragment> = Vec::with_capacity(parts.len());
    for p in parts {
        match (p, out.last_mut()) {
            (Part::Text { range, .. }, Some(Fragment::Text(prev))) if prev.end == range.start => {
                prev.end = range.end;
            }
            (Part::Text { range, .. }, _) => out.push(Fragment::Text(range)),
            (Part::Token(id), _) => out.push(Fragment::Token(id)),
        }
    }
    out
}
