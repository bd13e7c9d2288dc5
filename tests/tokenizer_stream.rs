//! The streaming UTF-8 decoder: for any byte string and any way of cutting it into pushes, the
//! concatenated output equals `String::from_utf8_lossy` of the whole, a valid text never shows
//! a replacement character, and only the end of the stream flushes an unfinished character.

use flint::tokenizer::Utf8Stream;
use proptest::prelude::*;

fn stream(bytes: &[u8], cuts: &[usize]) -> (Vec<String>, String) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut s = Utf8Stream::new();
    let mut parts = Vec::new();
    let mut at = 0;
    for c in cuts.into_iter().chain([bytes.len()]) {
        parts.push(s.push(&bytes[at..c]));
        at = c;
    }
    let tail = s.finish();
    (parts, tail)
}

proptest! {
    #[test]
    fn any_split_of_valid_text_gives_the_text(text in "\\PC{0,40}", cuts in prop::collection::vec(0usize..200, 0..12)) {
        let (parts, tail) = stream(text.as_bytes(), &cuts);
        let broken = parts.iter().any(|p| p.contains(char::REPLACEMENT_CHARACTER));
        prop_assert!(!broken || text.contains(char::REPLACEMENT_CHARACTER));
        prop_assert_eq!(tail, "");
        prop_assert_eq!(parts.concat(), text);
    }

    #[test]
    fn any_split_of_any_bytes_is_lossy_utf8(bytes in prop::collection::vec(any::<u8>(), 0..64), cuts in prop::collection::vec(0usize..100, 0..12)) {
        let (parts, tail) = stream(&bytes, &cuts);
        prop_assert_eq!(parts.concat() + &tail, String::from_utf8_lossy(&bytes).into_owned());
    }
}

#[test]
fn multibyte_characters_wait_for_their_last_byte() {
    for ch in ['é', '€', '𝄞', '🎉'] {
        let mut buf = [0u8; 4];
        let b = ch.encode_utf8(&mut buf).as_bytes().to_vec();
        let mut s = Utf8Stream::new();
        for (i, byte) in b.iter().enumerate() {
            let out = s.push(&[*byte]);
            if i + 1 < b.len() {
                assert_eq!(out, "", "{ch}: emitted early at byte {i}");
                assert_eq!(s.pending().len(), i + 1);
            } else {
                assert_eq!(out, ch.to_string());
            }
        }
        // Cut short: the end of the stream flushes one replacement character.
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(&b[..b.len() - 1]), "");
        assert_eq!(s.finish(), "\u{FFFD}");
        assert!(s.pending().is_empty());
    }
    // A byte that can never be valid comes out at once, without waiting for the stream end.
    let mut s = Utf8Stream::new();
    assert_eq!(s.push(&[b'a', 0xFF, b'b']), "a\u{FFFD}b");
    assert_eq!(s.push(&[0xE2, 0x82]), "");
    assert_eq!(s.push(b"x"), "\u{FFFD}x");
}
