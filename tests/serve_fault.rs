//! Fault isolation of `flint serve`: while two long greedy streams run on `serve -np 2` with the
//! shipped DSpark drafter, a few hundred malformed requests from a seeded generator (random JSON
//! in the fields, wrong types, huge, negative and non-integer numbers, empty and oversized
//! strings, empty prompts, ids outside the vocabulary, invalid UTF-8, truncated, oversized and
//! too deeply nested bodies, bodies that are not objects) each get a 4xx; both streams end with
//! exactly the text each gives alone; the log shows no panic; a good request succeeds at the end.
//! The reference texts are the same server's answers to each stream alone, which tests/serve.rs
//! and tests/serve_batch.rs hold to the single-request engine (and it to the CPU oracle).

use crate::client;
#[path = "serve/faults.rs"]
mod faults;
use crate::harness;

use std::path::Path;
use std::thread;

use client::{read_events, send};
use faults::{Bad, Gen};
use harness::{serial, Server};
use serde_json::{json, Value};

/// Malformed requests sent while the streams run.
const N_BAD: usize = 300;
/// The vocabulary of the default model (ids at and past it are refused).
const N_VOCAB: u64 = 49152;

/// A streamed completion's text and finish reason; panics on an error event.
fn stream(addr: &str, path: &str, body: &Value) -> (String, String) {
    let text = body.to_string();
    let (code, chunked, mut r) = send(addr, "POST", path, &[], Some(&text)).expect("send a stream");
    assert_eq!(code, 200, "{path} {body}");
    let mut buf = String::new();
    let events = read_events(&mut r, chunked, &mut buf, |d| d == "[DONE]");
    let (mut out, mut finish) = (String::new(), String::new());
    for e in &events {
        if e == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(e).unwrap_or_else(|_| panic!("event {e}"));
        assert!(v.get("error").is_none(), "the stream failed: {e}");
        let c = &v["choices"][0];
        if let Some(t) = c["text"]
            .as_str()
            .or_else(|| c["delta"]["content"].as_str())
        {
            out.push_str(t);
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    assert!(events.last().is_some_and(|e| e == "[DONE]"), "{events:?}");
    (out, finish)
}

fn streams() -> [(&'static str, Value); 2] {
    [
        (
            "/v1/completions",
            json!({"prompt": "The lighthouse keeper climbed the stairs every evening and",
                   "max_tokens": 64, "temperature": 0, "stream": true}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Tell me about the sea."}],
                   "max_tokens": 64, "temperature": 0, "stream": true}),
        ),
    ]
}

#[test]
fn malformed_requests_get_4xx_and_never_touch_running_streams() {
    let _g = serial();
    let draft =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.dspark-Q8_0.gguf");
    assert!(draft.exists(), "{} is missing", draft.display());
    let draft = draft.to_str().expect("utf-8 path");
    let s = Server::start(&["-np", "2", "-c", "2048", "-md", draft, "--spec-no-bypass"]);
    let addr = s.addr.clone();

    // Each stream alone: the texts the concurrent run must reproduce.
    let alone: Vec<(String, String)> = streams()
        .iter()
        .map(|(path, body)| stream(&addr, path, body))
        .collect();
    for (text, finish) in &alone {
        eprintln!("alone: {finish}: {text:?}");
        assert!(!text.is_empty());
    }

    let runs: Vec<_> = streams()
        .into_iter()
        .map(|(path, body)| {
            let addr = addr.clone();
            thread::spawn(move || stream(&addr, path, &body))
        })
        .collect();
    let mut gen = Gen::new(0x5eed_f1a7, N_VOCAB);
    let mut by_status = std::collections::BTreeMap::<u16, usize>::new();
    for k in 0..N_BAD {
        let bad: Bad = gen.next_bad();
        let code = bad
            .send(&addr)
            .unwrap_or_else(|e| panic!("bad request {k} ({}) got no answer: {e}", bad.what));
        assert!(
            (400..500).contains(&code),
            "bad request {k} ({}) got {code}: {}\nlog:\n{}",
            bad.what,
            bad.describe(),
            s.log()
        );
        *by_status.entry(code).or_default() += 1;
    }
    eprintln!("{N_BAD} malformed requests by status: {by_status:?}");
    for (run, want) in runs.into_iter().zip(&alone) {
        let got = run.join().expect("a stream thread");
        assert_eq!(&got, want, "a stream beside the malformed requests");
    }
    let good = json!({"prompt": "Hello", "max_tokens": 4, "temperature": 0});
    let (code, body) = client::http(
        &addr,
        "POST",
        "/v1/completions",
        &[],
        Some(&good.to_string()),
    )
    .expect("a good request");
    assert_eq!(code, 200, "{body}");
    let log = s.log();
    assert!(!log.contains("panicked"), "a panic in the log:\n{log}");
    s.stop();
}
