//! `flint serve -np 4` on a hybrid (`qwen35`) model: concurrent greedy requests each return
//! exactly the text, finish reason and token count the same request gets alone, one at a time
//! (every slot's recurrent state in the same batched steps), then again on slots that hold other
//! prompts' rows, and with a drafter per slot (rejected drafts roll each slot's state back).

use crate::client;
use crate::common;
use crate::harness;

use client::http;
use harness::{serial, Server};
use serde_json::{json, Value};

const SLOTS: [&str; 6] = ["-np", "4", "--queue", "8", "-c", "256"];

/// (prompt, max_tokens)
const REQUESTS: [(&str, u32); 6] = [
    ("The hybrid model reads", 16),
    ("a b c d e f g h i j k l m n o p q r s t u v w x y z", 12),
    ("Once upon a time", 20),
    ("1, 2, 3, 4, 5,", 10),
    ("The recurrent state of every slot", 14),
    ("Q: what is a delta rule?\nA:", 18),
];

/// One non-streamed completion: (text, finish reason, completion tokens).
fn complete(addr: &str, prompt: &str, max_tokens: u32) -> (String, String, u64) {
    let body = json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).to_string();
    let (code, text) = http(addr, "POST", "/v1/completions", &[], Some(&body)).expect("request");
    assert_eq!(code, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("JSON answer");
    let c = &v["choices"][0];
    (
        c["text"].as_str().expect("text").to_string(),
        c["finish_reason"].as_str().expect("reason").to_string(),
        v["usage"]["completion_tokens"].as_u64().expect("usage"),
    )
}

fn concurrent(addr: &str) -> Vec<(String, String, u64)> {
    let threads: Vec<_> = REQUESTS
        .iter()
        .map(|&(p, n)| {
            let addr = addr.to_string();
            std::thread::spawn(move || complete(&addr, p, n))
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("client thread"))
        .collect()
}

fn check(what: &str, want: &[(String, String, u64)], got: &[(String, String, u64)]) {
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        assert_eq!(g, w, "request {i}, {what}: concurrent vs alone");
    }
}

#[test]
fn four_hybrid_slots_give_each_request_its_text_alone_plain_and_with_drafters() {
    let _g = serial();
    let dir = harness::scratch("serve-hybrid");
    let model = common::random_preset(&dir, "qwen35-tiny-f32", 21);
    let s = Server::start_model(&model, &SLOTS, &[]);
    let addr = s.addr.clone();
    let want: Vec<_> = REQUESTS
        .iter()
        .map(|&(p, n)| complete(&addr, p, n))
        .collect();
    assert!(want.iter().all(|w| w.2 > 0), "{want:?}");
    check("plain", &want, &concurrent(&addr));
    check("plain, slots reused", &want, &concurrent(&addr));
    s.stop();

    let draft = dir.join("draft.gguf");
    harness::dspark_init(&model, &draft);
    let mut args = SLOTS.to_vec();
    // Every slot drafts (the drafter decision would leave a random drafter out).
    args.extend([
        "-md",
        draft.to_str().expect("utf-8 path"),
        "--spec-no-bypass",
    ]);
    let s = Server::start_model(&model, &args, &[]);
    check("with a drafter per slot", &want, &concurrent(&s.addr));
    let (_, m) = http(&s.addr, "GET", "/metrics", &[], None).expect("metrics");
    let metric = |name: &str| {
        m.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let drafted = metric("flint_spec_draft_tokens_total ");
    assert!(drafted > 0.0, "nothing was verified: {m}");
    eprintln!("{drafted} drafts verified");
    s.stop();
    std::fs::remove_dir_all(&dir).ok();
}
