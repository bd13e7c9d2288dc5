//! The real model's tokenizer (SmolLM2-135M-Instruct: byte-level BPE, `smollm` pre-tokenizer)
//! against llama.cpp: for every fixture string, ids with and without special-token parsing
//! and the detokenized text (tests/data/tokenizer/README.md says where the fixtures come from).
//! Also: metadata flags, streaming detokenization, long inputs.

use crate::common;

use flint::gguf::GgufFile;
use flint::tokenizer::{DecodeOptions, ModelKind, TokenId, Tokenizer};
use serde_json::Value;

fn model_tokenizer() -> Tokenizer {
    let f = GgufFile::open(&common::model_path()).expect("model opens");
    Tokenizer::from_gguf(&f).expect("tokenizer loads")
}

fn fixtures() -> Vec<Value> {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/tokenizer/llamacpp_tokenizer.json"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    v.as_array().unwrap().clone()
}

fn ids(v: &Value) -> Vec<TokenId> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as TokenId)
        .collect()
}

#[test]
fn metadata_flags_match_the_file() {
    let t = model_tokenizer();
    assert_eq!(t.kind(), ModelKind::Bpe);
    assert_eq!(t.pre(), Some("smollm"));
    assert_eq!(t.pre_kind(), Some("starcoder"));
    assert_eq!(t.n_vocab(), 49152);
    assert_eq!(t.n_merges(), 48900);
    assert!(!t.add_bos() && !t.add_eos());
    assert_eq!((t.bos_id(), t.eos_id()), (Some(1), Some(2)));
    assert_eq!(t.special_ids().unk, Some(0));
    assert_eq!(t.special_ids().pad, Some(2));
    // <|endoftext|> and <|im_end|> end generation; <|im_start|> does not.
    assert_eq!(t.eog_ids(), &[0, 2]);
    assert!(t.is_eog(2) && !t.is_eog(1));
    assert_eq!(t.token_text(1), Some("<|im_start|>"));
    assert_eq!(t.token_id("Ġworld"), Some(905));
}

#[test]
fn ids_match_llamacpp_without_special_parsing() {
    let t = model_tokenizer();
    let mut failures = Vec::new();
    for f in fixtures() {
        let text = f["text"].as_str().unwrap();
        let got = t.encode(text, true, false).unwrap();
        if got != ids(&f["ids"]) {
            failures.push(format!(
                "{text:?}: got {got:?}, llama.cpp {:?}",
                ids(&f["ids"])
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn ids_match_llamacpp_with_special_parsing() {
    let t = model_tokenizer();
    let mut failures = Vec::new();
    for f in fixtures() {
        let text = f["text"].as_str().unwrap();
        let want = ids(&f["ids_parse_special"]);
        let got = t.encode(text, true, true).unwrap();
        if got != want {
            failures.push(format!("{text:?}: got {got:?}, llama.cpp {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn detokenization_matches_llamacpp_and_round_trips() {
    let t = model_tokenizer();
    for f in fixtures() {
        let text = f["text"].as_str().unwrap();
        let detok = f["detok"].as_str().unwrap();
        for key in ["ids", "ids_parse_special"] {
            let got = t.decode(&ids(&f[key]), true).unwrap();
            assert_eq!(got, detok, "{key} of {text:?}");
            assert_eq!(got, text, "round trip of {text:?}");
        }
    }
}

#[test]
fn control_tokens_hidden_unless_special() {
    let t = model_tokenizer();
    let ids = t
        .encode("<|im_start|>user\nhi<|im_end|>", false, true)
        .unwrap();
    assert_eq!(ids, [1, 4093, 198, 6004, 2]);
    assert_eq!(t.decode(&ids, false).unwrap(), "user\nhi");
    assert_eq!(
        t.decode(&ids, true).unwrap(),
        "<|im_start|>user\nhi<|im_end|>"
    );
    assert_eq!(t.token_to_piece(1, false).unwrap(), b"");
    assert!(t.decode(&[49152], true).is_err());
    let opts = DecodeOptions {
        remove_special: true,
        unparse_special: true,
    };
    // add_bos/add_eos are off for this model, so remove_special removes nothing.
    assert_eq!(
        t.decode_with(&ids, opts).unwrap(),
        "<|im_start|>user\nhi<|im_end|>"
    );
}

#[test]
fn add_bos_override() {
    let mut t = model_tokenizer();
    t.set_add_bos(true).unwrap();
    t.set_add_eos(true).unwrap();
    assert_eq!(
        t.encode("Hello world", true, false).unwrap(),
        [1, 19556, 905, 2]
    );
    assert_eq!(t.encode("Hello world", false, false).unwrap(), [19556, 905]);
    let opts = DecodeOptions {
        remove_special: true,
        unparse_special: true,
    };
    assert_eq!(
        t.decode_with(&[1, 19556, 905, 2], opts).unwrap(),
        "Hello world"
    );
}

/// Streaming a multi-byte text one token at a time never emits a broken character, and the
/// pieces add up to the whole.
#[test]
fn streaming_decoder_emits_whole_characters() {
    let t = model_tokenizer();
    for text in [
        "日本語のテキスト",
        "emoji 🎉🚀👍🏽",
        "ZWJ family 👨\u{200d}👩\u{200d}👧",
        "café",
    ] {
        let ids = t.encode(text, false, false).unwrap();
        let mut d = t.stream_decoder(true);
        let mut out = String::new();
        let mut held_back = false;
        for &id in &ids {
            let piece = d.push(id).unwrap();
            held_back |= piece.is_empty();
            assert!(
                !piece.contains('\u{FFFD}'),
                "{text:?}: broken piece {piece:?}"
            );
            out.push_str(&piece);
        }
        out.push_str(&d.finish());
        assert_eq!(out, text);
        if text.starts_with('日') {
            assert!(
                held_back,
                "byte-level tokens split characters here; some push must wait"
            );
        }
    }
    // A stream cut inside a character flushes a replacement character.
    let ids = t.encode("🎉", false, false).unwrap();
    let mut d = t.stream_decoder(true);
    let first = d.push(ids[0]).unwrap();
    assert_eq!(first, "");
    assert_eq!(d.finish(), "\u{FFFD}");
}

/// 1 MB of mixed text, one enormous word and one enormous whitespace run tokenize and round-trip
/// (a quadratic path would make this test run for minutes; speed itself is not asserted).
#[test]
fn long_input_is_linear() {
    let t = model_tokenizer();
    let unit = "The quick brown fox, 12345 times;日本語 🎉 <|im_start|>\n\t  done. ";
    let text: String = unit.repeat(1_000_000 / unit.len() + 1);
    let ids = t.encode(&text, false, true).unwrap();
    assert_eq!(t.decode(&ids, true).unwrap(), text);
    // One enormous word (no pre-tokenizer split) and one enormous whitespace run.
    for text in [
        "a".repeat(200_000),
        " ".repeat(200_000) + "x",
        "\u{3042}".repeat(100_000),
    ] {
        let ids = t.encode(&text, false, false).unwrap();
        assert_eq!(t.decode(&ids, false).unwrap(), text);
    }
}

/// Random strings over a mixed alphabet round-trip exactly (this pre-tokenizer has no
/// clean-up pass) and never panic, with and without special parsing.
#[test]
fn random_text_round_trips() {
    let t = model_tokenizer();
    let alphabet: Vec<char> = "ab Z9\n\t\r'.,!?é日🎉\u{a0}\u{200d}\u{301}<|im_end|>\u{0}\u{7f}ʔ"
        .chars()
        .collect();
    let mut rng = common::Rng::new(7);
    for _ in 0..500 {
        let n = rng.below(60) as usize;
        let s: String = (0..n)
            .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
            .collect();
        for special in [false, true] {
            let ids = t.encode(&s, false, special).unwrap();
            assert_eq!(t.decode(&ids, true).unwrap(), s, "{s:?} special={special}");
        }
    }
}
