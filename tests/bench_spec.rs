//! The speculative benchmark (`flint bench -md DRAFT`) on the default model with a random
//! drafter (block 4) on two builtin prompts (chat, code) × 8 tokens: through the library API
//! and once as a process with `-o json`. Every prompt must give `greedy_match = true` (the
//! acceptance test of the speculative benchmark); counters must agree with each other and the
//! summary rows must be the sums of the prompt rows. Also the JSONL reader's errors and the
//! command line's refusals. Never asserts on speed.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use flint::bench::speculative::rows::{records, SpecSession};
use flint::bench::speculative::{
    self, builtin, parse_jsonl, PromptsError, SpecBenchOptions, SpecPrompt,
};
use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::gguf::GgufFile;
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::tokenizer::Tokenizer;
use serde_json::{Map, Value};

const N_GEN: usize = 8;

fn write_drafter(dir: &Path) -> PathBuf {
    let target = GgufFile::open(&common::model_path()).unwrap();
    let path = dir.join("drafter-b4.gguf");
    random_drafter(&target, &InitOptions::default())
        .unwrap()
        .write_file(&path)
        .unwrap();
    path
}

/// The first builtin prompt of chat and of code.
fn two_prompts() -> Vec<SpecPrompt> {
    let all = builtin();
    ["chat", "code"]
        .iter()
        .map(|c| all.iter().find(|p| p.category == *c).unwrap().clone())
        .collect()
}

/// Checks the rows of a run of [`two_prompts`]: 2 prompt rows, 2 category rows, 1 overall.
fn check_rows(rows: &[Map<String, Value>]) {
    let kinds: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["row"].as_str().unwrap(), r["category"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("prompt", "chat"),
            ("prompt", "code"),
            ("category", "chat"),
            ("category", "code"),
            ("all", "all")
        ]
    );
    let u = |r: &Map<String, Value>, k: &str| {
        r[k].as_u64()
            .unwrap_or_else(|| panic!("{k} in {}", Value::Object(r.clone())))
    };
    for r in rows {
        let shown = Value::Object(r.clone());
        assert_eq!(r["greedy_match"], Value::Bool(true), "{shown}");
        assert!(u(r, "accepted") <= u(r, "drafted"), "{shown}");
        assert!(u(r, "drafted") <= 4 * u(r, "cycles"), "{shown}");
        assert_eq!(u(r, "n_max"), 4);
        assert_eq!(u(r, "n_gen"), N_GEN as u64);
        assert_eq!(u(r, "plain_tokens"), u(r, "spec_tokens"), "{shown}");
        assert!(u(r, "plain_tokens") >= 1 && u(r, "prompt_tokens") > 0);
        assert!(r["tau"].as_f64().unwrap() >= 1.0 || u(r, "cycles") == 0);
        let rate = r["acceptance_rate"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&rate), "{shown}");
        let slots = r["slot_acceptance"].as_array().unwrap();
        assert_eq!(slots.len(), 4, "{shown}");
        assert!(r["plain_tps"].as_f64().unwrap() > 0.0, "{shown}");
        assert!(r["spec_tps"].as_f64().unwrap() > 0.0, "{shown}");
        assert!(r["tokens_per_target_forward"].as_f64().unwrap() >= 1.0);
    }
    // Summary rows are sums of the prompt rows.
    for k in [
        "prompt_tokens",
        "plain_tokens",
        "cycles",
        "drafted",
        "accepted",
    ] {
        assert_eq!(u(&rows[4], k), u(&rows[0], k) + u(&rows[1], k), "{k}");
        assert_eq!(u(&rows[2], k), u(&rows[0], k), "{k}");
    }
    assert_eq!(u(&rows[4], "n_prompts"), 2);
    assert!(rows[0]["prompt"].as_str().unwrap().len() > 10);
    assert!(rows[4]["prompt"].is_null() && rows[4]["prompt_index"].is_null());
}

#[test]
fn library_run_matches_plain_decoding_on_every_prompt() {
    let tmp = common::temp_dir("bench-spec-lib");
    let dir = tmp.path();
    let draft = write_drafter(dir);
    let mut d = DraftOptions::new(draft.clone());
    d.bypass = false;
    let load = |n_ctx| {
        Engine::load(
            &EngineOptions {
                model: common::model_path(),
                n_ctx,
                draft: Some(d.clone()),
                ..EngineOptions::default()
            },
            1,
        )
        .unwrap()
    };
    let tok = Tokenizer::from_gguf(&GgufFile::open(&common::model_path()).unwrap()).unwrap();
    let prepared = speculative::prepare(&tok, &two_prompts(), true, None).unwrap();
    assert!(
        speculative::uses_chat_template(&tok, true, None),
        "SmolLM2 has a chat template"
    );
    let mut eng = load(speculative::ctx_needed(&prepared, N_GEN));
    let opts = SpecBenchOptions {
        n_predict: N_GEN,
        warmup: false,
        ..SpecBenchOptions::default()
    };
    let mut calls = Vec::new();
    let bench = speculative::run(&mut eng, &prepared, &opts, |p, mode| {
        calls.push((p.category.clone(), mode))
    })
    .unwrap();
    assert!(
        eng.spec.is_some() && !eng.drafters.is_empty(),
        "the drafter is back in the engine"
    );
    assert_eq!(calls.len(), 4);
    assert_eq!(bench.n_max, 4);
    for r in &bench.runs {
        assert!(r.greedy_match(), "{}: {r:?}", r.category);
        let s = r.spec.spec.as_ref().expect("speculative counters");
        assert_eq!(s.bypassed, 0, "the bypass is off");
        assert!(s.cycles > 0 && s.accepted <= s.drafted);
        eprintln!("{}: {}", r.category, s.summary(r.spec.generated_tokens));
    }
    let session = SpecSession::from_engine(&eng, "llama 135M Q4_1", "d.gguf", N_GEN, true);
    let rows = records(&session, &bench);
    check_rows(&rows);
    let md = speculative::rows::markdown(&rows);
    assert_eq!(md.lines().count(), 2 + 2 + rows.len(), "{md}");
    assert!(md.contains("(2 prompts)") && md.contains("| all "), "{md}");
}

fn flint(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .output()
        .expect("run flint")
}

#[test]
fn cli_json_reports_greedy_match_for_every_prompt() {
    let tmp = common::temp_dir("bench-spec-cli");
    let dir = tmp.path();
    let draft = write_drafter(dir);
    let prompts = dir.join("prompts.jsonl");
    let lines: String = two_prompts()
        .iter()
        .map(|p| serde_json::json!({"category": p.category, "prompt": p.prompt}).to_string() + "\n")
        .collect();
    std::fs::write(&prompts, lines).unwrap();
    let n = N_GEN.to_string();
    let rows =
        common::spec_bench_rows(&common::model_path(), &draft, prompts.to_str().unwrap(), &n);
    check_rows(&rows);
    for r in &rows {
        assert_eq!(r["chat_template"], Value::Bool(true));
        assert_eq!(r["model_type"], "llama 135M Q4_1");
        assert_eq!(r["draft_filename"], draft.to_str().unwrap());
        assert!(!r["adapter"].as_str().unwrap().is_empty());
    }
}

#[test]
fn jsonl_errors_name_the_line() {
    let ok = "{\"category\": \"a\", \"prompt\": \"b\"}";
    let err = |text: &str| parse_jsonl(text, "p.jsonl").unwrap_err();
    let e = err(&format!("{ok}\n{{\"category\": \"a\", \"prompt\": \n"));
    assert!(matches!(e, PromptsError::Json { line: 2, .. }), "{e:?}");
    assert!(e.to_string().starts_with("p.jsonl line 2: not JSON"), "{e}");
    assert_eq!(
        err(&format!("{ok}\n\n[1, 2]\n")),
        PromptsError::NotObject {
            source_name: "p.jsonl".into(),
            line: 3
        }
    );
    let e = err(&format!("{ok}\n{{\"category\": \"a\"}}\n"));
    assert!(
        matches!(
            e,
            PromptsError::Field {
                line: 2,
                field: "prompt",
                ..
            }
        ),
        "{e:?}"
    );
    let e = err("{\"category\": 3, \"prompt\": \"b\"}\n");
    assert!(
        matches!(
            e,
            PromptsError::Field {
                line: 1,
                field: "category",
                ..
            }
        ),
        "{e:?}"
    );
    let e = err(&format!(
        "{ok}\n{ok}\n{{\"category\": \"a\", \"prompt\": \"  \"}}"
    ));
    assert!(
        matches!(
            e,
            PromptsError::Empty {
                line: 3,
                field: "prompt",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        err("\n  \n"),
        PromptsError::NoPrompts {
            source_name: "p.jsonl".into()
        }
    );
    assert_eq!(parse_jsonl(ok, "p").unwrap(), [SpecPrompt::new("a", "b")]);
}

#[test]
fn cli_refuses_bad_prompts_and_flags() {
    let tmp = common::temp_dir("bench-spec-flags");
    let dir = tmp.path();
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"category\": \"a\", \"prompt\": \"b\"}\nnot json\n").unwrap();
    let model = common::model_path();
    let m = model.to_str().unwrap();
    // The prompts are read before anything is loaded: the drafter need not exist.
    let out = flint(&[
        "bench",
        "-m",
        m,
        "-md",
        "none.gguf",
        "--spec-prompts",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 2: not JSON"), "{stderr}");
    for args in [
        &["-md", "none.gguf", "-p", "512"][..],
        &["-md", "none.gguf", "-n", "8,16"],
        &["-md", "none.gguf", "--spec-draft-n-max", "0"],
        &["--spec-prompts", "builtin"],
    ] {
        let mut all = vec!["bench", "-m", m];
        all.extend_from_slice(args);
        let out = flint(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
}
