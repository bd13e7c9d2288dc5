//! Byte-level BPE (GPT-2 style, `tokenizer.ggml.model = "gpt2"`).
//!
//! Every byte of a pre-tokenized word is first mapped to a printable character (GPT-2's
//! `bytes_to_unicode`: printable Latin-1 bytes map to themselves, the other 68 bytes to
//! U+0100…U+0143 in order), so each starting symbol is one byte. Then the adjacent pair with the
//! lowest merge rank (its line number in `tokenizer.ggml.merges`; ties: leftmost) is merged,
//! repeatedly, through a priority queue whose stale entries are skipped when popped — llama.cpp's
//! `llm_tokenizer_bpe_session`, O(n log n) per word. A final symbol that is not a token falls
//! back to the tokens of its single bytes.
//!
//! Merge sides and results are interned as "pieces": token ids for strings in the vocabulary,
//! ids past the vocabulary for the others, so a merge may name strings that are not tokens
//! (llama.cpp keeps such merges too; their results fall back to bytes).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::OnceLock;

use super::vocab::{TokenId, Vocab};

/// GPT-2's byte → character table.
pub(crate) fn byte_chars() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = ['\0'; 256];
        let mut n = 0u32;
        for (b, slot) in t.iter_mut().enumerate() {
            let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
            let cp = if printable {
                b as u32
            } else {
                n += 1;
                255 + n
            };
            *slot = char::from_u32(cp).unwrap_or('\u{FFFD}');
        }
        t
    })
}

/// The byte a GPT-2 byte character stands for (`None` for any other character).
pub(crate) fn char_byte(c: char) -> Option<u8> {
    static TABLE: OnceLock<HashMap<char, u8>> = OnceLock::new();
    let t = TABLE.get_or_init(|| {
        (0..=255u8)
            .zip(byte_chars().iter())
            .map(|(b, &c)| (c, b))
            .collect()
    });
    t.get(&c).copied()
}

/// The bytes a byte-level token text stands for; a character outside the table (a malformed
/// vocabulary) is kept as its own UTF-8.
pub(crate) fn decode_byte_text(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match char_byte(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
}

const NONE: usize = usize::MAX;

/// Queued merges: (rank, left, right, left piece, right piece, merged piece), lowest first.
type PairHeap = BinaryHeap<Reverse<(u32, usize, usize, u32, u32, u32)>>;

#[derive(Debug, Clone, Copy)]
struct Sym {
    piece: Option<u32>,
    /// Byte range in the word.
    start: usize,
    end: usize,
    prev: usize,
    next: usize,
    alive: bool,
}

/// Merge table and byte tables of a byte-level BPE vocabulary.
#[derive(Debug, Clone)]
pub(crate) struct Bpe {
    n_vocab: u32,
    /// Interned strings that are not tokens, ids from `n_vocab` on.
    extra: HashMap<String, u32>,
    /// (left piece, right piece) → (rank, merged piece).
    merges: HashMap<(u32, u32), (u32, u32)>,
    byte_piece: [Option<u32>; 256],
    byte_token: [Option<TokenId>; 256],
    ignore_merges: bool,
}

impl Bpe {
    pub(crate) fn new(vocab: &Vocab, merges: &[String], ignore_merges: bool) -> Bpe {
        let mut bpe = Bpe {
            n_vocab: vocab.len() as u32,
            extra: HashMap::new(),
            merges: HashMap::with_capacity(merges.len()),
            byte_piece: [None; 256],
            byte_token: [None; 256],
            ignore_merges,
        };
        for (b, c) in byte_chars().iter().enumerate() {
            let id = vocab.id(c.encode_utf8(&mut [0; 4]));
            bpe.byte_token[b] = id;
            bpe.byte_piece[b] = id;
        }
        for (rank, line) in (0u32..).zip(merges) {
            // llama.cpp splits at the first space after the first byte.
            let Some(pos) = line.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1) else {
                continue;
            };
            let (left, right) = (&line[..pos], &line[pos + 1..]);
            let merged = format!("{left}{right}");
            let l = bpe.intern(vocab, left);
            let r = bpe.intern(vocab, right);
            let m = bpe.intern(vocab, &merged);
            bpe.merges.entry((l, r)).or_insert((rank, m));
        }
        // A byte character that only appears in merges (not a token) can still merge.
        for (b, c) in byte_chars().iter().enumerate() {
            if bpe.byte_piece[b].is_none() {
                bpe.byte_piece[b] = bpe.extra.get(c.encode_utf8(&mut [0; 4])).copied();
            }
        }
        bpe
    }

    fn intern(&mut self, vocab: &Vocab, text: &str) -> u32 {
        if let Some(id) = vocab.id(text) {
            return id;
        }
        let next = self.n_vocab.saturating_add(self.extra.len() as u32);
        *self.extra.entry(text.to_string()).or_insert(next)
    }

    pub(crate) fn n_merges(&self) -> usize {
        self.merges.len()
    }

    /// Encode one pre-tokenized word (raw bytes, not yet byte-mapped) onto `out`.
    pub(crate) fn encode_word(&self, vocab: &Vocab, word: &[u8], out: &mut Vec<TokenId>) {
        if word.is_empty() {
            return;
        }
        if self.ignore_merges {
            let mapped: String = word.iter().map(|&b| byte_chars()[b as usize]).collect();
            if let Some(id) = vocab.id(&mapped) {
                out.push(id);
                return;
            }
        }
        let mut syms: Vec<Sym> = (0..word.len())
            .map(|i| Sym {
                piece: word.get(i).and_then(|&b| self.byte_piece[b as usize]),
                start: i,
                end: i + 1,
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == word.len() { NONE } else { i + 1 },
                alive: true,
            })
            .collect();
        let mut heap: PairHeap = BinaryHeap::with_capacity(word.len());
        for i in 1..syms.len() {
            self.push_pair(&syms, i - 1, i, &mut heap);
        }
        while let Some(Reverse((_, left, right, lp, rp, merged))) = heap.pop() {
            let (Some(&l), Some(&r)) = (syms.get(left), syms.get(right)) else {
                continue;
            };
            if !l.alive || !r.alive || l.next != right || l.piece != Some(lp) || r.piece != Some(rp)
            {
                continue; // stale: one side changed since this pair was queued
            }
            if let Some(s) = syms.get_mut(left) {
                s.piece = Some(merged);
                s.end = r.end;
                s.next = r.next;
            }
            if let Some(s) = syms.get_mut(right) {
                s.alive = false;
            }
            if let Some(s) = syms.get_mut(r.next) {
                s.prev = left;
            }
            if l.prev != NONE {
                self.push_pair(&syms, l.prev, left, &mut heap);
            }
            if r.next != NONE {
                self.push_pair(&syms, left, r.next, &mut heap);
            }
        }
        let mut i = 0;
        while let Some(s) = syms.get(i) {
            match s.piece.filter(|&p| p < self.n_vocab) {
                Some(id) => out.push(id),
                // Not a token: the tokens of its bytes (bytes without one are dropped, as in
                // llama.cpp).
                None => out.extend(
                    word.get(s.start..s.end)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|&b| self.byte_token[b as usize]),
                ),
            }
            i = s.next;
        }
    }

    fn push_pair(&self, syms: &[Sym], left: usize, right: usize, heap: &mut PairHeap) {
        let (Some(lp), Some(rp)) = (
            syms.get(left).and_then(|s| s.piece),
            syms.get(right).and_then(|s| s.piece),
        ) else {
            return;
        };
        if let Some(&(rank, merged)) = self.merges.get(&(lp, rp)) {
            heap.push(Reverse((rank, left, right, lp, rp, merged)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_is_gpt2s() {
        let t = byte_chars();
        assert_eq!(t[b'!' as usize], '!');
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[0], 'Ā');
        assert_eq!(t[0xAD], 'Ń');
        for b in 0..=255u8 {
            assert_eq!(char_byte(t[b as usize]), Some(b));
        }
    }
}
