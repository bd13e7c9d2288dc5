//! Special-token partitioning, before any pre-tokenization: llama.cpp's
//! `tokenizer_st_partition`.
//!
//! The special tokens (control, user-defined and unknown types) are tried longest first; each
//! one splits every remaining raw-text fragment at its non-overlapping occurrences (leftmost
//! first), so a special token is never split or merged by the regex or the BPE. One
//! Aho-Corasick pass finds the occurrences of all of them (Gemma has ~6k control tokens). Without
//! `parse_special`, control and unknown tokens are left as text and only user-defined tokens are
//! matched (as Hugging Face tokenizers do for added tokens).
//!
//! Byte ranges marked literal (special-token text a client wrote into a chat message) are read
//! as if `parse_special` were off, and no special token is matched across their edges; the text
//! around them joins them again before the BPE, so the ids are those of the plain-text encoding.

use std::collections::BTreeMap;
use std::ops::Range;

use aho_corasick::{AhoCorasick, MatchKind};

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

/// The special tokens in match order (longest text first, then by id) and one Aho-Corasick
/// automaton over their texts (pattern `i` is `tokens[i]`), built once per tokenizer.
#[derive(Debug, Clone)]
pub(crate) struct Order {
    /// Each pattern's token and whether it is a control (or unknown) token.
    tokens: Vec<(TokenId, bool)>,
    ac: Option<AhoCorasick>,
}

impl Order {
    pub(crate) fn new(vocab: &Vocab) -> Order {
        let mut tokens = Vec::new();
        let mut texts: Vec<&str> = Vec::new();
        for id in vocab.special_match_order() {
            let Some(text) = vocab.text(id).filter(|t| !t.is_empty()) else {
                continue;
            };
            tokens.push((id, vocab.token_type(id).is_some_and(|t| t.is_special())));
            texts.push(text);
        }
        // Every occurrence (overlapping) is reported: the order decides which are taken.
        let ac = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .build(&texts)
            .ok();
        Order { tokens, ac }
    }
}

/// Split `text` at the special tokens of `order`, as llama.cpp's partition does: the tokens
/// are tried in order, each splitting every remaining text fragment at its non-overlapping
/// occurrences (leftmost first). `literal` holds sorted, disjoint byte ranges on character
/// boundaries that are read without `parse_special`.
///
/// One automaton pass finds every occurrence of every special text (O(text + occurrences),
/// not O(text × specials)); they are then taken in that order: an occurrence is taken when it
/// lies inside one initial part that lets its token match, overlaps no occurrence taken before
/// it, and starts at or after the end of its own token's last one.
pub(crate) fn partition(
    order: &Order,
    text: &str,
    parse_special: bool,
    literal: &[Range<usize>],
) -> Vec<Fragment> {
    let parts: Vec<(Range<usize>, bool)> = initial(text.len(), parse_special, literal)
        .into_iter()
        .filter_map(|p| match p {
            Part::Text { range, parse } => Some((range, parse)),
            Part::Token(_) => None,
        })
        .collect();
    let mut hits: Vec<(usize, usize, usize)> = match &order.ac {
        Some(ac) => ac
            .find_overlapping_iter(text)
            .map(|m| (m.pattern().as_usize(), m.start(), m.end()))
            .collect(),
        None => Vec::new(),
    };
    hits.sort_unstable();
    // Taken occurrences by start: (end, token).
    let mut taken: BTreeMap<usize, (usize, TokenId)> = BTreeMap::new();
    let mut last: Option<(usize, usize)> = None;
    for (p, start, end) in hits {
        let Some(&(id, control)) = order.tokens.get(p) else {
            continue;
        };
        if last.is_some_and(|(lp, le)| lp == p && start < le) {
            continue;
        }
        let k = parts.partition_point(|(r, _)| r.end <= start);
        let Some((range, parse)) = parts.get(k) else {
            continue;
        };
        if end > range.end || start < range.start || (control && !parse) {
            continue;
        }
        if taken
            .range(..end)
            .next_back()
            .is_some_and(|(_, &(e, _))| e > start)
        {
            continue;
        }
        taken.insert(start, (end, id));
        last = Some((p, end));
    }
    let mut out = Vec::with_capacity(parts.len() + 2 * taken.len());
    let mut it = taken.into_iter().peekable();
    for (range, parse) in parts {
        let mut at = range.start;
        while let Some(&(start, (end, id))) = it.peek() {
            if start >= range.end {
                break;
            }
            if start > at {
                out.push(Part::Text {
                    range: at..start,
                    parse,
                });
            }
            out.push(Part::Token(id));
            at = end;
            it.next();
        }
        if at < range.end {
            out.push(Part::Text {
                range: at..range.end,
                parse,
            });
        }
    }
    merge(out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{MetaArray, MetaValue, Metadata};
    use crate::tokenizer::Tokenizer;

    /// llama.cpp's `tokenizer_st_partition` as written there: each special token in order
    /// splits every remaining fragment at its non-overlapping occurrences (leftmost first).
    fn sequential(
        vocab: &Vocab,
        order: &[TokenId],
        text: &str,
        parse_special: bool,
        literal: &[Range<usize>],
    ) -> Vec<Fragment> {
        let mut parts = initial(text.len(), parse_special, literal);
        for &id in order {
            let Some(special) = vocab.text(id).filter(|s| !s.is_empty()) else {
                continue;
            };
            let control = vocab.token_type(id).is_some_and(|t| t.is_special());
            let mut next = Vec::new();
            for p in parts {
                let (r, parse) = match p {
                    Part::Text { range, parse } if parse || !control => (range, parse),
                    other => {
                        next.push(other);
                        continue;
                    }
                };
                let piece = &text[r.clone()];
                let mut last = 0;
                for (pos, m) in piece.match_indices(special) {
                    if pos > last {
                        next.push(Part::Text {
                            range: r.start + last..r.start + pos,
                            parse,
                        });
                    }
                    next.push(Part::Token(id));
                    last = pos + m.len();
                }
                if last < piece.len() {
                    next.push(Part::Text {
                        range: r.start + last..r.end,
                        parse,
                    });
                }
            }
            parts = next;
        }
        merge(parts)
    }

    /// Special tokens that overlap and nest, control (3) and user-defined (4), over the
    /// alphabet `a b c < >`.
    fn vocab() -> Tokenizer {
        let specials = [
            ("<unk>", 2),
            ("ab", 3),
            ("bca", 3),
            ("abc", 4),
            ("<a>", 3),
            ("<a><b>", 4),
            ("aa", 4),
            ("cc", 3),
            ("ca", 4),
            ("c<", 3),
        ];
        let mut texts: Vec<String> = specials.iter().map(|(t, _)| t.to_string()).collect();
        let mut types: Vec<i32> = specials.iter().map(|(_, k)| *k).collect();
        texts.extend(['a', 'b', 'c', '<', '>', '\u{2581}'].map(String::from));
        types.resize(texts.len(), 1);
        let mut m = Metadata::new();
        m.set("tokenizer.ggml.model", MetaValue::String("llama".into()));
        m.set(
            "tokenizer.ggml.scores",
            MetaValue::Array(MetaArray::F32(vec![0.0; texts.len()])),
        );
        m.set(
            "tokenizer.ggml.token_type",
            MetaValue::Array(MetaArray::I32(types)),
        );
        m.set(
            "tokenizer.ggml.tokens",
            MetaValue::Array(MetaArray::String(texts)),
        );
        Tokenizer::from_metadata(&m).expect("a tokenizer")
    }

    #[test]
    fn one_pass_splits_as_the_token_by_token_partition() {
        let t = vocab();
        let order = t.vocab.special_match_order();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let alphabet = ['a', 'b', 'c', '<', '>'];
        for _ in 0..5000 {
            let len = next(24) as usize;
            let text: String = (0..len).map(|_| alphabet[next(5) as usize]).collect();
            let mut literal = Vec::new();
            let mut at = 0;
            while at < len && next(3) == 0 {
                let start = at + next((len - at) as u64) as usize;
                let end = start + next((len - start) as u64 + 1) as usize;
                if end > start {
                    literal.push(start..end);
                }
                at = end.max(start + 1);
            }
            for parse in [false, true] {
                assert_eq!(
                    partition(&t.special_order, &text, parse, &literal),
                    sequential(&t.vocab, &order, &text, parse, &literal),
                    "{text:?} parse {parse} literal {literal:?}"
                );
            }
        }
    }
}
