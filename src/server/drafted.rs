//! Which streamed characters came from accepted drafts. The worker pushes each token's text
//! with whether the drafter proposed it (and the target accepted it); text leaves through the
//! stop matcher as a prefix of what went in, so each emitted piece takes its marks off the
//! front. A piece's marks are `[start, end)` ranges in Unicode scalar values (what JavaScript's
//! `Array.from(text)` counts), sent as `draft_accepted` on stream chunks (docs/SERVER.md).

use std::collections::VecDeque;
use std::ops::Deref;

/// Generated text and the ranges of it that are accepted drafts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Piece {
    pub text: String,
    /// `[start, end)` in chars of `text`, in order, not touching.
    pub drafted: Vec<[usize; 2]>,
}

impl Deref for Piece {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl From<String> for Piece {
    fn from(text: String) -> Piece {
        Piece {
            text,
            drafted: Vec::new(),
        }
    }
}

impl From<&str> for Piece {
    fn from(text: &str) -> Piece {
        Piece::from(text.to_string())
    }
}

/// Bytes pushed and not yet emitted, as runs of (length in bytes, drafted).
#[derive(Debug, Default)]
pub struct Marks {
    runs: VecDeque<(usize, bool)>,
}

impl Marks {
    /// `bytes` more bytes of text went in, all drafted or all not.
    pub fn push(&mut self, bytes: usize, drafted: bool) {
        if bytes == 0 {
            return;
        }
        match self.runs.back_mut() {
            Some((n, d)) if *d == drafted => *n += bytes,
            _ => self.runs.push_back((bytes, drafted)),
        }
    }

    /// `text` came out (the next bytes pushed, in order): it with its drafted ranges. Bytes
    /// beyond what was pushed count as not drafted.
    pub fn take(&mut self, text: String) -> Piece {
        let mut drafted: Vec<[usize; 2]> = Vec::new();
        let (mut at, mut chars) = (0usize, 0usize);
        while at < text.len() {
            let Some((n, d)) = self.runs.front_mut() else {
                break;
            };
            // Whole characters only: a run that ends inside one gives it to the next run.
            let mut end = (at + *n).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            let span = text[at..end].chars().count();
            if *d && span > 0 {
                match drafted.last_mut() {
                    Some(last) if last[1] == chars => last[1] += span,
                    _ => drafted.push([chars, chars + span]),
                }
            }
            let used = end - at;
            if used >= *n {
                let over = used - *n;
                self.runs.pop_front();
                self.consume(over);
            } else {
                *n -= used;
            }
            at = end;
            chars += span;
        }
        Piece { text, drafted }
    }

    /// Drops `bytes` from the front (a character that straddled runs).
    fn consume(&mut self, mut bytes: usize) {
        while bytes > 0 {
            let Some((n, _)) = self.runs.front_mut() else {
                return;
            };
            if *n > bytes {
                *n -= bytes;
                return;
            }
            bytes -= *n;
            self.runs.pop_front();
        }
    }
}

/// A whole answer's text and its drafted byte ranges, for content that a reader (reasoning,
/// tool calls) passes on in its own pieces: each content delta is found in the text where the
/// previous one ended (content is a contiguous part of the text) and takes the marks there.
#[derive(Debug, Default)]
pub struct Located {
    raw: String,
    /// Drafted `[start, end)` byte ranges of `raw`, in order.
    marks: Vec<[usize; 2]>,
    /// Where the content sent so far ends in `raw`.
    end: usize,
}

impl Located {
    pub fn push(&mut self, piece: &Piece) {
        let base = self.raw.len();
        let byte_at: Vec<usize> = piece
            .text
            .char_indices()
            .map(|(i, _)| i)
            .chain([piece.text.len()])
            .collect();
        for &[s, e] in &piece.drafted {
            if let (Some(&bs), Some(&be)) = (byte_at.get(s), byte_at.get(e)) {
                match self.marks.last_mut() {
                    Some(last) if last[1] == base + bs => last[1] = base + be,
                    _ => self.marks.push([base + bs, base + be]),
                }
            }
        }
        self.raw.push_str(&piece.text);
    }

    /// The drafted ranges (in chars of `content`) of the next content delta; none when it is
    /// not found in the text.
    pub fn content(&mut self, content: &str) -> Vec<[usize; 2]> {
        let Some(at) = self.raw.get(self.end..).and_then(|t| t.find(content)) else {
            return Vec::new();
        };
        let start = self.end + at;
        let end = start + content.len();
        self.end = end;
        let chars = |b: usize| content[..b - start].chars().count();
        self.marks
            .iter()
            .filter(|[s, e]| *s < end && *e > start)
            .map(|&[s, e]| [s.max(start), e.min(end)])
            .filter(|&[s, e]| {
                content.is_char_boundary(s - start) && content.is_char_boundary(e - start)
            })
            .map(|[s, e]| [chars(s), chars(e)])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_follow_the_emitted_prefix() {
        let mut m = Marks::default();
        m.push(3, false); // "The"
        m.push(4, true); // " cat"
        m.push(3, true); // " is"
        let p = m.take("The ca".into());
        assert_eq!(p.drafted, vec![[3, 6]]);
        m.push(2, false); // " a"
        let p = m.take("t is a".into());
        assert_eq!(p.drafted, vec![[0, 4]]);
        assert_eq!(m.take("x".into()).drafted, Vec::<[usize; 2]>::new());
    }

    #[test]
    fn counts_chars_not_bytes() {
        let mut m = Marks::default();
        m.push(2, false); // "é"
        m.push(4, true); // "€a" (3 + 1 bytes)
        let p = m.take("é€a".into());
        assert_eq!(p.drafted, vec![[1, 3]]);
    }

    #[test]
    fn a_character_split_over_runs_goes_to_the_first() {
        let mut m = Marks::default();
        m.push(1, true); // first byte of "€"
        m.push(3, false); // its other two, then "a"
        let p = m.take("€a".into());
        assert_eq!(p.drafted, vec![[0, 1]]);
        assert!(m.runs.is_empty());
    }

    #[test]
    fn content_deltas_find_their_marks() {
        let mut l = Located::default();
        l.push(&Piece {
            text: "<think>hm</think>\n\nHé".into(),
            drafted: vec![[7, 9], [20, 21]],
        });
        l.push(&Piece {
            text: "llo".into(),
            drafted: vec![[0, 2]],
        });
        assert_eq!(l.content("Hé"), vec![[1, 2]]);
        assert_eq!(l.content("llo"), vec![[0, 2]]);
        // Drafted pieces that meet give one range.
        l.push(&Piece {
            text: "ab".into(),
            drafted: vec![[1, 2]],
        });
        l.push(&Piece {
            text: "cd".into(),
            drafted: vec![[0, 1]],
        });
        assert_eq!(l.content("abcd"), vec![[1, 3]]);
        assert_eq!(l.content("absent"), Vec::<[usize; 2]>::new());
    }
}
