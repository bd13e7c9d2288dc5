//! `flint serve` as a drop-in for llama-server (issue 42, point 3), on one shared server
//! (`-np 2`, batched steps, `-s 42`, CORS for one origin, keep-alive every second). Each check
//! is held to an outside rule:
//! - every refused field of the table (OpenAI's and llama-server's documented fields) gets a
//!   400 naming the field in `param`; their "off" values are accepted;
//! - `/tokenize` gives llama.cpp's ids for the committed strings (tests/data/tokenizer), and
//!   `/detokenize` llama.cpp's text; `/apply-template` gives Jinja2's render (Hugging Face's
//!   `apply_chat_template`) of SmolLM2's template;
//! - `logit_bias`: on the prompt of the committed llama.cpp logits, greedy gives llama.cpp's
//!   top token, a -100 bias (or `false`) on it gives llama.cpp's runner-up, +100 forces a token;
//! - `/completion` plain and streamed (llama-server's event shape) give the same greedy text;
//!   `ignore_eos` runs to `n_predict`; `-s 42` makes seedless sampled requests repeat and equal
//!   to `"seed": 42`;
//! - the refused fields and `logit_bias` again through the official `openai` Python client;
//! - `/props`, CORS preflight and headers (the Fetch standard's), and a `: keep-alive` comment on
//!   a stream held in the queue.

use crate::client;
use crate::harness;

use std::io::{BufRead, Read};
use std::net::TcpStream;
use std::path::Path;

use client::{body_piece, http, send};
use flint::server::fields::{self, Kind, FIELDS};
use harness::{serial, Server};
use serde_json::{json, Value};

const ORIGIN: &str = "http://front.example";
/// "The capital of France is" (tests/data/fixtures/smollm2_reference.json).
const FRANCE: [u32; 5] = [504, 3575, 282, 4649, 314];

fn post(s: &Server, path: &str, body: &Value) -> (u16, Value) {
    let (code, text) = http(&s.addr, "POST", path, &[], Some(&body.to_string()))
        .unwrap_or_else(|e| panic!("POST {path}: {e}\n{}", s.log()));
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"));
    (code, v)
}

fn ok(s: &Server, path: &str, body: &Value) -> Value {
    let (code, v) = post(s, path, body);
    assert_eq!(code, 200, "POST {path} {body}: {v}");
    v
}

fn fixture(rel: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    serde_json::from_str(&std::fs::read_to_string(&p).expect("read a fixture")).expect("JSON")
}

fn detok(s: &Server, ids: &[u32]) -> String {
    let v = ok(s, "/detokenize", &json!({ "tokens": ids }));
    v["content"].as_str().expect("content").to_string()
}

/// Status and lower-cased header lines of a request's answer.
fn head(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<String>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    std::io::Write::write_all(&mut s, req.as_bytes()).expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).ok();
    let mut lines = text.split("\r\n");
    let code = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let hs = lines
        .take_while(|l| !l.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    (code, hs)
}

fn refused_fields_are_named(s: &Server) {
    let mut n = 0;
    for f in FIELDS {
        let Kind::Refused { ask, .. } = f.kind else {
            continue;
        };
        let ask: Value = serde_json::from_str(ask).expect("ask is JSON");
        let (path, mut body) = if f.at & fields::CHAT != 0 {
            (
                "/v1/chat/completions",
                json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}),
            )
        } else if f.at & fields::LLAMA != 0 {
            ("/completion", json!({"prompt": "Hi", "n_predict": 1}))
        } else {
            ("/v1/completions", json!({"prompt": "Hi", "max_tokens": 1}))
        };
        body[f.name] = ask;
        let (code, v) = post(s, path, &body);
        assert_eq!(code, 400, "{} on {path}: {v}", f.name);
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert_eq!(v["error"]["param"], f.name, "{v}");
        n += 1;
    }
    assert!(n >= 30, "only {n} refused fields");
    // Unknown fields are ignored and named, or refused under --strict-fields: serve_clients.
    // Off values ask for nothing (what llama.cpp's web UI sends by default).
    let off = json!({"prompt": "Hi", "n_predict": 1, "mirostat": 0, "typical_p": 1.0,
                     "n_probs": 0, "dry_multiplier": 0.0, "n_keep": 0, "id_slot": -1,
                     "samplers": null, "cache_prompt": true, "xtc_threshold": 0.1});
    ok(s, "/completion", &off);
    eprintln!("{n} refused fields named");
}

fn tokenize_matches_llama_cpp(s: &Server) {
    let cases = fixture("tests/data/tokenizer/llamacpp_tokenizer.json");
    for c in cases.as_array().expect("cases") {
        let text = c["text"].as_str().expect("text");
        let v = ok(s, "/tokenize", &json!({ "content": text }));
        assert_eq!(v["tokens"], c["ids_parse_special"], "{text:?}");
        let v = ok(
            s,
            "/tokenize",
            &json!({"content": text, "parse_special": false, "add_special": true}),
        );
        assert_eq!(v["tokens"], c["ids"], "{text:?} (SmolLM2 adds no BOS)");
        let ids: Vec<u32> = serde_json::from_value(c["ids"].clone()).expect("ids");
        assert_eq!(
            detok(s, &ids),
            c["detok"].as_str().expect("detok"),
            "{text:?}"
        );
        let v = ok(
            s,
            "/tokenize",
            &json!({"content": text, "with_pieces": true}),
        );
        let mut bytes = Vec::new();
        for t in v["tokens"].as_array().expect("tokens") {
            match &t["piece"] {
                Value::String(p) => bytes.extend_from_slice(p.as_bytes()),
                Value::Array(b) => bytes.extend(b.iter().map(|x| x.as_u64().expect("byte") as u8)),
                p => panic!("piece {p}"),
            }
        }
        assert_eq!(String::from_utf8_lossy(&bytes), text, "pieces of {text:?}");
    }
    for text in [
        "fn main() { println!(\"日本語 🎉\"); }\n\tlet x = 1;",
        "emoji 👨\u{200d}👩\u{200d}👧 and CJK 漢字かな",
    ] {
        let v = ok(s, "/tokenize", &json!({ "content": text }));
        let ids: Vec<u32> = serde_json::from_value(v["tokens"].clone()).expect("ids");
        assert_eq!(detok(s, &ids), text, "round trip");
    }
}

fn apply_template_is_jinja2s(s: &Server) {
    let cases = fixture("tests/data/tokenizer/chat_templates.json");
    let mut n = 0;
    for c in cases.as_array().expect("cases") {
        if c["name"] != "smollm2" || c["add_generation_prompt"] != true {
            continue;
        }
        let v = ok(s, "/apply-template", &json!({ "messages": c["messages"] }));
        assert_eq!(v["prompt"], c["expected"]);
        n += 1;
    }
    assert!(n >= 2);
}

fn props(s: &Server) {
    let (code, text) = s.get("/props", &[]).expect("GET /props");
    assert_eq!(code, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    let template = fixture("tests/data/tokenizer/chat_templates.json")[0]["template"].clone();
    assert_eq!(v["chat_template"], template, "the model's own template");
    assert_eq!(v["total_slots"], 2);
    assert!(v["model_path"]
        .as_str()
        .is_some_and(|p| p.ends_with("SmolLM2-135M-Instruct.Q4_1.gguf")));
    let d = &v["default_generation_settings"];
    assert_eq!(d["n_ctx"], 1024, "-c 2048 over 2 slots");
    assert_eq!(d["params"]["seed"], 42);
    assert!(
        v["build_info"].is_string() && v["modalities"].is_object(),
        "{v}"
    );
}

/// Checks `logit_bias` on both routes; llama.cpp's (top, runner-up, lowest listed) token ids.
fn logit_bias_follows_llama_cpp_logits(s: &Server) -> (u32, u32, u32) {
    let fx = fixture("tests/data/fixtures/smollm2_reference.json");
    let case = &fx["cases"][0];
    assert_eq!(case["prompt_ids"], json!(FRANCE));
    // Ids by llama.cpp's logits, best first.
    let ids: Vec<u64> = serde_json::from_value(case["ids"].clone()).expect("ids");
    let logits: Vec<f64> = serde_json::from_value(case["llamacpp_logits"].clone()).expect("l");
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let (top, second) = (ids[order[0]] as u32, ids[order[1]] as u32);
    let low = ids[order[order.len() - 1]] as u32;
    let one = |extra: Value, path: &str| {
        let mut b = json!({"prompt": FRANCE, "temperature": 0, "n_predict": 1});
        for (k, v) in extra.as_object().expect("object") {
            b[k] = v.clone();
        }
        let v = ok(s, path, &b);
        v["content"]
            .as_str()
            .or(v["choices"][0]["text"].as_str())
            .expect("text")
            .to_string()
    };
    let (top_t, second_t, low_t) = (detok(s, &[top]), detok(s, &[second]), detok(s, &[low]));
    assert_ne!(top_t, second_t);
    for path in ["/completion", "/v1/completions"] {
        assert_eq!(
            one(json!({}), path),
            top_t,
            "greedy = llama.cpp's top token"
        );
        let ban = json!({ "logit_bias": { top.to_string(): -100 } });
        assert_eq!(one(ban, path), second_t, "-100 on the top token");
        let ban = json!({ "logit_bias": [[top, false]] });
        assert_eq!(one(ban, path), second_t, "false on the top token");
        let force = json!({ "logit_bias": [[low, 100]] });
        assert_eq!(
            one(force, path),
            low_t,
            "+100 forces the lowest listed token"
        );
    }
    (top, second, low)
}

/// The same rules through the official `openai` client (tests/serve/openai_fields.py).
fn openai_client(s: &Server, (top, second, low): (u32, u32, u32)) {
    let mut args: Vec<String> = vec!["--base-url".into(), s.url()];
    for (k, v) in [("--top", top), ("--second", second), ("--low", low)] {
        args.extend([k.to_string(), v.to_string()]);
    }
    for f in FIELDS.iter().filter(|f| f.at & fields::CHAT != 0) {
        if let Kind::Refused { ask, .. } = f.kind {
            args.extend(["--refused".to_string(), format!("{}={ask}", f.name)]);
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = harness::script(
        "openai_fields.py",
        &args,
        std::time::Duration::from_secs(240),
    );
    assert!(r["refused"].as_u64().is_some_and(|n| n >= 20), "{r}");
}

/// The text of a streamed `/completion`, its last event checked.
fn streamed(s: &Server, body: &Value) -> (String, Value) {
    let (code, chunked, mut r) =
        send(&s.addr, "POST", "/completion", &[], Some(&body.to_string())).expect("send");
    assert_eq!(code, 200);
    let mut raw = String::new();
    while let Some(p) = body_piece(&mut r, chunked).expect("read the stream") {
        raw.push_str(&String::from_utf8_lossy(&p));
    }
    let events: Vec<Value> = raw
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect();
    let (last, parts) = events.split_last().expect("events");
    assert_eq!(last["stop"], true, "{last}");
    assert!(parts
        .iter()
        .all(|e| e["stop"] == false && e["content"].is_string()));
    let text: String = parts.iter().filter_map(|e| e["content"].as_str()).collect();
    (text, last.clone())
}

fn completion_plain_and_streamed(s: &Server) {
    let body = json!({"prompt": "The capital of France is", "n_predict": 12, "temperature": 0});
    let plain = ok(s, "/completion", &body);
    assert_eq!(plain["stop"], true);
    assert_eq!(plain["tokens_evaluated"], FRANCE.len());
    assert_eq!(plain["tokens_predicted"], 12);
    assert_eq!(plain["stop_type"], "limit");
    assert!(plain["timings"]["predicted_n"].is_u64(), "{plain}");
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let (text, last) = streamed(s, &sb);
    assert_eq!(text, plain["content"].as_str().expect("content"));
    assert_eq!(last["tokens_predicted"], 12);
    // The end of a turn: `eos` without ignore_eos, `n_predict` tokens with it.
    let chat = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n";
    let mut b = json!({"prompt": chat, "n_predict": 48, "temperature": 0});
    let v = ok(s, "/completion", &b);
    assert_eq!(v["stop_type"], "eos", "{v}");
    assert!(v["tokens_predicted"].as_u64().expect("n") < 48);
    b["ignore_eos"] = json!(true);
    let v = ok(s, "/completion", &b);
    assert_eq!(
        (v["stop_type"].clone(), v["tokens_predicted"].clone()),
        (json!("limit"), json!(48))
    );
    let mut b =
        json!({"prompt": "Count: 1, 2, 3,", "n_predict": 30, "temperature": 0, "stop": [" 6"]});
    let v = ok(s, "/completion", &b);
    assert_eq!(
        (v["stop_type"].clone(), v["stopping_word"].clone()),
        (json!("word"), json!(" 6")),
        "{v}"
    );
    b["stream"] = json!(true);
    let (text, last) = streamed(s, &b);
    assert_eq!(text, v["content"].as_str().expect("content"));
    assert_eq!(last["stop_type"], "word");
}

fn seed_from_the_command_line(s: &Server) {
    let body = json!({"prompt": "Once upon a time", "n_predict": 24, "temperature": 1.0,
                      "top_k": 0, "top_p": 1.0, "min_p": 0.0});
    let a = ok(s, "/completion", &body)["content"].clone();
    let b = ok(s, "/completion", &body)["content"].clone();
    let mut seeded = body.clone();
    seeded["seed"] = json!(42);
    let c = ok(s, "/completion", &seeded)["content"].clone();
    seeded["seed"] = json!(7);
    let d = ok(s, "/completion", &seeded)["content"].clone();
    assert_eq!(a, b, "two seedless requests under -s 42");
    assert_eq!(a, c, "a seedless request is seed 42");
    assert_ne!(a, d, "another seed samples another text");
}

fn cors(s: &Server) {
    let pre = [
        ("Origin", ORIGIN),
        ("Access-Control-Request-Method", "POST"),
        (
            "Access-Control-Request-Headers",
            "authorization, content-type",
        ),
    ];
    let (code, hs) = head(&s.addr, "OPTIONS", "/v1/chat/completions", &pre);
    assert!((200..300).contains(&code), "preflight: {code} {hs:?}");
    let has = |hs: &[String], l: &str| hs.iter().any(|h| h == l);
    assert!(
        has(&hs, &format!("access-control-allow-origin: {ORIGIN}")),
        "{hs:?}"
    );
    assert!(hs
        .iter()
        .any(|h| h.starts_with("access-control-allow-methods:") && h.contains("post")));
    assert!(hs
        .iter()
        .any(|h| h.starts_with("access-control-allow-headers:") && h.contains("authorization")));
    let (code, hs) = head(&s.addr, "GET", "/health", &[("Origin", ORIGIN)]);
    assert_eq!(code, 200);
    assert!(
        has(&hs, &format!("access-control-allow-origin: {ORIGIN}")),
        "{hs:?}"
    );
    let (_, hs) = head(
        &s.addr,
        "GET",
        "/health",
        &[("Origin", "http://other.example")],
    );
    assert!(
        !hs.iter()
            .any(|h| h.starts_with("access-control-allow-origin")),
        "{hs:?}"
    );
}

fn keep_alive_while_queued(s: &Server) {
    let long = json!({"prompt": "Tell me a long story.", "n_predict": 900, "ignore_eos": true,
                      "temperature": 0, "stream": true})
    .to_string();
    // Two streams hold both slots (each has sent an event: admitted).
    let mut holders = Vec::new();
    for _ in 0..2 {
        let (code, _, mut r) =
            send(&s.addr, "POST", "/completion", &[], Some(&long)).expect("send");
        assert_eq!(code, 200);
        let mut line = String::new();
        while !line.starts_with("data: ") {
            line.clear();
            r.read_line(&mut line).expect("the holder's first event");
        }
        holders.push(r);
    }
    let queued = json!({"prompt": "Hi", "n_predict": 2, "stream": true}).to_string();
    let (code, chunked, mut r) =
        send(&s.addr, "POST", "/completion", &[], Some(&queued)).expect("send");
    assert_eq!(code, 200);
    let mut raw = String::new();
    while !raw.contains(": keep-alive\n\n") {
        let p = body_piece(&mut r, chunked)
            .expect("read")
            .expect("the stream ended");
        raw.push_str(&String::from_utf8_lossy(&p));
        assert!(
            !raw.contains("data: "),
            "an event before any keep-alive: {raw}"
        );
    }
    let (_, slots) = s.get("/slots", &[]).expect("/slots");
    let slots: Value = serde_json::from_str(&slots).expect("JSON");
    assert!(slots
        .as_array()
        .expect("slots")
        .iter()
        .all(|x| x["is_processing"] == true));
    drop(holders);
    while let Some(p) = body_piece(&mut r, chunked).expect("read") {
        raw.push_str(&String::from_utf8_lossy(&p));
    }
    assert!(
        raw.contains("\"stop\":true"),
        "the queued stream ran once a slot was free: {raw}"
    );
}

#[test]
fn llama_server_routes_fields_and_sampling() {
    let _g = serial();
    let s = Server::start(&[
        "-np",
        "2",
        "-c",
        "2048",
        "-s",
        "42",
        "--cors-origin",
        ORIGIN,
        "--sse-keepalive",
        "1",
    ]);
    refused_fields_are_named(&s);
    tokenize_matches_llama_cpp(&s);
    apply_template_is_jinja2s(&s);
    props(&s);
    cors(&s);
    let ids = logit_bias_follows_llama_cpp_logits(&s);
    openai_client(&s, ids);
    completion_plain_and_streamed(&s);
    seed_from_the_command_line(&s);
    keep_alive_while_queued(&s);
    s.stop();
}

/// docs/SERVER.md's tables name every field of the table the server holds requests to.
#[test]
fn the_docs_name_every_field() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/SERVER.md");
    let docs = std::fs::read_to_string(p).expect("read docs/SERVER.md");
    let missing: Vec<&str> = FIELDS
        .iter()
        .map(|f| f.name)
        .filter(|n| !docs.contains(&format!("`{n}`")))
        .collect();
    assert!(missing.is_empty(), "not in docs/SERVER.md: {missing:?}");
}
