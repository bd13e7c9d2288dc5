//! What `flint serve` takes from browsers and crowds (docs/SERVER.md, docs/SECURITY.md):
//!
//! - without an API key, a request whose `Host` is a foreign name (DNS rebinding) is refused
//!   with 403 and a POST whose body is not `application/json` (a cross-site form post) with 415,
//!   while JSON with `Host: localhost:PORT` works; `--allowed-hosts` names more hosts;
//! - a user or system message without content is a 400 naming the message, an assistant's with
//!   `tool_calls` may have none;
//! - one peer holds at most `--max-connections-per-peer` connections (its idlest close), and
//!   connections still receiving a body give way to a new one at the cap;
//! - a chat of more than 4096 messages is a 400, and a template that loops ~10¹⁰ times fails
//!   on its fuel (a 400) instead of pinning a thread;
//! - `ignore_eos` with a grammar is a 400, and a full queue answers 429 before parsing.
//!
//! The statuses are the HTTP rules of OpenAI's API and llama-server's (403, 415, 400); no
//! figure of flint's own is an expected value here.

use crate::client;
use crate::harness;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use client::http;
use harness::{serial, Server, LIVENESS};
use serde_json::{json, Value};

/// Sends a raw request with the given `Host` and `Content-Type`; the status and body.
fn raw(
    addr: &str,
    method: &str,
    path: &str,
    host: &str,
    ctype: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(LIVENESS))
        .expect("set a read timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if let Some(c) = ctype {
        req.push_str(&format!("Content-Type: {c}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).expect("send");
    let mut text = String::new();
    BufReader::new(s)
        .read_to_string(&mut text)
        .expect("read the answer");
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (code, body)
}

fn port(addr: &str) -> &str {
    addr.rsplit(':').next().expect("HOST:PORT")
}

#[test]
fn keyless_server_refuses_foreign_hosts_and_form_posts_and_empty_turns() {
    let _g = serial();
    let s = Server::start(&["--allowed-hosts", "flint.internal", "--queue", "0"]);
    let addr = s.addr.clone();
    let good = json!({"prompt": "Hello", "max_tokens": 2, "temperature": 0}).to_string();
    let local = format!("localhost:{}", port(&addr));

    let (code, body) = raw(
        &addr,
        "POST",
        "/v1/completions",
        &local,
        Some("application/json"),
        &good,
    );
    assert_eq!(code, 200, "JSON with Host: localhost: {body}");
    let (code, body) = raw(
        &addr,
        "POST",
        "/v1/completions",
        &local,
        Some("text/plain"),
        &good,
    );
    assert_eq!(code, 415, "a text/plain POST: {body}");
    let (code, body) = raw(&addr, "POST", "/v1/completions", &local, None, &good);
    assert_eq!(code, 415, "a POST with no Content-Type: {body}");
    let evil = format!("evil.example.com:{}", port(&addr));
    for path in ["/props", "/v1/models", "/slots"] {
        let (code, body) = raw(&addr, "GET", path, &evil, None, "");
        assert_eq!(code, 403, "GET {path} with a foreign Host: {body}");
        let v: Value = serde_json::from_str(&body).expect("a JSON error");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("--allowed-hosts"),
            "{body}"
        );
    }
    let (code, body) = raw(
        &addr,
        "POST",
        "/v1/completions",
        &evil,
        Some("application/json"),
        &good,
    );
    assert_eq!(code, 403, "a POST with a foreign Host: {body}");
    let named = format!("flint.internal:{}", port(&addr));
    let (code, body) = raw(&addr, "GET", "/props", &named, None, "");
    assert_eq!(code, 200, "a host of --allowed-hosts: {body}");
    let (code, body) = raw(&addr, "GET", "/v1/models", "[::1]", None, "");
    assert_eq!(code, 200, "a loopback address: {body}");

    // A user or system turn without content: 400 naming the message.
    for (i, messages) in [
        json!([{"role": "system", "content": "Be brief."}, {"role": "user"}]),
        json!([{"role": "system", "content": null}, {"role": "user", "content": "Hi"}]),
    ]
    .iter()
    .enumerate()
    {
        let body = json!({"messages": messages, "max_tokens": 2}).to_string();
        let (code, text) =
            http(&addr, "POST", "/v1/chat/completions", &[], Some(&body)).expect("a chat request");
        assert_eq!(code, 400, "{messages}: {text}");
        let v: Value = serde_json::from_str(&text).expect("a JSON error");
        let at = if i == 0 {
            "messages[1].content"
        } else {
            "messages[0].content"
        };
        assert_eq!(v["error"]["param"], at, "{text}");
    }
    let with_call = json!({"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [{"id": "c0", "type": "function",
            "function": {"name": "weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "sunny"},
    ], "max_tokens": 2, "temperature": 0})
    .to_string();
    let (code, text) =
        http(&addr, "POST", "/v1/chat/completions", &[], Some(&with_call)).expect("a chat request");
    assert_eq!(code, 200, "an assistant turn of tool calls only: {text}");
    let many: Vec<Value> = (0..4097)
        .map(|_| json!({"role": "user", "content": "a"}))
        .collect();
    let body = json!({"messages": many, "max_tokens": 1}).to_string();
    let (code, text) =
        http(&addr, "POST", "/v1/chat/completions", &[], Some(&body)).expect("a chat request");
    assert_eq!(code, 400, "4097 messages: {text}");

    // `ignore_eos` with a grammar could only fail at the grammar's end: refused.
    let body = json!({"prompt": "A JSON object:", "max_tokens": 8, "ignore_eos": true,
                      "json_schema": {"type": "object"}})
    .to_string();
    let (code, text) = http(&addr, "POST", "/v1/completions", &[], Some(&body)).expect("a request");
    assert_eq!(code, 400, "{text}");
    let v: Value = serde_json::from_str(&text).expect("a JSON error");
    assert_eq!(v["error"]["param"], "ignore_eos", "{text}");

    // With the one slot busy and no queue, a request is refused (429) before its body is read
    // as JSON: even a malformed one.
    let (code, chunked, mut r) = client::send(
        &addr,
        "POST",
        "/v1/completions",
        &[],
        Some(
            &json!({"prompt": "Count: 1, 2, 3,", "max_tokens": 64, "temperature": 0,
                     "stream": true})
            .to_string(),
        ),
    )
    .expect("a stream");
    assert_eq!(code, 200);
    let mut buf = String::new();
    let first = client::read_events(&mut r, chunked, &mut buf, |_| true);
    assert!(!first.is_empty(), "the stream gave no event");
    let (code, text) =
        http(&addr, "POST", "/v1/completions", &[], Some("{not json")).expect("a request");
    assert_eq!(
        code, 429,
        "a malformed request while the queue is full: {text}"
    );
    drop(r);
    s.stop();
}

/// Reads until the server closes the connection (or resets it).
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(LIVENESS))
        .expect("set a read timeout");
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn crowds_dribbled_bodies_and_runaway_templates_hold_nothing() {
    let _g = serial();
    let dir = harness::scratch("runaway-template");
    let template = dir.join("loop.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}{% for i in range(100000) %}{% for j in range(100000) %}\
         {% endfor %}{% endfor %}{{ m.content }}{% endfor %}",
    )
    .expect("write a template");
    let template = template.to_str().expect("a UTF-8 path").to_string();
    let s = Server::start(&[
        "--chat-template-file",
        &template,
        "--max-connections",
        "6",
        "--max-connections-per-peer",
        "3",
        "--timeout-body",
        "600",
        "--timeout-header",
        "600",
        "--timeout-idle",
        "600",
    ]);
    let addr = s.addr.clone();

    // Five idle connections from one peer: the two oldest are closed at its cap of 3.
    let mut idle: Vec<TcpStream> = (0..5)
        .map(|_| {
            let c = TcpStream::connect(&addr).expect("connect");
            // The server accepts in order: each connection is in its table before the next.
            std::thread::sleep(Duration::from_millis(100));
            c
        })
        .collect();
    assert!(
        closed(&mut idle[0]),
        "the idlest connection over the peer cap stays open"
    );
    assert!(
        closed(&mut idle[1]),
        "the second idlest connection over the peer cap stays open"
    );
    drop(idle);

    // Connections each dribbling a body hold no place: a good request gets in.
    let head = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n\
                Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\":";
    let mut dribblers: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut c = TcpStream::connect(&addr).expect("connect");
            c.write_all(head.as_bytes()).expect("send a head");
            std::thread::sleep(Duration::from_millis(200));
            c
        })
        .collect();
    let body = json!({"prompt": "Hello", "max_tokens": 2, "temperature": 0}).to_string();
    let (code, text) = http(&addr, "POST", "/v1/completions", &[], Some(&body))
        .unwrap_or_else(|e| panic!("a good request beside the dribblers: {e}\n{}", s.log()));
    assert_eq!(code, 200, "{text}");
    // The one that gave way was cut, its request unanswered.
    let mut first = BufReader::new(dribblers.remove(0));
    let mut line = String::new();
    let _ = first.read_line(&mut line);
    assert!(line.is_empty() || line.contains("503"), "{line:?}");
    drop(dribblers);

    // A template that would loop 10¹⁰ times runs out of fuel: a 400, the server free.
    let body = json!({"messages": [{"role": "user", "content": "Hi"}]}).to_string();
    let (code, text) = http(&addr, "POST", "/apply-template", &[], Some(&body))
        .unwrap_or_else(|e| panic!("/apply-template with a runaway template: {e}"));
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("fuel"), "{text}");
    s.stop();
}
