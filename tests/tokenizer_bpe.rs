//! Byte-level BPE on a tiny synthetic vocabulary (ids 0…255 are the 256 byte characters):
//! merge order by rank, merges naming unknown strings, Llama 3's ignore_merges, control tokens,
//! llama.cpp's clean-up pass, and typed errors (never panics) for malformed metadata.

use crate::common;

use flint::gguf::{Gguf, GgufWriter, MetaArray, MetaValue};
use flint::tokenizer::{TokenId, TokenType, Tokenizer, TokenizerError};

/// GPT-2's byte → character table, written out independently of flint's.
fn byte_char(b: u8) -> char {
    let printable = |x: u32| (0x21..=0x7E).contains(&x) || (0xA1..=0xAC).contains(&x) || x >= 0xAE;
    let b = u32::from(b);
    if printable(b) {
        return char::from_u32(b).unwrap();
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

const EXTRA: &[(&str, i32)] = &[
    ("he", 1),
    ("ll", 1),
    ("llo", 1),
    ("hello", 1),
    ("Ġw", 1),
    ("<|eot|>", 3),
    ("lo", 1),
    ("abc", 1),
];
const MERGES: &[&str] = &[
    "l l",
    "h e",
    "ll o",
    "he llo",
    "Ġ w",
    "l o",
    "x y",
    "Ġ notatoken",
    "nospace",
    "",
];

fn id(text: &str) -> TokenId {
    256 + EXTRA.iter().position(|(t, _)| *t == text).unwrap() as TokenId
}

fn writer(pre: &str) -> GgufWriter {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let mut types = vec![1i32; 256];
    for (t, ty) in EXTRA {
        tokens.push(t.to_string());
        types.push(*ty);
    }
    let merges = MERGES.iter().map(|m| m.to_string()).collect();
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", MetaValue::String("gpt2".into()));
    w.set("tokenizer.ggml.pre", MetaValue::String(pre.into()));
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(tokens)),
    );
    w.set(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(types)),
    );
    w.set(
        "tokenizer.ggml.merges",
        MetaValue::Array(MetaArray::String(merges)),
    );
    w
}

fn load(w: &GgufWriter) -> Result<Tokenizer, TokenizerError> {
    let g = Gguf::parse(&w.to_bytes().unwrap()).unwrap();
    Tokenizer::from_gguf(&g)
}

fn bytes(s: &str) -> Vec<TokenId> {
    s.bytes().map(TokenId::from).collect()
}

#[test]
fn merges_apply_lowest_rank_first() {
    let t = load(&writer("gpt-2")).unwrap();
    // h e l l o: "l l"(0) → "h e"(1) → "ll o"(2) → "he llo"(3); "l o"(5) went stale.
    assert_eq!(t.encode("hello", false, false).unwrap(), [id("hello")]);
    assert_eq!(t.encode("lo", false, false).unwrap(), [id("lo")]);
    // " world": "Ġ w" merges, the rest has no merges.
    let mut want = vec![id("Ġw")];
    want.extend(bytes("orld"));
    assert_eq!(t.encode(" world", false, false).unwrap(), want);
    // "x y" merges into "xy", which is not a token: its bytes come out instead.
    assert_eq!(t.encode("xy", false, false).unwrap(), bytes("xy"));
    // Without merges for it, "abc" stays bytes under GPT-2 …
    assert_eq!(t.encode("abc", false, false).unwrap(), bytes("abc"));
    // … BPE defaults: BOS = EOS = 11 (llama.cpp's), not added.
    assert_eq!((t.bos_id(), t.add_bos()), (Some(11), false));
}

#[test]
fn llama3_ignores_merges_for_whole_words() {
    let t = load(&writer("llama-bpe")).unwrap();
    assert_eq!(t.pre_kind(), Some("llama3"));
    assert_eq!(t.encode("abc", false, false).unwrap(), [id("abc")]);
    // llama3 adds BOS by default (id 11 here).
    assert_eq!(t.encode("abc", true, false).unwrap(), [11, id("abc")]);
}

#[test]
fn control_tokens_need_parse_special() {
    let t = load(&writer("qwen2")).unwrap();
    assert_eq!(t.token_type(id("<|eot|>")), Some(TokenType::Control));
    let on = t.encode("hello<|eot|>", false, true).unwrap();
    assert_eq!(on, [id("hello"), id("<|eot|>")]);
    let off = t.encode("hello<|eot|>", false, false).unwrap();
    assert_eq!(off.first(), Some(&id("hello")));
    assert_eq!(t.decode(&off, false).unwrap(), "hello<|eot|>");
    assert_eq!(t.decode(&on, false).unwrap(), "hello");
    assert_eq!(t.decode(&on, true).unwrap(), "hello<|eot|>");
}

#[test]
fn clean_spaces_follows_the_pre_tokenizer() {
    let text = "a , b 's c ' d ?";
    let gpt2 = load(&writer("gpt-2")).unwrap();
    let ids = gpt2.encode(text, false, false).unwrap();
    // llama.cpp's clean-up: " ," → ",", " 's" → "'s", " ' " → "'", " ?" → "?".
    assert_eq!(gpt2.decode(&ids, false).unwrap(), "a, b's c'd?");
    let qwen = load(&writer("qwen2")).unwrap();
    let ids = qwen.encode(text, false, false).unwrap();
    assert_eq!(qwen.decode(&ids, false).unwrap(), text);
}

#[test]
fn random_text_round_trips_and_never_panics() {
    let mut rng = common::Rng::new(42);
    let alphabet: Vec<char> = "hello wrd\n\t xy<|eot|>'s 123 日本 🎉\u{a0}\u{200d}é"
        .chars()
        .collect();
    for pre in [
        "qwen2", "llama3", "smollm", "gpt-2", "default", "falcon", "gpt-4o", "tekken",
    ] {
        let t = load(&writer(pre)).unwrap();
        for _ in 0..200 {
            let n = rng.below(40) as usize;
            let s: String = (0..n)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                .collect();
            for special in [false, true] {
                let ids = t.encode(&s, false, special).unwrap();
                if pre == "qwen2" || pre == "gpt-4o" || pre == "tekken" {
                    // No clean-up pass for these: the text comes back exactly.
                    assert_eq!(t.decode(&ids, true).unwrap(), s, "{pre}: {s:?}");
                }
            }
        }
    }
}

fn expect_err(w: &GgufWriter, check: impl Fn(&TokenizerError) -> bool) {
    match load(w) {
        Err(e) => assert!(check(&e), "unexpected error: {e}"),
        Ok(_) => panic!("loaded a malformed tokenizer"),
    }
}

#[test]
fn malformed_metadata_is_a_typed_error() {
    use TokenizerError as E;
    let mut w = writer("gpt-2");
    w.set("tokenizer.ggml.model", MetaValue::String("bert".into()));
    expect_err(
        &w,
        |e| matches!(e, E::UnsupportedModel { model } if model == "bert"),
    );

    let mut w = writer("gpt-2");
    w.set("tokenizer.ggml.model", MetaValue::U32(2));
    expect_err(&w, |e| matches!(e, E::Metadata(_)));

    let w = writer("no-such-pre");
    expect_err(
        &w,
        |e| matches!(e, E::UnsupportedPreTokenizer { pre } if pre == "no-such-pre"),
    );

    let mut w = writer("gpt-2");
    w.set(
        "tokenizer.ggml.add_bos_token",
        MetaValue::String("yes".into()),
    );
    expect_err(&w, |e| e.to_string().contains("add_bos_token"));

    // A BPE vocabulary smaller than 12 has no default BOS, so add_bos_token cannot hold.
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", MetaValue::String("gpt2".into()));
    w.set("tokenizer.ggml.pre", MetaValue::String("gpt-2".into()));
    let few: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(few.clone())),
    );
    w.set(
        "tokenizer.ggml.merges",
        MetaValue::Array(MetaArray::String(vec!["a b".into()])),
    );
    w.set("tokenizer.ggml.add_bos_token", MetaValue::Bool(true));
    expect_err(&w, |e| {
        matches!(
            e,
            E::MissingSpecialToken {
                flag: "add_bos_token",
                ..
            }
        )
    });

    let mut w2 = w.clone();
    w2.set("tokenizer.ggml.add_bos_token", MetaValue::Bool(false));
    let t = load(&w2).unwrap();
    // Unknown bytes have no token and are dropped (llama.cpp), never a panic.
    assert_eq!(t.encode("abz", true, false).unwrap(), [0, 1]);
    assert!(matches!(
        t.decode(&[3], false),
        Err(E::TokenOutOfRange { id: 3, n_vocab: 3 })
    ));
    let mut t = t;
    assert!(t.set_add_bos(true).is_err());
    assert!(!t.add_bos());

    let mut w3 = w2.clone();
    w3.set(
        "tokenizer.ggml.merges",
        MetaValue::Array(MetaArray::String(vec![])),
    );
    w3.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(vec![])),
    );
    expect_err(&w3, |e| matches!(e, E::EmptyVocab));

    let mut w4 = w2.clone();
    let dup: Vec<String> = ["a", "b", "a"].map(String::from).to_vec();
    w4.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(dup)),
    );
    expect_err(&w4, |e| {
        matches!(
            e,
            E::DuplicateToken {
                first: 0,
                second: 2,
                ..
            }
        )
    });

    let mut w5 = GgufWriter::new();
    w5.set("tokenizer.ggml.model", MetaValue::String("gpt2".into()));
    w5.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(few)),
    );
    expect_err(&w5, |e| matches!(e, E::MissingMerges));
    w5.set("tokenizer.ggml.model", MetaValue::String("llama".into()));
    w5.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(vec![])),
    );
    expect_err(&w5, |e| matches!(e, E::EmptyVocab));
}

#[test]
fn odd_tokens_load() {
    // Empty token texts are renamed (they would match everywhere), unknown type ids decode to
    // nothing, and merges naming strings outside the vocabulary are harmless.
    let mut w = writer("gpt-2");
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    tokens.push(String::new());
    tokens.push("zz".into());
    let mut types = vec![1i32; 256];
    types.push(1);
    types.push(99);
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(tokens)),
    );
    w.set(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(types)),
    );
    w.set(
        "tokenizer.ggml.merges",
        MetaValue::Array(MetaArray::String(vec!["z z".into(), "q notatoken".into()])),
    );
    let t = load(&w).unwrap();
    assert_eq!(t.token_text(256), Some("[EMPTY_256]"));
    assert_eq!(t.token_type(257), Some(TokenType::Undefined));
    assert_eq!(t.encode("zz", false, false).unwrap(), [257]);
    assert_eq!(t.decode(&[257], true).unwrap(), "");
    assert_eq!(t.encode("", false, true).unwrap(), Vec::<TokenId>::new());
}
