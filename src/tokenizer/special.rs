//! Special-token partitioning, before any pre-tokenization: llama.cpp's
//! `tokenizer_st_partition`.
//!
//! The special tokens (control, user-defined and unknown types) are tried longest first; each
//! one splits every remaining raw-text fragment at its non-overlapping occurrences (leftmost
//! first), so a special token is never split or merged by the regex or the BPE. Without
//! `parse_special`, control and unknown tokens are left as text and only user-defined tokens are
//! matched (as Hugging Face tokenizers do for added tokens).

use std::ops::Range;

use super::vocab::{TokenId, Vocab};

/// A piece of the input: raw text (a byte range) or one special token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(Range<usize>),
    Token(TokenId),
}

/// Split `text` at the special tokens of `order` (longest first).
pub(crate) fn partition(
    vocab: &Vocab,
    order: &[TokenId],
    text: &str,
    parse_special: bool,
) -> Vec<Fragment> {
    let mut frags = if text.is_empty() {
        Vec::new()
    } else {
        vec![Fragment::Text(0..text.len())]
    };
    for &id in order {
        let Some(special) = vocab.text(id) else {
            continue;
        };
        let skip = !parse_special && vocab.token_type(id).is_some_and(|t| t.is_special());
        if skip || special.is_empty() || !text.contains(special) {
            continue;
        }
        let mut next = Vec::with_capacity(frags.len() + 2);
        for f in frags {
            let Fragment::Text(r) = f else {
                next.push(f);
                continue;
            };
            let piece = text.get(r.clone()).unwrap_or_default();
            let mut last = 0;
            for (pos, m) in piece.match_indices(special) {
                if pos > last {
                    next.push(Fragment::Text(r.start + last..r.start + pos));
                }
                next.push(Fragment::Token(id));
                last = pos + m.len();
            }
            if last < piece.len() {
                next.push(Fragment::Text(r.start + last..r.end));
            }
        }
        frags = next;
    }
    frags
}
