//! Continuous batching in `flint serve`: 8 concurrent greedy requests (prompts of mixed
//! lengths, some with stop strings) each return exactly the text, finish reason and token
//! counts the same request gets alone, one at a time: the 8 slots run batched steps, without a
//! drafter and with one per slot (every drafting slot's verify rows in the same forward).

use crate::client;
use crate::harness;

use client::http;
use harness::{serial, Server};
use serde_json::{json, Value};

const SLOTS: [&str; 6] = ["-np", "8", "--queue", "16", "-c", "512"];

/// (prompt, stop strings, max_tokens)
fn requests() -> Vec<(String, Vec<&'static str>, u32)> {
    let long = "The history of the printing press begins in the fifteenth century, when a \
                goldsmith in Mainz combined movable metal type, oil-based ink and a wooden \
                press adapted from those used to make wine. Within fifty years presses were \
                running in more than two hundred cities across Europe, and";
    vec![
        ("The capital of France is".into(), vec![], 24),
        (
            "Write a short poem about autumn leaves.".into(),
            vec!["\n\n"],
            40,
        ),
        ("1, 2, 3, 4, 5,".into(), vec![" 9"], 32),
        (long.into(), vec![], 32),
        ("def add(a, b):".into(), vec!["return"], 32),
        ("Q: Name three planets.\nA:".into(), vec!["."], 32),
        (format!("{long} the"), vec![], 16),
        ("Once upon a time".into(), vec![], 28),
    ]
}

/// One non-streamed completion: (text, finish reason, completion tokens).
fn complete(addr: &str, prompt: &str, stop: &[&str], max_tokens: u32) -> (String, String, u64) {
    let body = json!({
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stop": stop,
    })
    .to_string();
    let (code, text) = http(addr, "POST", "/v1/completions", &[], Some(&body)).expect("request");
    assert_eq!(code, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("JSON answer");
    let choice = &v["choices"][0];
    (
        choice["text"].as_str().expect("text").to_string(),
        choice["finish_reason"]
            .as_str()
            .expect("reason")
            .to_string(),
        v["usage"]["completion_tokens"].as_u64().expect("usage"),
    )
}

/// Every request at once, each on its own thread.
fn concurrent(addr: &str) -> Vec<(String, String, u64)> {
    let threads: Vec<_> = requests()
        .into_iter()
        .map(|(p, stop, n)| {
            let addr = addr.to_string();
            std::thread::spawn(move || complete(&addr, &p, &stop, n))
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("client thread"))
        .collect()
}

fn alone(addr: &str) -> Vec<(String, String, u64)> {
    requests()
        .iter()
        .map(|(p, stop, n)| complete(addr, p, stop, *n))
        .collect()
}

fn check(what: &str, want: &[(String, String, u64)], got: &[(String, String, u64)]) {
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        assert_eq!(g, w, "request {i}, {what}: concurrent vs alone");
    }
    let stops = want.iter().filter(|w| w.1 == "stop").count();
    eprintln!("{what}: 8 concurrent = alone ({stops} ended by stop or end token)");
}

#[test]
fn eight_concurrent_greedy_requests_get_their_text_alone() {
    let _g = serial();
    let s = Server::start(&SLOTS);
    assert!(s.log().contains("batched steps"), "{}", s.log());
    let addr = s.addr.clone();
    let want = alone(&addr);
    assert!(want.iter().any(|w| w.1 == "stop") && want.iter().any(|w| w.1 == "length"));
    let got = concurrent(&addr);
    check("batched", &want, &got);
    // Twice more: slots now hold other prompts' rows (prefix reuse, truncation).
    check("batched, again", &want, &concurrent(&addr));
    s.stop();

    let dir = harness::scratch("batch-drafter");
    let draft = dir.join("draft.gguf");
    harness::dspark_init(&harness::model(), &draft);
    let mut args = SLOTS.to_vec();
    // Every slot drafts (the drafter decision would leave a random drafter out).
    args.extend([
        "-md",
        draft.to_str().expect("utf-8 path"),
        "--spec-no-bypass",
    ]);
    let s = Server::start(&args);
    assert!(s.log().contains("batched steps"), "{}", s.log());
    let got = concurrent(&s.addr);
    check("batched, with a drafter per slot", &want, &got);
    let (_, m) = http(&s.addr, "GET", "/metrics", &[], None).expect("metrics");
    let drafted = m
        .lines()
        .find_map(|l| l.strip_prefix("flint_spec_draft_tokens_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(drafted > 0.0, "nothing was verified: {m}");
    eprintln!("{drafted} drafts verified");
    s.stop();
    std::fs::remove_dir_all(&dir).ok();
}
