//! Acceptance tests of `flint serve`, held to its contract (the OpenAI-compatible HTTP API):
//! the official `openai` Python client against servers without and with a drafter (greedy text
//! identical, streamed or not), input hardening and API keys (tests/serve/hardening.py), 64
//! concurrent clients on 4 slots with disconnects and seeds (tests/serve/load.py), the end of
//! streams on SIGTERM, and the refusal of a non-loopback bind without a key. The Python scripts
//! run in a pinned environment that tests/serve/venv.sh makes on first use; a missing python3
//! fails the tests. Times (a refusal, an exit, a slot release, a 429) are printed, not asserted:
//! only the liveness bound `harness::LIVENESS`, which a hang alone would pass, fails a test.

use crate::client;
use crate::harness;

use std::time::{Duration, Instant};

use client::{http, read_events};
use harness::{script, serial, Server, LIVENESS};
use serde_json::Value;

const MODEL_ID: &str = "SmolLM2-135M-Instruct.Q4_1";
const FOUR_SLOTS: [&str; 6] = ["-np", "4", "--queue", "32", "-c", "4096"];

/// Check the first `/health` answer: 200, or 503 `loading` with an error object while the
/// model loads; then every other route asked at that moment answered 503 `unavailable_error`
/// (or 200: loaded meanwhile; 401: no key given).
fn check_first_health(s: &Server) {
    let (code, body) = &s.first_health;
    let j: Value = serde_json::from_str(body).expect("/health answers JSON");
    if *code != 503 {
        assert_eq!(*code, 200, "{body}");
        return;
    }
    assert_eq!(j["status"], "loading", "{body}");
    assert!(j["error"]["message"].is_string(), "{body}");
    for (route, code, body) in &s.loading_probe {
        eprintln!("while loading: {route}: {code} {body}");
        assert!(
            [200, 401, 503].contains(code),
            "{route} while loading: {code} {body}"
        );
        if *code == 503 {
            let j: Value = serde_json::from_str(body).expect("a 503 answers JSON");
            assert_eq!(j["error"]["type"], "unavailable_error", "{route}: {body}");
        }
    }
}

#[test]
fn greedy_text_is_the_same_without_and_with_a_drafter() {
    let _g = serial();
    let dir = harness::scratch("drafter");
    let draft = dir.join("draft.gguf");
    let model = harness::model();
    harness::dspark_init(&model, &draft);

    let mut runs = Vec::new();
    for args in [vec![], vec!["-md", draft.to_str().expect("utf-8 path")]] {
        let s = Server::start(&args);
        check_first_health(&s);
        let url = s.url();
        let r = script(
            "openai_client.py",
            &["--base-url", &url],
            Duration::from_secs(240),
        );
        s.stop();
        assert_eq!(
            r["model"], MODEL_ID,
            "the default alias is the file name less .gguf"
        );
        runs.push(r);
    }
    let (plain, spec) = (&runs[0], &runs[1]);
    for key in [
        "chat",
        "completion",
        "token_prompt",
        "chat_finish",
        "completion_finish",
    ] {
        assert_eq!(plain[key], spec[key], "{key}: without vs with a drafter");
    }
    for key in ["chat_usage", "completion_usage"] {
        assert_eq!(plain[key], spec[key], "{key}");
    }
    for t in ["chat", "completion"] {
        let timings = &spec["timings"][t];
        assert!(
            timings["draft_n"].is_u64(),
            "{t}: no timings.draft_n with a drafter: {timings}"
        );
        assert!(timings["draft_n_accepted"].is_u64(), "{t}: {timings}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn hardening_and_api_keys() {
    let _g = serial();
    let dir = harness::scratch("keys");
    let key_file = dir.join("keys.txt");
    std::fs::write(&key_file, "flint-key-three\n").expect("write the key file");
    let mut args = FOUR_SLOTS.to_vec();
    args.extend([
        "--api-key",
        "flint-key-one",
        "--api-key",
        "flint-key-two",
        "--api-key-file",
        key_file.to_str().expect("utf-8 path"),
        "--alias",
        "flint-test",
    ]);
    let s = Server::start(&args);
    check_first_health(&s);
    let url = s.url();
    let keys = ["flint-key-one", "flint-key-two", "flint-key-three"];
    let mut a = vec!["--base-url", &url, "--slot-ctx", "1024", "--slots", "4"];
    for k in &keys {
        a.extend(["--api-key", k]);
    }
    let r = script("hardening.py", &a, Duration::from_secs(240));
    assert_eq!(r["model"], "flint-test", "--alias names the model");
    s.stop();
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn load_of_64_clients_on_4_slots() {
    let _g = serial();
    let s = Server::start(&FOUR_SLOTS);
    let url = s.url();
    let r = script("load.py", &["--base-url", &url], Duration::from_secs(300));
    assert!(r["burst"]["codes"]["429"].as_u64().unwrap_or(0) >= 1, "{r}");
    s.stop();
}

#[cfg(unix)]
#[test]
fn sigterm_ends_streams_with_an_error_event_and_exits_zero() {
    let _g = serial();
    let mut s = Server::start(&[]);
    let body = r#"{"prompt":"1, 2, 3, 4, 5,","max_tokens":512,"stream":true,"temperature":0}"#;
    let (code, chunked, mut r) =
        client::send(&s.addr, "POST", "/v1/completions", &[], Some(body)).expect("stream");
    assert_eq!(code, 200);
    let mut buf = String::new();
    let first = read_events(&mut r, chunked, &mut buf, |d| {
        serde_json::from_str::<Value>(d).is_ok_and(|j| j["choices"][0]["text"].is_string())
    });
    assert!(!first.is_empty(), "no content before the end of the stream");
    let t0 = Instant::now();
    s.signal("TERM");
    let rest = read_events(&mut r, chunked, &mut buf, |_| false);
    let last = rest
        .iter()
        .rev()
        .find(|d| *d != "[DONE]")
        .expect("an event after SIGTERM");
    let j: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"));
    assert!(
        j["error"]["message"].is_string(),
        "the stream must end with an error event: {rest:?}"
    );
    let st = s.wait_exit();
    assert!(st.success(), "exit status after SIGTERM: {st}: {}", s.log());
    eprintln!(
        "SIGTERM: stream ended and exit 0 in {:.2} s",
        t0.elapsed().as_secs_f64()
    );

    let mut s = Server::start(&[]);
    let t0 = Instant::now();
    s.signal("INT");
    let st = s.wait_exit();
    assert!(st.success(), "exit status after SIGINT: {st}: {}", s.log());
    eprintln!(
        "SIGINT when idle: exit 0 in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn a_non_loopback_host_needs_a_key() {
    let _g = serial();
    let t0 = Instant::now();
    let (mut child, log, rx) = harness::spawn(&["--host", "0.0.0.0", "--port", "0"]);
    let bound = harness::listening(&rx, LIVENESS);
    let st = harness::wait_within(&mut child, LIVENESS);
    let refused_after = t0.elapsed();
    let log = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(bound.is_none(), "bound {bound:?} without a key: {log}");
    let st = st.unwrap_or_else(|| panic!("still running {LIVENESS:?} on (a hang): {log}"));
    assert!(!st.success(), "must exit non-zero: {log}");
    assert!(
        st.code().is_some_and(|c| c != 101),
        "a refusal is an error exit, not a panic: {st}: {log}"
    );
    assert!(
        log.contains("--api-key") || log.contains("--insecure"),
        "say why: {log}"
    );
    eprintln!(
        "non-loopback bind without a key: refused ({st}) after {:.2} s",
        refused_after.as_secs_f64()
    );

    for extra in [&["--api-key", "k"][..], &["--insecure"], &[]] {
        let host = if extra.is_empty() {
            "127.0.0.2"
        } else {
            "0.0.0.0"
        };
        let mut args = vec!["--host", host, "--port", "0"];
        args.extend_from_slice(extra);
        let (mut child, log, rx) = harness::spawn(&args);
        let bound = harness::listening(&rx, LIVENESS);
        child.kill().ok();
        child.wait().ok();
        let log = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert!(bound.is_some(), "{args:?} must start: {log}");
    }
}

#[test]
fn health_models_and_metrics_shapes() {
    let _g = serial();
    let s = Server::start(&FOUR_SLOTS);
    let get = |p: &str| {
        let (code, body) = http(&s.addr, "GET", p, &[], None).expect("GET");
        assert_eq!(code, 200, "{p}: {body}");
        body
    };
    let h: Value = serde_json::from_str(&get("/health")).expect("json");
    assert_eq!(h["status"], "ok");
    assert_eq!(
        (h["slots_idle"].as_u64(), h["slots_processing"].as_u64()),
        (Some(4), Some(0))
    );
    for p in ["/v1/models", "/models"] {
        let m: Value = serde_json::from_str(&get(p)).expect("json");
        assert_eq!(m["object"], "list", "{m}");
        let d = &m["data"][0];
        assert_eq!(
            (d["id"].as_str(), d["object"].as_str()),
            (Some(MODEL_ID), Some("model"))
        );
        assert_eq!(d["owned_by"], "flint");
        assert!(d["created"].is_u64(), "{m}");
    }
    let slots: Value = serde_json::from_str(&get("/slots")).expect("json");
    let slots = slots.as_array().expect("/slots is an array");
    assert_eq!(slots.len(), 4);
    for (i, sl) in slots.iter().enumerate() {
        assert_eq!(
            (sl["id"].as_u64(), sl["is_processing"].as_bool()),
            (Some(i as u64), Some(false))
        );
    }
    let before = metrics(&s.addr);
    for name in METRICS {
        assert!(
            before.contains_key(name),
            "/metrics has no {name}: {before:?}"
        );
    }
    assert_eq!(before["flint_slots_total"], 4.0);
    let body = r#"{"prompt":"Hi","max_tokens":3,"temperature":0}"#;
    let (code, text) = http(&s.addr, "POST", "/v1/completions", &[], Some(body)).expect("POST");
    assert_eq!(code, 200, "{text}");
    let r: Value = serde_json::from_str(&text).expect("json");
    let after = metrics(&s.addr);
    let delta = |k: &str| after[k] - before[k];
    assert!(
        delta("flint_requests_total") >= 1.0,
        "{before:?} -> {after:?}"
    );
    let usage = &r["usage"];
    let prompt = usage["prompt_tokens"].as_f64().expect("prompt_tokens");
    assert_eq!(delta("flint_prompt_tokens_total"), prompt, "{after:?}");
    let generated = usage["completion_tokens"]
        .as_f64()
        .expect("completion_tokens");
    assert_eq!(
        delta("flint_generated_tokens_total"),
        generated,
        "{after:?}"
    );
    assert_eq!(after["flint_spec_draft_tokens_total"], 0.0, "no drafter");
    s.stop();
}

/// Every sample `/metrics` must have.
const METRICS: [&str; 9] = [
    "flint_slots_total",
    "flint_slots_busy",
    "flint_queue_depth",
    "flint_requests_total",
    "flint_requests_rejected_total",
    "flint_prompt_tokens_total",
    "flint_generated_tokens_total",
    "flint_spec_draft_tokens_total",
    "flint_spec_accepted_tokens_total",
];

/// The unlabelled samples of `/metrics`.
fn metrics(addr: &str) -> std::collections::HashMap<String, f64> {
    let (code, text) = http(addr, "GET", "/metrics", &[], None).expect("GET /metrics");
    assert_eq!(code, 200, "{text}");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}
