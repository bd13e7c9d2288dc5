//! SentencePiece-style tokenization on a tiny synthetic vocabulary written with `GgufWriter`:
//! merges by score (ties: leftmost), the `▁` prefix space, byte fallback through `<0xHH>`
//! tokens, special and user-defined token matching, BOS/EOS, and decoding. Every expected id
//! list below is worked out by hand from llama.cpp's algorithm (comments show the steps).

use flint::gguf::{Gguf, GgufWriter, MetaArray, MetaValue};
use flint::tokenizer::{DecodeOptions, ModelKind, TokenId, Tokenizer, TokenizerError};

const UNK: TokenId = 0;
const BOS: TokenId = 1;
const EOS: TokenId = 2;
/// Byte tokens `<0x00>`…`<0xFF>` are ids 3…258.
fn byte(b: u8) -> TokenId {
    3 + TokenId::from(b)
}

/// Normal pieces after the byte tokens, with their scores (higher merges first).
const PIECES: &[(&str, f32)] = &[
    ("▁", -1.0),
    ("h", -2.0),
    ("e", -2.0),
    ("l", -2.0),
    ("o", -2.0),
    ("w", -3.0),
    ("r", -3.0),
    ("d", -3.0),
    ("a", -3.0),
    ("▁h", -5.0),
    ("he", -1.0),
    ("ll", -2.0),
    ("llo", -0.5),
    ("hello", -0.2),
    ("▁hello", -0.1),
    ("wo", -3.0),
    ("or", -4.0),
    ("▁w", -2.5),
    ("aa", -1.0),
];
/// A user-defined token (matched even without `parse_special`) after the pieces.
const USER: &str = "<|user|>";

fn piece(text: &str) -> TokenId {
    let i = PIECES.iter().position(|(t, _)| *t == text).unwrap();
    259 + i as TokenId
}

fn user_id() -> TokenId {
    259 + PIECES.len() as TokenId
}

fn writer(byte_tokens: bool) -> GgufWriter {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..=255u8 {
        if byte_tokens {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        } else {
            tokens.push(format!("unused{b}"));
            types.push(5);
        }
        scores.push(0.0);
    }
    for (t, s) in PIECES {
        tokens.push(t.to_string());
        types.push(1);
        scores.push(*s);
    }
    tokens.push(USER.into());
    types.push(4);
    scores.push(0.0);
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", MetaValue::String("llama".into()));
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(tokens)),
    );
    w.set(
        "tokenizer.ggml.scores",
        MetaValue::Array(MetaArray::F32(scores)),
    );
    w.set(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(types)),
    );
    w.set("tokenizer.ggml.bos_token_id", MetaValue::U32(BOS));
    w.set("tokenizer.ggml.eos_token_id", MetaValue::U32(EOS));
    w.set("tokenizer.ggml.unknown_token_id", MetaValue::U32(UNK));
    w
}

fn load(w: &GgufWriter) -> Result<Tokenizer, TokenizerError> {
    let g = Gguf::parse(&w.to_bytes().unwrap()).unwrap();
    Tokenizer::from_gguf(&g)
}

fn tok() -> Tokenizer {
    load(&writer(true)).unwrap()
}

#[test]
fn defaults_for_sentencepiece() {
    let t = tok();
    assert_eq!(t.kind(), ModelKind::Spm);
    assert!(t.add_bos() && !t.add_eos());
    assert_eq!(t.pre_kind(), None);
    assert_eq!(t.eog_ids(), &[EOS]);
}

#[test]
fn merges_by_score() {
    // "▁hello▁world": he(-1) → ll(-2) → llo(-0.5) → hello(-0.2) → ▁hello(-0.1) → ▁w(-2.5);
    // wo is stale (w is gone), or(-4) merges, ▁h is stale; l and d stay single.
    let ids = tok().encode("hello world", false, false).unwrap();
    let want = [
        piece("▁hello"),
        piece("▁w"),
        piece("or"),
        piece("l"),
        piece("d"),
    ];
    assert_eq!(ids, want);
    assert_eq!(tok().decode(&ids, false).unwrap(), "hello world");
}

#[test]
fn equal_scores_merge_leftmost_first() {
    // "▁aaa": (a,a)@1 and (a,a)@2 score the same; the left one wins.
    let ids = tok().encode("aaa", false, false).unwrap();
    assert_eq!(ids, [piece("▁"), piece("aa"), piece("a")]);
}

#[test]
fn byte_fallback() {
    // "▁hi€": ▁h merges; "i" and "€" (E2 82 AC) are not pieces, so they go out as bytes.
    let t = tok();
    let ids = t.encode("hi€", false, false).unwrap();
    let want = [piece("▁h"), byte(b'i'), byte(0xE2), byte(0x82), byte(0xAC)];
    assert_eq!(ids, want);
    assert_eq!(t.decode(&ids, false).unwrap(), "hi€");
    // Streaming holds the euro sign back until its last byte.
    let mut d = t.stream_decoder(false);
    let parts: Vec<String> = ids.iter().map(|&i| d.push(i).unwrap()).collect();
    assert_eq!(parts, [" h", "i", "", "", "€"]);
}

#[test]
fn without_byte_tokens_unknown_is_used() {
    let t = load(&writer(false)).unwrap();
    assert_eq!(t.encode("hi", false, false).unwrap(), [piece("▁h"), UNK]);
}

#[test]
fn bos_and_special_tokens() {
    let t = tok();
    // parse_special: <s> and </s> are tokens, and the text after a special token gets the
    // prefix space again.
    let ids = t.encode("<s>hello</s>", true, true).unwrap();
    assert_eq!(ids, [BOS, BOS, piece("▁hello"), EOS]);
    // Without it they are text: ▁ then bytes for < s > (not pieces), hello, bytes for </s>.
    let ids = t.encode("<s>hello</s>", true, false).unwrap();
    let b = |s: &str| s.bytes().map(byte).collect::<Vec<_>>();
    let mut want = vec![BOS, piece("▁")];
    want.extend(b("<s>"));
    want.push(piece("hello"));
    want.extend(b("</s>"));
    assert_eq!(ids, want);
    // Decoding, as llama.cpp's detokenizer: the prefix space is stripped from the *first*
    // token only, so after a BOS (hidden without `special`, or removed by remove_special) the
    // space stays.
    let ids = t.encode("hello", true, false).unwrap();
    assert_eq!(ids, [BOS, piece("▁hello")]);
    assert_eq!(t.decode(&ids[1..], false).unwrap(), "hello");
    assert_eq!(t.decode(&ids, false).unwrap(), " hello");
    assert_eq!(t.decode(&ids, true).unwrap(), "<s> hello");
    let opts = DecodeOptions {
        remove_special: true,
        unparse_special: false,
    };
    assert_eq!(t.decode_with(&ids, opts).unwrap(), " hello");
}

#[test]
fn user_defined_tokens_match_without_parse_special() {
    let t = tok();
    let ids = t.encode("hello<|user|>hello", false, false).unwrap();
    // After a special fragment the next text gets a prefix space again.
    assert_eq!(ids, [piece("▁hello"), user_id(), piece("▁hello")]);
    assert_eq!(t.decode(&ids, false).unwrap(), "hello<|user|> hello");
}

#[test]
fn add_space_prefix_off_and_add_eos_on() {
    let mut w = writer(true);
    w.set("tokenizer.ggml.add_space_prefix", MetaValue::Bool(false));
    w.set("tokenizer.ggml.add_eos_token", MetaValue::Bool(true));
    let t = load(&w).unwrap();
    // "hello": he → ll → llo → hello; no ▁ in front.
    assert_eq!(
        t.encode("hello", true, false).unwrap(),
        [BOS, piece("hello"), EOS]
    );
    assert_eq!(t.encode("", true, false).unwrap(), [BOS, EOS]);
    assert!(t.encode("", false, false).unwrap().is_empty());
}

#[test]
fn long_input_is_not_quadratic() {
    // SentencePiece has no pre-tokenizer: the whole text is one merge problem.
    let t = tok();
    let text = "hello world hi€ aaa ".repeat(25_000); // 500 KB
    let ids = t.encode(&text, false, false).unwrap();
    assert_eq!(t.decode(&ids, false).unwrap(), text);
}
