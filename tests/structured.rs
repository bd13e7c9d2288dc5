//! Structured output on the default model, with and without its shipped DSpark drafter, held
//! to outside references: llguidance's own matcher (every emitted token in its mask, every
//! answer accepted, and the text accepted byte by byte by a byte-level matcher), Python's
//! `jsonschema` (Draft 2020-12) on every answer, and a chi-square test that sampled
//! constrained output keeps the masked target's distribution when a drafter speculates.
//! One model load per configuration, shared by every case.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use flint::engine::{Engine, EngineOptions};
use flint::grammar::steps::Guide;
use flint::grammar::{GrammarSpec, Grammars};
use flint::sampling::{Sampler, SamplerParams};
use flint::tokenizer::ChatMessage;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::ApproximateTokEnv;
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};

struct Models {
    plain: Engine,
    spec: Engine,
    grammars: Grammars,
}

fn models() -> &'static Mutex<Models> {
    static M: OnceLock<Mutex<Models>> = OnceLock::new();
    M.get_or_init(|| {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
        let plain = Engine::load(
            &EngineOptions {
                model: common::model_path(),
                n_ctx: 1024,
                ..EngineOptions::default()
            },
            1,
        )
        .expect("load the model");
        let spec = Engine::load(&common::batch::spec_opts(1024), 1).expect("load with the drafter");
        let grammars = Grammars::new(&plain.tok, plain.fwd.hp().n_vocab).expect("grammars");
        Mutex::new(Models {
            plain,
            spec,
            grammars,
        })
    })
}

/// Token ids of one constrained generation from an empty cache.
fn run(
    eng: &mut Engine,
    g: &Grammars,
    spec: &GrammarSpec,
    prompt: &[u32],
    n: usize,
    sampler: Option<&mut Sampler>,
) -> Vec<u32> {
    eng.reset(0).expect("reset");
    let mut guide = Some(Guide::new(Box::new(g.compile(spec).expect("compile"))));
    let req = flint::engine::solo::Request {
        prompt,
        keep: 0,
        n_predict: n,
        sampler,
        grammar: &mut guide,
        ignore_eos: false,
        draft: true,
    };
    let stats = flint::engine::solo::generate(eng, req, |_| Ok(true)).expect("generate");
    stats.generated_token_ids
}

fn chat_prompt(eng: &Engine, text: &str) -> Vec<u32> {
    let t = eng.tok.chat_template(None).expect("template");
    let msgs = [ChatMessage::new("user", text)];
    let s = t.render(&msgs, true).expect("render");
    eng.tok.encode(&s, true, true).expect("encode")
}

/// llguidance's own matcher over the model's vocabulary: each token must be in the mask it
/// computes at that point, and the whole answer must be accepted.
fn check_tokens(g: &Grammars, spec: &GrammarSpec, ids: &[u32], what: &str) {
    let mut m = g.compile(spec).expect("compile");
    let c: &mut dyn flint::grammar::Constraint = &mut m;
    let mut mask = vec![0u32; c.mask_words()];
    for (i, &t) in ids.iter().enumerate() {
        c.fill_mask(&mut mask).expect("mask");
        assert!(
            flint::grammar::allowed(&mask, t),
            "{what}: token {i} ({t}) outside the mask"
        );
        c.consume(&[t]).expect("consume");
    }
    assert!(c.is_accepting(), "{what}: the answer is not accepted");
}

/// A byte-level llguidance matcher (no model vocabulary involved) must accept the text.
fn check_bytes(spec: &GrammarSpec, text: &str, what: &str) {
    let env = ApproximateTokEnv::single_byte_env();
    let f = ParserFactory::new_simple(&env).expect("factory");
    let g = match spec {
        GrammarSpec::JsonSchema(v) => TopLevelGrammar::from_json_schema(v.clone()),
        GrammarSpec::Regex(r) => TopLevelGrammar::from_regex(r),
        GrammarSpec::Lark(l) => TopLevelGrammar::from_lark(l.clone()),
    };
    let mut m = Matcher::new(f.create_parser(g));
    let bytes: Vec<u32> = text.bytes().map(u32::from).collect();
    m.consume_tokens(&bytes)
        .unwrap_or_else(|e| panic!("{what}: byte matcher refused {text:?}: {e}"));
    assert!(
        m.is_accepting().unwrap_or(false),
        "{what}: {text:?} is incomplete"
    );
}

fn schema_suite() -> Vec<(&'static str, Value)> {
    vec![
        (
            "Describe a person as JSON.",
            json!({"type": "object", "properties": {
                "name": {"type": "string", "maxLength": 24},
                "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                "required": ["name", "age"], "additionalProperties": false}),
        ),
        (
            "List three colors.",
            json!({"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue", "yellow"]},
                "minItems": 3, "maxItems": 3}),
        ),
        (
            "Is the sky blue? Answer in JSON.",
            json!({"type": "object", "properties": {
                "answer": {"type": "boolean"},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
                "required": ["answer", "confidence"], "additionalProperties": false}),
        ),
        (
            "Give a book with its year.",
            json!({"type": "object", "properties": {
                "title": {"type": "string", "pattern": "^[A-Z][a-zA-Z ]{0,30}$"},
                "year": {"type": "integer", "minimum": 1450, "maximum": 2030},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 2}},
                "required": ["title", "year", "tags"], "additionalProperties": false}),
        ),
        (
            "Write a short event record.",
            json!({"type": "object", "properties": {
                "kind": {"anyOf": [{"const": "meeting"}, {"const": "call"}]},
                "where": {"type": ["string", "null"], "maxLength": 16},
                "date": {"type": "string", "format": "date"}},
                "required": ["kind", "where", "date"], "additionalProperties": false}),
        ),
    ]
}

fn jsonschema_check(cases: &[Value]) {
    // The serve tests' pinned environment (it holds jsonschema too); venv.sh serializes callers.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-venv");
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("bash")
        .arg(format!("{root}/tests/serve/venv.sh"))
        .arg(&dir)
        .output()
        .expect("run venv.sh");
    assert!(
        out.status.success(),
        "venv.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let py = stdout
        .lines()
        .last()
        .expect("the launcher path")
        .trim()
        .to_string();
    let mut child = Command::new(py)
        .arg(format!("{root}/tests/structured/check.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run check.py");
    let input = serde_json::to_vec(cases).expect("cases");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&input)
        .expect("write cases");
    let out = child.wait_with_output().expect("check.py");
    let report = String::from_utf8_lossy(&out.stdout);
    eprintln!("{report}");
    assert!(
        out.status.success(),
        "jsonschema refused answers:\n{report}"
    );
}

#[test]
fn schema_suite_greedy_is_valid_and_identical_with_the_drafter() {
    let mut guard = models().lock().unwrap_or_else(|p| p.into_inner());
    let Models {
        plain,
        spec,
        grammars,
    } = &mut *guard;
    let mut cases = Vec::new();
    for (i, (prompt, schema)) in schema_suite().into_iter().enumerate() {
        let gs = GrammarSpec::JsonSchema(schema.clone());
        let ids = chat_prompt(plain, prompt);
        let a = run(plain, grammars, &gs, &ids, 96, None);
        let b = run(spec, grammars, &gs, &ids, 96, None);
        let text = plain.tok.decode(&a, false).expect("decode");
        eprintln!("schema {i}: {text}");
        assert_eq!(a, b, "schema {i}: the drafter changed the greedy answer");
        let what = format!("schema {i}");
        check_tokens(grammars, &gs, &a, &what);
        check_bytes(&gs, &text, &what);
        cases.push(json!({"schema": schema, "answer": text}));
    }
    // A regex and a Lark grammar too (no jsonschema for those).
    let others = [
        (
            "The moon landing date:",
            GrammarSpec::Regex("[0-9]{4}-[0-9]{2}-[0-9]{2}".into()),
        ),
        (
            "Say yes or no.",
            GrammarSpec::Lark("start: (\"yes\" | \"no\") \"!\"\n".into()),
        ),
    ];
    for (j, (prompt, gs)) in others.iter().enumerate() {
        let ids = chat_prompt(plain, prompt);
        let a = run(plain, grammars, gs, &ids, 32, None);
        let b = run(spec, grammars, gs, &ids, 32, None);
        let text = plain.tok.decode(&a, false).expect("decode");
        eprintln!("grammar {j}: {text}");
        assert_eq!(a, b, "grammar {j}: the drafter changed the greedy answer");
        check_tokens(grammars, gs, &a, &format!("grammar {j}"));
        check_bytes(gs, &text, &format!("grammar {j}"));
    }
    jsonschema_check(&cases);
}

#[test]
fn sampled_schema_answers_are_valid_with_the_drafter() {
    let mut guard = models().lock().unwrap_or_else(|p| p.into_inner());
    let Models { spec, grammars, .. } = &mut *guard;
    let mut cases = Vec::new();
    for (i, (prompt, schema)) in schema_suite().into_iter().enumerate() {
        let gs = GrammarSpec::JsonSchema(schema.clone());
        let ids = chat_prompt(spec, prompt);
        let params = SamplerParams {
            temp: 1.0,
            seed: 7 + i as u64,
            ..SamplerParams::default()
        };
        let mut s = Sampler::new(params, spec.fwd.hp().n_vocab).expect("sampler");
        let a = run(spec, grammars, &gs, &ids, 160, Some(&mut s));
        let text = spec.tok.decode(&a, false).expect("decode");
        check_tokens(grammars, &gs, &a, &format!("sampled schema {i}"));
        cases.push(json!({"schema": schema, "answer": text}));
    }
    jsonschema_check(&cases);
}

#[test]
fn unsupported_keyword_fails_closed() {
    let guard = models().lock().unwrap_or_else(|p| p.into_inner());
    let gs = GrammarSpec::JsonSchema(json!({"type": "array", "uniqueItems": true}));
    let e = guard
        .grammars
        .compile(&gs)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("uniqueItems"), "{e}");
    let e = flint::grammar::compile(&gs)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("uniqueItems"), "{e}");
}

#[path = "structured/chi2.rs"]
mod chi2;

#[path = "structured/batch.rs"]
mod batch;

/// The device mask against its rule applied on the host: refused logits become the most
/// negative finite f32, allowed ones keep their bits (two rows, a ragged last word).
#[test]
fn device_mask_matches_the_host_rule() {
    use flint::kernels::ops::mask::{mask_on_gpu, LOWEST};
    let ctx = common::gpu::ctx();
    let n_cols = 77u32;
    let logits: Vec<f32> = (0..2 * n_cols)
        .map(|i| (i as f32 * 0.37).sin() * 5.0)
        .collect();
    let words = n_cols.div_ceil(32) as usize;
    let mask: Vec<u32> = (0..2 * words as u32)
        .map(|w| 0x9e37_79b9u32.rotate_left(w * 7))
        .collect();
    let got = mask_on_gpu(&ctx, &logits, n_cols, &mask).expect("mask on the device");
    for r in 0..2usize {
        for c in 0..n_cols as usize {
            let bit = (mask[r * words + c / 32] >> (c % 32)) & 1 == 1;
            let want = if bit {
                logits[r * n_cols as usize + c]
            } else {
                LOWEST
            };
            assert_eq!(
                got[r * n_cols as usize + c].to_bits(),
                want.to_bits(),
                "row {r} col {c}"
            );
        }
    }
}
