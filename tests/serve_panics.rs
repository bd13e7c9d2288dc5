//! Panics in `flint serve` are charged to the request they came from (built with the `fault`
//! feature: a request whose stop strings hold `FLINT_FAULT_STEP`, `FLINT_FAULT_ADMIT`,
//! `FLINT_FAULT_RETIRE` or `FLINT_FAULT_WORKER` panics at that point of the batched worker, and
//! `FLINT_FAULT=loader` panics the model loader):
//!
//! - a request panicking inside the batched step fails alone: the stream beside it ends with
//!   exactly the text it gives alone (the reference: the same server's answer to it alone,
//!   which tests/serve_batch.rs holds to the single-request engine); the same poisoned request
//!   sent again and again never fails anyone else;
//! - a panic admitting or retiring a request fails that request; the server goes on;
//! - a panic outside every guard, and one in the loader thread, end the process with status 70
//!   and the panic's message in the log (the loader's used to leave `/health` at "loading").
//!
//! Run: `cargo test --release --features fault --test serve_panics`.

#[path = "serve/client.rs"]
mod client;
#[allow(dead_code)]
#[path = "serve/harness.rs"]
mod harness;

use std::thread;

use client::{http, read_events, send};
use harness::{serial, wait_within, Server, LIVENESS};
use serde_json::{json, Value};

/// A streamed completion: its text, or the error event it ended with.
fn stream(addr: &str, body: &Value) -> Result<String, String> {
    let (code, chunked, mut r) = send(
        addr,
        "POST",
        "/v1/completions",
        &[],
        Some(&body.to_string()),
    )
    .expect("send");
    if code != 200 {
        return Err(format!("status {code}"));
    }
    let mut buf = String::new();
    let events = read_events(&mut r, chunked, &mut buf, |d| d == "[DONE]");
    let mut out = String::new();
    for e in events.iter().filter(|e| *e != "[DONE]") {
        let v: Value = serde_json::from_str(e).unwrap_or_else(|_| panic!("event {e}"));
        if v.get("error").is_some() {
            return Err(e.clone());
        }
        out.push_str(v["choices"][0]["text"].as_str().unwrap_or(""));
    }
    Ok(out)
}

fn long() -> Value {
    json!({"prompt": "The lighthouse keeper climbed the stairs every evening and",
           "max_tokens": 48, "temperature": 0, "stream": true})
}

fn poisoned(point: &str) -> Value {
    json!({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0,
           "stop": [point]})
}

fn good(addr: &str) -> (u16, String) {
    let body = json!({"prompt": "Hello", "max_tokens": 4, "temperature": 0}).to_string();
    http(addr, "POST", "/v1/completions", &[], Some(&body)).expect("a good request")
}

#[test]
fn a_panic_is_charged_to_its_request() {
    let _g = serial();
    let s = Server::start(&["-np", "2", "-c", "1024"]);
    let addr = s.addr.clone();
    let alone = stream(&addr, &long()).expect("the stream alone");
    assert!(!alone.is_empty());

    for round in 0..3 {
        let a = {
            let addr = addr.clone();
            thread::spawn(move || stream(&addr, &long()))
        };
        // Poisoned requests while the stream runs (each panics in its step).
        for _ in 0..3 {
            let body = poisoned("FLINT_FAULT_STEP").to_string();
            let (code, text) = http(&addr, "POST", "/v1/completions", &[], Some(&body))
                .expect("a poisoned request");
            assert!(
                code >= 500,
                "round {round}: a panicking request answered {code}: {text}"
            );
            assert!(text.contains("injected fault"), "{text}");
        }
        let got = a.join().expect("the stream's thread");
        assert_eq!(
            got.as_deref(),
            Ok(alone.as_str()),
            "round {round}: the stream beside"
        );
    }
    for point in ["FLINT_FAULT_ADMIT", "FLINT_FAULT_RETIRE"] {
        let body = poisoned(point).to_string();
        let (code, text) =
            http(&addr, "POST", "/v1/completions", &[], Some(&body)).expect("a poisoned request");
        assert!(code >= 500, "{point}: {code}: {text}");
        assert!(text.contains(point), "{point}: {text}");
        let (code, text) = good(&addr);
        assert_eq!(code, 200, "after {point}: {text}");
    }
    assert_eq!(stream(&addr, &long()).as_deref(), Ok(alone.as_str()));
    let (code, text) = s.get("/health", &[]).expect("/health");
    assert_eq!(code, 200, "{text}");

    // A panic outside every guard: exit 70, the message logged.
    let body = poisoned("FLINT_FAULT_WORKER").to_string();
    let _ = http(&addr, "POST", "/v1/completions", &[], Some(&body));
    let mut s = s;
    let st = s.wait_exit();
    assert_eq!(st.code(), Some(70), "{}", s.log());
    assert!(
        s.log().contains("injected fault: FLINT_FAULT_WORKER"),
        "{}",
        s.log()
    );
}

#[test]
fn a_panicking_loader_exits_70_with_its_message() {
    let _g = serial();
    let (mut child, log, _rx) = harness::spawn_env(&["--port", "0"], &[("FLINT_FAULT", "loader")]);
    let st = wait_within(&mut child, LIVENESS).expect("the server still runs (a hang)");
    let log = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(st.code(), Some(70), "{log}");
    assert!(
        log.contains("loading the model panicked: injected fault: loader"),
        "{log}"
    );
}
