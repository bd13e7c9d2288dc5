//! Tool calls and structured output of `flint serve`, held to the official `openai` Python
//! client and Python's `jsonschema` (tests/serve/tools_client.py).
//!
//! - `calls_and_json_answers_match_their_schemas` (default model, generic JSON envelope),
//! - `qwen35_preset_makes_schema_valid_xml_calls` (the random-weight qwen35-tiny-tools-f32
//!   preset: XML calls under `tool_choice: "required"`, `enable_thinking` false and true).
//!
//! They only assume the contract: the output matches the grammar the request asked for.
//! - `the_request_surface_holds`: fields, refusals and a multi-turn loop.

use crate::harness;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use harness::{scratch, script, serial, Server};

#[test]
fn the_request_surface_holds() {
    let _g = serial();
    let s = Server::start(&[]);
    let r = script(
        "tools_client.py",
        &["--base-url", &s.url(), "--part", "surface"],
        Duration::from_secs(240),
    );
    s.stop();
    assert_eq!(r["refusals"], 4, "{r}");
}

#[test]
fn calls_and_json_answers_match_their_schemas() {
    let _g = serial();
    // One slot without a drafter, then two batched slots with the shipped drafter: greedy
    // answers under a grammar are the target's own, so the calls must be the same.
    let drafter = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("models/SmolLM2-135M-Instruct.dspark-Q8_0.gguf");
    let drafter = drafter.to_string_lossy().into_owned();
    let runs: [&[&str]; 2] = [&["-np", "1"], &["-np", "2", "-md", &drafter]];
    let mut seen = Vec::new();
    for args in runs {
        let s = Server::start(args);
        let r = script(
            "tools_client.py",
            &["--base-url", &s.url(), "--part", "engine"],
            Duration::from_secs(600),
        );
        s.stop();
        assert!(r["calls"]["named"].is_array(), "{args:?}: {r}");
        seen.push(r["calls"].clone());
    }
    assert_eq!(
        seen[0], seen[1],
        "one slot, no drafter vs two slots with the drafter"
    );
}

/// The random-weight qwen35 preset with its Qwen3.5-style template, written once.
fn qwen35_tools_model() -> PathBuf {
    let dir = scratch("tools-qwen35");
    let path = dir.join("qwen35-tiny-tools-f32.gguf");
    let st = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["gguf", "preset", "qwen35-tiny-tools-f32"])
        .arg(&path)
        .args(["--weights", "random"])
        .status()
        .expect("run flint gguf preset");
    assert!(st.success(), "flint gguf preset failed: {st}");
    path
}

#[test]
fn qwen35_preset_makes_schema_valid_xml_calls() {
    let _g = serial();
    let model = qwen35_tools_model();
    let s = Server::start_model(&model, &[], &[]);
    let r = script(
        "tools_client.py",
        &["--base-url", &s.url(), "--part", "qwen35"],
        Duration::from_secs(600),
    );
    s.stop();
    for k in ["thinking_False", "thinking_True"] {
        assert!(r[k].as_array().is_some_and(|a| !a.is_empty()), "{k}: {r}");
    }
}
