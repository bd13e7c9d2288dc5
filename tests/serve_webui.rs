//! The chat page of `flint serve` (`GET /`) in a real browser: headless Chromium (Debian's
//! `chromium` package; .ci/run installs it) driven over the DevTools protocol by
//! tests/serve/webui_browser.py, against the default model with the shipped drafter
//! (`--spec-no-bypass`, so it drafts) and an API key:
//! - `chat_page_streams_the_api_answer`: the page and its files load without a key while the
//!   API still answers 401; in the page a message sent with no key shows the 401, and with
//!   the key typed it streams (the text is seen growing) the answer that the same greedy
//!   request gives through `/v1/chat/completions`, with exactly the characters that stream's
//!   `draft_accepted` ranges name marked, the model's name, tok/s and τ from its `timings`; a
//!   second message gets the API's answer to the whole conversation.
//!   The JSON-schema box: the page's request carries it as `response_format` `json_schema`;
//!   its answer is the API's for that request and is a JSON object with the required key.
//! - `no_webui_serves_no_page`: `--no-webui` leaves `/` a 404.
//!
//! Missing Chromium fails the test (the script exits with the reason), never skips it.

use crate::client;
use crate::harness;

use std::path::Path;
use std::time::Duration;

use client::{http, read_events, send};
use harness::{script, serial, Server};
use serde_json::{json, Value};

const KEY: &str = "webui-test-key";
const PROMPT: &str = "What is 12 times 12? Answer briefly.";
/// A second message in the same chat: the page sends the first turn with it.
const FOLLOW_UP: &str = "And 3 times 3?";
/// Closed (`additionalProperties: false`), so the answer ends within the token budget.
const SCHEMA: &str = r#"{"type": "object", "properties": {"answer": {"type": "integer"}},
    "required": ["answer"], "additionalProperties": false}"#;

/// The answer of a streamed chat request through the API: its text, the accepted-draft
/// ranges in characters of the whole text, and the last chunk's `timings`.
fn api_stream(s: &Server, body: &Value) -> (String, Vec<[usize; 2]>, Value) {
    let auth = format!("Bearer {KEY}");
    let headers = [
        ("Content-Type", "application/json"),
        ("Authorization", auth.as_str()),
    ];
    let text = body.to_string();
    let (code, chunked, mut r) = send(
        &s.addr,
        "POST",
        "/v1/chat/completions",
        &headers,
        Some(&text),
    )
    .expect("stream request");
    assert_eq!(code, 200, "the API's stream: {}", s.log());
    let mut buf = String::new();
    let events = read_events(&mut r, chunked, &mut buf, |d| d == "[DONE]");
    let (mut answer, mut marks, mut timings) =
        (String::new(), Vec::<[usize; 2]>::new(), Value::Null);
    for d in events.iter().filter(|d| *d != "[DONE]") {
        let v: Value = serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}"));
        let choice = &v["choices"][0];
        let at = answer.chars().count();
        for r in choice["draft_accepted"].as_array().into_iter().flatten() {
            let (a, b) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
            let range = [at + a as usize, at + b as usize];
            match marks.last_mut() {
                Some(last) if last[1] == range[0] => last[1] = range[1],
                _ => marks.push(range),
            }
        }
        if let Some(c) = choice["delta"]["content"].as_str() {
            answer.push_str(c);
        }
        if v.get("timings").is_some() {
            timings = v["timings"].clone();
        }
    }
    (answer, marks, timings)
}

/// The page's request for `PROMPT` (what app.js sends with these settings).
fn page_body(max_tokens: u32, schema: Option<&str>) -> Value {
    let mut b = json!({
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": true,
        "max_tokens": max_tokens,
        "temperature": 0,
    });
    if let Some(s) = schema {
        let schema: Value = serde_json::from_str(s).expect("the test's schema");
        b["response_format"] = json!({"type": "json_schema",
            "json_schema": {"name": "page_schema", "schema": schema, "strict": true}});
    }
    b
}

fn browser(s: &Server, max_tokens: u32, extra: &[&str]) -> Value {
    let n = max_tokens.to_string();
    let url = s.url();
    let mut args = vec![
        "--url",
        &url,
        "--prompt",
        PROMPT,
        "--max-tokens",
        &n,
        "--key",
        KEY,
    ];
    args.extend_from_slice(extra);
    script("webui_browser.py", &args, Duration::from_secs(600))
}

/// Chars of `text` in `ranges`, joined with `|`.
fn marked(text: &str, ranges: &[[usize; 2]]) -> String {
    let chars: Vec<char> = text.chars().collect();
    let parts: Vec<String> = ranges
        .iter()
        .map(|&[a, b]| {
            chars[a.min(chars.len())..b.min(chars.len())]
                .iter()
                .collect()
        })
        .collect();
    parts.join("|")
}

#[test]
fn chat_page_streams_the_api_answer() {
    let _g = serial();
    let drafter = Path::new(env!("CARGO_MANIFEST_DIR")).join(flint::engine::DEFAULT_DRAFTER);
    let drafter = drafter.to_str().expect("a UTF-8 path");
    let s = Server::start(&["-md", drafter, "--spec-no-bypass", "--api-key", KEY]);

    // The page is public; the API is not.
    for (path, kind) in [
        ("/", "text/html"),
        ("/webui/app.js", "text/javascript"),
        ("/webui/style.css", "text/css"),
    ] {
        let (code, body) = s.get(path, &[]).expect("GET the page");
        assert_eq!(code, 200, "GET {path} without a key: {body}");
        assert!(!body.is_empty(), "GET {path}: empty ({kind})");
    }
    let chat = page_body(4, None).to_string();
    let (code, _) = http(
        &s.addr,
        "POST",
        "/v1/chat/completions",
        &[("Content-Type", "application/json")],
        Some(&chat),
    )
    .expect("POST without a key");
    assert_eq!(code, 401, "the API without a key");

    let (want, want_marks, timings) = api_stream(&s, &page_body(32, None));
    let got = browser(&s, 32, &["--follow-up", FOLLOW_UP]);
    eprintln!("page: {got}");
    assert_eq!(
        got["model"], "SmolLM2-135M-Instruct.Q4_1",
        "the model shown"
    );
    let without = got["without_key"].to_string();
    assert!(
        got["without_key"][0] == "error" && without.contains("401"),
        "a message sent without the key shows the 401: {without}"
    );
    assert_eq!(got["state"], "done", "{got}");
    assert_eq!(
        got["text"].as_str(),
        Some(want.as_str()),
        "the page's answer"
    );
    let seen = got["seen"].as_array().expect("texts seen");
    assert!(
        seen.iter()
            .any(|t| t.as_str().is_some_and(|t| !t.is_empty() && t != want)),
        "the answer streamed in (a part of it was seen first): {seen:?}"
    );
    let page_marks: Vec<[usize; 2]> = serde_json::from_value(got["marks"].clone()).expect("marks");
    assert!(
        !want_marks.is_empty(),
        "the drafter (--spec-no-bypass) had drafts accepted: {timings}"
    );
    assert_eq!(
        marked(&want, &page_marks),
        marked(&want, &want_marks),
        "the page marks the characters the stream's draft_accepted names"
    );
    let (acc, cycles) = (
        timings["draft_n_accepted"]
            .as_u64()
            .expect("draft_n_accepted"),
        timings["draft_cycles"].as_u64().expect("draft_cycles"),
    );
    let tau = format!("τ {:.2}", (acc + cycles) as f64 / cycles as f64);
    let stats = got["stats"].as_str().unwrap_or_default();
    assert!(stats.contains(&tau), "{stats:?} shows {tau}");
    assert!(stats.contains("tok/s"), "{stats:?} shows tok/s");

    // The second turn: the API's answer to the whole conversation.
    let mut body = page_body(32, None);
    body["messages"] = json!([
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": want},
        {"role": "user", "content": FOLLOW_UP},
    ]);
    let (want2, _, _) = api_stream(&s, &body);
    assert_eq!(got["follow_up"][0], "done", "{got}");
    assert_eq!(
        got["follow_up"][1].as_str(),
        Some(want2.as_str()),
        "the second turn"
    );

    // The JSON-schema box.
    let (want, _, _) = api_stream(&s, &page_body(48, Some(SCHEMA)));
    let got = browser(&s, 48, &["--schema", SCHEMA]);
    assert_eq!(got["state"], "done", "{got}");
    assert_eq!(
        got["text"].as_str(),
        Some(want.as_str()),
        "the schema's answer"
    );
    let v: Value = serde_json::from_str(&want)
        .unwrap_or_else(|e| panic!("the answer under the schema is not JSON ({e}): {want}"));
    assert!(v["answer"].is_i64(), "the schema's required integer: {v}");
    s.stop();
}

#[test]
fn no_webui_serves_no_page() {
    let _g = serial();
    let s = Server::start(&["--no-webui"]);
    let (code, body) = s.get("/", &[]).expect("GET /");
    assert_eq!(code, 404, "GET / with --no-webui: {body}");
    let (code, _) = s.get("/webui/app.js", &[]).expect("GET the script");
    assert_eq!(code, 404, "the page's script with --no-webui");
    s.stop();
}
