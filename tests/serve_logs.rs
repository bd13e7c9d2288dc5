//! Acceptance tests of `flint serve`'s logs and metrics. A server run as a user would
//! (`RUST_LOG=debug flint serve …`) gets generations (plain and streamed), a refused body (400),
//! an unknown route (404) and a metrics scrape; its log must hold exactly one request line per
//! request, naming the method and path the client sent and the status and token counts the
//! client received. Then `/metrics` goes through Prometheus's own text parser
//! (tests/serve/metrics_check.py): both name families (`llamacpp:*`, `flint_*`) and the two
//! histograms, whose counts must equal the generations served. A second server with
//! `--log-format json --log-file` must write request lines that parse as JSON with those fields,
//! the same in the file as on stderr.

use crate::client;
use crate::harness;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use client::http;
use harness::{script, serial, Server, LIVENESS};
use serde_json::{json, Value};

/// One request the test sends, what it expects back, and what it got.
struct Sent {
    id: &'static str,
    method: &'static str,
    path: &'static str,
    body: Option<String>,
    status: u16,
    /// `usage` of a generation as the client read it (prompt, completion).
    usage: Option<(u64, u64)>,
}

/// The requests of both servers: two generations (one streamed), a 400, a 404, a scrape.
fn requests() -> Vec<Sent> {
    let chat = json!({
        "messages": [{"role": "user", "content": "Say hi"}],
        "max_tokens": 4, "temperature": 0,
    });
    let stream = json!({
        "prompt": "The capital of France is", "max_tokens": 5, "temperature": 0,
        "stream": true, "stream_options": {"include_usage": true},
    });
    let bad = json!({"prompt": "x", "max_tokens": -3});
    let s = |id, method, path, body: Option<&Value>, status| Sent {
        id,
        method,
        path,
        body: body.map(Value::to_string),
        status,
        usage: None,
    };
    vec![
        s("t-chat", "POST", "/v1/chat/completions", Some(&chat), 200),
        s("t-stream", "POST", "/v1/completions", Some(&stream), 200),
        s("t-bad", "POST", "/v1/completions", Some(&bad), 400),
        s("t-missing", "GET", "/no/such/route", None, 404),
        s("t-metrics", "GET", "/metrics", None, 200),
    ]
}

/// Send each request with its `X-Request-Id`, check the status, read the usage.
fn send_all(s: &Server, sent: &mut [Sent]) {
    for r in sent.iter_mut() {
        let headers = [("X-Request-Id", r.id)];
        let (code, body) = http(&s.addr, r.method, r.path, &headers, r.body.as_deref())
            .unwrap_or_else(|e| panic!("{} {}: {e}", r.method, r.path));
        assert_eq!(code, r.status, "{} {}: {body}", r.method, r.path);
        if code != 200 || r.body.is_none() {
            continue;
        }
        // A whole body, or the last `data:` event that carries usage.
        let usage = serde_json::from_str::<Value>(&body)
            .ok()
            .map(|v| v["usage"].clone())
            .or_else(|| {
                body.lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                    .map(|v| v["usage"].clone())
                    .rfind(|u| u.is_object())
            })
            .unwrap_or_else(|| panic!("{}: no usage in {body}", r.path));
        let n = |k: &str| {
            usage[k]
                .as_u64()
                .unwrap_or_else(|| panic!("usage.{k}: {usage}"))
        };
        r.usage = Some((n("prompt_tokens"), n("completion_tokens")));
    }
}

/// The log's request lines as field maps, by id, once every sent id has one (or the liveness
/// bound passes: the line is written when the response body ends, just after the client read it).
fn request_lines(
    s: &Server,
    sent: &[Sent],
    parse: fn(&str) -> Option<HashMap<String, String>>,
) -> HashMap<String, Vec<HashMap<String, String>>> {
    let t0 = Instant::now();
    loop {
        let mut by_id: HashMap<String, Vec<HashMap<String, String>>> = HashMap::new();
        for fields in s.log().lines().filter_map(parse) {
            if fields.get("message").map(String::as_str) == Some("request") {
                let id = fields.get("id").cloned().unwrap_or_default();
                by_id.entry(id).or_default().push(fields);
            }
        }
        if sent.iter().all(|r| by_id.contains_key(r.id)) || t0.elapsed() > LIVENESS {
            return by_id;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A text line `… INFO flint serve: request k=v k=v …` as fields (`message` = `request`).
fn text_fields(line: &str) -> Option<HashMap<String, String>> {
    let rest = line.split(" flint serve: request ").nth(1)?;
    let mut m: HashMap<String, String> = rest
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect();
    m.insert("message".into(), "request".into());
    Some(m)
}

/// A JSON line's top-level fields, as strings.
fn json_fields(line: &str) -> Option<HashMap<String, String>> {
    let v: Value = serde_json::from_str(line).ok()?;
    let obj = v.as_object()?;
    Some(
        obj.iter()
            .map(|(k, v)| {
                let s = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                (k.clone(), s)
            })
            .collect(),
    )
}

/// One line per request, with the method, path and status the client saw, and the usage.
fn check_lines(sent: &[Sent], by_id: &HashMap<String, Vec<HashMap<String, String>>>, log: &str) {
    for r in sent {
        let lines = by_id
            .get(r.id)
            .unwrap_or_else(|| panic!("no request line for {}: {log}", r.id));
        assert_eq!(lines.len(), 1, "{}: {lines:?}", r.id);
        let f = &lines[0];
        assert_eq!(f["method"], r.method, "{f:?}");
        assert_eq!(f["path"], r.path, "{f:?}");
        assert_eq!(f["status"], r.status.to_string(), "{f:?}");
        let ms: f64 = f["latency_ms"].parse().expect("latency_ms is a number");
        assert!(ms >= 0.0, "{f:?}");
        if let Some((_, completion)) = r.usage {
            assert_eq!(f["generated_tokens"], completion.to_string(), "{f:?}");
            assert_eq!(f["slot"], "0", "{f:?}");
            assert!(f.contains_key("prompt_tokens"), "{f:?}");
        }
    }
}

#[test]
fn each_request_is_logged_and_metrics_parse() {
    let _g = serial();
    let s = Server::start_env(&[], &[("RUST_LOG", "debug")]);
    let mut sent = requests();
    send_all(&s, &mut sent);
    // One more generation, so the histograms count more than one.
    let mut again = vec![Sent {
        id: "t-chat-2",
        ..requests().remove(0)
    }];
    send_all(&s, &mut again);
    sent.extend(again);
    let by_id = request_lines(&s, &sent, text_fields);
    check_lines(&sent, &by_id, &s.log());
    let served: Vec<(u64, u64)> = sent.iter().filter_map(|r| r.usage).collect();
    let (prompt, generated) = served.iter().fold((0, 0), |(p, g), (a, b)| (p + a, g + b));
    let got = script(
        "metrics_check.py",
        &[
            &s.url(),
            &served.len().to_string(),
            &prompt.to_string(),
            &generated.to_string(),
        ],
        LIVENESS,
    );
    eprintln!("metrics: {got}");
    s.stop();
}

#[test]
fn json_log_lines_parse_with_the_same_fields() {
    let _g = serial();
    let dir = harness::scratch("logs-json");
    let file = dir.join("flint.log");
    let file_arg = file.to_string_lossy().to_string();
    let s = Server::start(&["--log-format", "json", "--log-file", &file_arg]);
    let mut sent = requests();
    send_all(&s, &mut sent);
    // At the default level a scrape (like a health check) is not logged: the rest are.
    let (probes, sent): (Vec<Sent>, Vec<Sent>) =
        sent.into_iter().partition(|r| r.path == "/metrics");
    let by_id = request_lines(&s, &sent, json_fields);
    check_lines(&sent, &by_id, &s.log());
    for r in &probes {
        assert!(
            !by_id.contains_key(r.id),
            "{} logged at info: {:?}",
            r.path,
            by_id[r.id]
        );
    }
    for fields in by_id.values().flatten() {
        assert_eq!(fields["level"], "INFO", "{fields:?}");
        assert!(fields.contains_key("timestamp"), "{fields:?}");
    }
    // Each output stamps its own time: lines compare without it.
    let untimed = |l: &str| {
        let mut v: Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        v.as_object_mut().map(|o| o.remove("timestamp"));
        v
    };
    let stderr: Vec<Value> = s
        .log()
        .lines()
        .filter(|l| json_fields(l).is_some())
        .map(untimed)
        .collect();
    s.stop();
    // The file holds the lines stderr got, in the same order (stderr, read by a thread, may
    // lag behind the file: what it has is a prefix of the file), every one JSON.
    let written = std::fs::read_to_string(&file).expect("the log file exists");
    let lines: Vec<Value> = written.lines().map(untimed).collect();
    assert!(
        !stderr.is_empty() && lines.len() >= stderr.len(),
        "{} lines on stderr, {} in the file",
        stderr.len(),
        lines.len()
    );
    for (i, (a, b)) in stderr.iter().zip(&lines).enumerate() {
        assert_eq!(a, b, "line {i}: stderr and the file differ");
    }
}
