//! The end-of-generation set against llama.cpp b11434's own, on small SentencePiece
//! vocabularies that exercise its text rules (tests/data/tokenizer_eog/cases.json, written by
//! scripts/gen_eog_cases.py from `llama-tokenize -v`'s load log): end-of-turn texts forced to
//! control and EOG (Gemma 3's user-defined `</s>`, Kimi's and MiniMax's normal `[EOS]`, `[e~[`),
//! `<|end|>` dropped beside `<|return|>`/`<|call|>` or `<|calls|>`/`<|flush|>`, `</s>` kept
//! normal beside `<|tool_response>` or `<|plamo:eos|>`; and how many tokens llama.cpp then
//! matches in raw text (control, user-defined and unknown).

use flint::gguf::{Gguf, GgufWriter, MetaArray, MetaValue};
use flint::tokenizer::{TokenId, TokenType, Tokenizer};
use serde_json::Value;

fn cases() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/tokenizer_eog/cases.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    doc["cases"].as_array().expect("cases").clone()
}

/// The case's vocabulary as scripts/gen_eog_cases.py writes it: BOS 1, UNK 0, EOS the named
/// token or `<s>`.
fn tokenizer(case: &Value) -> Tokenizer {
    let tokens: Vec<(String, i32)> = case["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| {
            let text = t[0].as_str().expect("a text").to_string();
            (text, t[1].as_i64().expect("a type") as i32)
        })
        .collect();
    let eos = match case["eos"].as_str() {
        Some(e) => tokens
            .iter()
            .position(|(t, _)| t == e)
            .expect("the EOS text") as u32,
        None => 1,
    };
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", MetaValue::String("llama".into()));
    let (texts, types): (Vec<String>, Vec<i32>) = tokens.into_iter().unzip();
    let scores = vec![0.0f32; texts.len()];
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(texts)),
    );
    w.set(
        "tokenizer.ggml.scores",
        MetaValue::Array(MetaArray::F32(scores)),
    );
    w.set(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(types)),
    );
    w.set("tokenizer.ggml.bos_token_id", MetaValue::U32(1));
    w.set("tokenizer.ggml.eos_token_id", MetaValue::U32(eos));
    w.set("tokenizer.ggml.unknown_token_id", MetaValue::U32(0));
    let g = Gguf::parse(&w.to_bytes().expect("GGUF bytes")).expect("parse");
    Tokenizer::from_gguf(&g).expect("tokenizer")
}

#[test]
fn eog_sets_match_llama_cpp() {
    let cases = cases();
    assert!(cases.len() >= 7);
    for case in &cases {
        let name = case["name"].as_str().unwrap_or_default();
        let t = tokenizer(case);
        let want: Vec<TokenId> = case["eog"]
            .as_array()
            .expect("eog")
            .iter()
            .map(|v| v.as_u64().expect("an id") as TokenId)
            .collect();
        assert_eq!(t.eog_ids(), &want[..], "{name}");
        let n_special = (0..t.n_vocab())
            .filter(|&id| {
                matches!(
                    t.token_type(id),
                    Some(TokenType::Control | TokenType::UserDefined | TokenType::Unknown)
                )
            })
            .count();
        assert_eq!(Some(n_special as u64), case["n_special"].as_u64(), "{name}");
    }
}
