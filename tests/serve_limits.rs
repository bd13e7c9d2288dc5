//! The connection limits of `flint serve` (docs/SERVER.md, "Faults, timeouts and limits"): a
//! request whose head or body stops half way is cut off (the head: the connection closed; the
//! body: 408), 200 idle connections past `--max-connections` do not keep a good request out,
//! and a request that waits in the queue past `--timeout` gets a 503 it can retry while the
//! request holding the slot goes on. The deadlines are set to a few seconds; the times are
//! printed, and only [`LIVENESS`], which a hang alone would pass, fails a test.

use crate::client;
use crate::harness;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use client::{http, read_events, send};
use harness::{serial, Server, LIVENESS};
use serde_json::{json, Value};

/// Reads until the server closes the connection; what it sent.
fn until_closed(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(LIVENESS))
        .expect("set a read timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the connection was not closed within {LIVENESS:?}: {e}"),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn good_request(addr: &str, s: &Server) -> (u16, String) {
    let body = json!({"prompt": "Hello", "max_tokens": 2, "temperature": 0}).to_string();
    http(addr, "POST", "/v1/completions", &[], Some(&body))
        .unwrap_or_else(|e| panic!("a good request: {e}\nlog:\n{}", s.log()))
}

#[test]
fn half_sent_requests_are_cut_off_and_idle_connections_keep_no_one_out() {
    let _g = serial();
    let s = Server::start(&[
        "--timeout-header",
        "2",
        "--timeout-body",
        "2",
        "--timeout-idle",
        "3",
        "--max-connections",
        "32",
    ]);
    let addr = s.addr.clone();

    // Half a head: closed without an answer.
    let t0 = Instant::now();
    let mut c = TcpStream::connect(&addr).expect("connect");
    c.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: applic")
        .expect("write half a head");
    let got = until_closed(&mut c);
    eprintln!(
        "half a head: closed after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(!got.starts_with("HTTP/1.1 2"), "{got}");

    // A whole head and half a body: 408.
    let t0 = Instant::now();
    let mut c = TcpStream::connect(&addr).expect("connect");
    c.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{\"prompt\": \"Hel",
    )
    .expect("write half a body");
    let got = until_closed(&mut c);
    eprintln!(
        "half a body: answered after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("request_timeout"), "{got}");

    // A connection that says nothing at all: closed too.
    let t0 = Instant::now();
    let mut c = TcpStream::connect(&addr).expect("connect");
    assert_eq!(until_closed(&mut c), "");
    eprintln!("silent: closed after {:.1} s", t0.elapsed().as_secs_f64());

    // 200 idle connections (silent or with half a head) against a cap of 32: a good request
    // still gets its answer, and so does one on a kept-alive connection opened after them.
    let idle: Vec<TcpStream> = (0..200)
        .map(|k| {
            let mut c = TcpStream::connect(&addr).expect("connect an idle connection");
            if k % 2 == 0 {
                c.write_all(b"GET /health HTTP/1.1\r\nHo")
                    .expect("half a head");
            }
            c
        })
        .collect();
    let (code, body) = good_request(&addr, &s);
    assert_eq!(
        code, 200,
        "a good request beside 200 idle connections: {body}"
    );
    let (code, body) = http(&addr, "GET", "/health", &[], None).expect("/health");
    assert_eq!(code, 200, "{body}");
    drop(idle);
    let log = s.log();
    assert!(!log.contains("panicked"), "{log}");
    s.stop();
}

#[test]
fn a_request_waiting_past_the_queue_deadline_gets_a_503_to_retry() {
    let _g = serial();
    let s = Server::start(&["-np", "1", "--timeout", "1"]);
    let addr = s.addr.clone();
    // The one slot is held by a long stream (admitted: its first chunk came).
    let long = json!({"prompt": "Count with me: 1, 2, 3, 4, 5,", "max_tokens": 200,
                      "temperature": 0, "stream": true})
    .to_string();
    let (code, chunked, mut r) =
        send(&addr, "POST", "/v1/completions", &[], Some(&long)).expect("send the long stream");
    assert_eq!(code, 200);
    let mut buf = String::new();
    let first = read_events(&mut r, chunked, &mut buf, |_| true);
    assert_eq!(first.len(), 1, "{first:?}");

    let t0 = Instant::now();
    let (code, body) = good_request(&addr, &s);
    eprintln!(
        "queued request answered after {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(code, 503, "{body}");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["error"]["code"], "queue_timeout", "{body}");

    // The stream holding the slot is untouched, and the slot serves again after it.
    let rest = read_events(&mut r, chunked, &mut buf, |d| d == "[DONE]");
    assert_eq!(rest.last().map(String::as_str), Some("[DONE]"), "{rest:?}");
    assert!(rest.iter().all(|e| !e.contains("\"error\"")), "{rest:?}");
    let (code, body) = good_request(&addr, &s);
    assert_eq!(code, 200, "{body}");
    s.stop();
}
