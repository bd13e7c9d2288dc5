//! A seeded generator of malformed `flint serve` requests (tests/serve_fault.rs). Every request
//! it makes is invalid by construction (one fault from the tables below, on top of which other
//! fields may hold random JSON), so the only right answer is a 4xx: a field of the wrong type or
//! out of bounds, an empty prompt, token ids outside the vocabulary, or a body that is not UTF-8,
//! not JSON, not an object, nested too deep, over the size limit, or cut short.

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use serde_json::{json, Map, Value};

/// xorshift64*: a small seeded generator (the test must replay exactly).
pub struct Gen {
    state: u64,
    n_vocab: u64,
}

/// One malformed request.
pub struct Bad {
    /// Which fault it carries.
    pub what: String,
    pub path: &'static str,
    pub body: Vec<u8>,
    /// The Content-Length to declare (more than `body.len()`: a truncated body).
    pub declared: usize,
}

impl Gen {
    pub fn new(seed: u64, n_vocab: u64) -> Gen {
        Gen {
            state: seed | 1,
            n_vocab,
        }
    }

    fn next(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }

    fn string(&mut self, max: usize) -> String {
        let n = self.below(max + 1);
        const ALPHABET: &[char] = &['a', 'Z', ' ', '"', '\\', '\n', 'é', '日', '🙂', '{', '<'];
        (0..n).map(|_| self.pick(ALPHABET)).collect()
    }

    /// Any JSON value, nested at most `depth` deep.
    pub fn value(&mut self, depth: u32) -> Value {
        let kinds = if depth == 0 { 6 } else { 8 };
        match self.below(kinds) {
            0 => Value::Null,
            1 => json!(self.below(2) == 1),
            2 => json!(self.next() as i64),
            3 => json!((self.next() as i64 as f64) * 1e-3),
            4 => json!(self.pick(&[0i64, -1, 1, i64::MAX, i64::MIN, 1 << 40])),
            5 => json!(self.string(24)),
            6 => Value::Array((0..self.below(4)).map(|_| self.value(depth - 1)).collect()),
            _ => {
                let mut m = Map::new();
                for _ in 0..self.below(4) {
                    m.insert(self.string(6), self.value(depth - 1));
                }
                Value::Object(m)
            }
        }
    }

    /// A value that `field` must refuse.
    fn bad_value(&mut self, field: &str) -> Value {
        let v = self.n_vocab;
        let choices: Vec<Value> = match field {
            "prompt" => vec![
                json!(""),
                json!([]),
                json!([[]]),
                json!([-1]),
                json!([1, -7, 3]),
                json!([v]),
                json!([u64::MAX]),
                json!([1.5]),
                json!([1e30]),
                json!(["a", "b"]),
                json!([[1, 2], [3]]),
                json!({"text": "hi"}),
                json!(true),
                json!(17),
                Value::Null,
            ],
            "messages" => vec![
                json!([]),
                json!("hello"),
                json!([{}]),
                json!([5]),
                json!([{"role": "wizard", "content": "x"}]),
                json!([{"role": 3, "content": "x"}]),
                json!([{"role": "user", "content": 5}]),
                json!([{"role": "user", "content": {"text": "x"}}]),
                json!([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]),
                Value::Null,
            ],
            "max_tokens" | "max_completion_tokens" => vec![
                json!(0),
                json!(-5),
                json!(i64::MIN),
                json!(1_000_000_000),
                json!(2.5),
                json!("10"),
                json!(true),
                json!([8]),
            ],
            "temperature" => vec![json!(-1), json!(2.5), json!(1e308), json!("hot"), json!([])],
            "top_p" => vec![json!(0), json!(-0.5), json!(1.5), json!("x")],
            "top_k" => vec![json!(-1), json!(1e12), json!(v + 1), json!("x"), json!(0.5)],
            "min_p" => vec![json!(-1), json!(2), json!({})],
            "presence_penalty" | "frequency_penalty" => vec![json!(3), json!(-3), json!("x")],
            "repeat_penalty" => vec![json!(-1), json!(11), json!([])],
            "seed" => vec![json!("abc"), json!(1.5), json!([]), json!({})],
            "stop" => vec![
                json!(5),
                json!([5]),
                json!(["x".repeat(300)]),
                json!(vec!["s"; 17]),
                json!({}),
            ],
            "stream" => vec![json!("yes"), json!(1), json!([]), json!({})],
            "stream_options" => vec![json!(5), json!({"include_usage": "x"})],
            "n" => vec![json!(2), json!(0), json!(-1), json!("1")],
            // Log-probabilities are served (a bool on chat, 0 to 20 on completions): only
            // values neither route takes.
            "logprobs" => vec![json!(-1), json!("x"), json!([]), json!({})],
            "model" => vec![json!(5), json!([]), json!({})],
            "tools" => vec![
                json!("f"),
                json!([{"type": "function"}]),
                json!([{"type": "function", "function": {"parameters": {}}}]),
                json!([{"type": "retrieval"}]),
                // A parameter schema llguidance cannot honour (fail closed, 400).
                json!([{"type": "function", "function": {"name": "f", "parameters":
                    {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}}}}]),
            ],
            _ => vec![json!("?")],
        };
        self.pick(&choices)
    }

    /// The next malformed request.
    pub fn next_bad(&mut self) -> Bad {
        let chat = self.below(2) == 1;
        let path = if chat {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        let mut body = if chat {
            json!({"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 4})
        } else {
            json!({"prompt": "Say something.", "max_tokens": 4})
        };
        let bytes = |v: &Value| v.to_string().into_bytes();
        let (what, bytes, declared) = match self.below(10) {
            // Not UTF-8.
            0 => {
                let mut b = bytes(&body);
                let at = self.below(b.len());
                b.insert(at, self.pick(&[0xff, 0xc3, 0x80, 0xfe]));
                ("invalid UTF-8".to_string(), b, None)
            }
            // Cut short: less body than the declared length, then the client stops sending.
            1 => {
                let b = bytes(&body);
                let cut = self.below(b.len());
                (
                    "a truncated body".to_string(),
                    b[..cut].to_vec(),
                    Some(b.len()),
                )
            }
            // Not JSON (a JSON text cut in the middle), or not an object.
            2 => {
                let b = bytes(&body);
                let cut = 1 + self.below(b.len() - 1);
                ("malformed JSON".to_string(), b[..cut].to_vec(), None)
            }
            3 => {
                let v = match self.value(2) {
                    Value::Object(_) => json!([1, 2]),
                    v => v,
                };
                (
                    format!("a body that is not an object: {v}"),
                    bytes(&v),
                    None,
                )
            }
            // Nested too deep, or over the size limit.
            4 => {
                let n = 65 + self.below(200);
                let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
                let b = format!("{{\"prompt\": \"x\", \"extra\": {deep}}}").into_bytes();
                (format!("JSON nested {n} deep"), b, None)
            }
            // Declared over the limit: refused from its length, before any of it is read
            // (so none is sent: a server that closes on unread bytes would reset the socket).
            5 => {
                let big = "a".repeat((1 << 20) + 1 + self.below(1000));
                body["prompt"] = json!(big);
                let n = bytes(&body).len();
                ("a body over 1 MiB".to_string(), Vec::new(), Some(n))
            }
            // One field refused, the others random.
            _ => {
                let fields: &[&str] = if chat {
                    &[
                        "messages",
                        "max_tokens",
                        "max_completion_tokens",
                        "temperature",
                        "top_p",
                        "top_k",
                        "min_p",
                        "presence_penalty",
                        "frequency_penalty",
                        "repeat_penalty",
                        "seed",
                        "stop",
                        "stream",
                        "stream_options",
                        "n",
                        "logprobs",
                        "model",
                        "tools",
                    ]
                } else {
                    &[
                        "prompt",
                        "prompt",
                        "prompt",
                        "max_tokens",
                        "temperature",
                        "top_p",
                        "top_k",
                        "min_p",
                        "presence_penalty",
                        "repeat_penalty",
                        "seed",
                        "stop",
                        "stream",
                        "stream_options",
                        "n",
                        "logprobs",
                        "model",
                    ]
                };
                let field = self.pick(fields);
                let bad = self.bad_value(field);
                for _ in 0..self.below(3) {
                    let key = self.pick(&["user", "suffix", "echo", "best_of", "x-extra"]);
                    body[key] = self.value(2);
                }
                if bad.is_null() {
                    if let Some(o) = body.as_object_mut() {
                        o.remove(field);
                    }
                } else {
                    body[field] = bad.clone();
                }
                (format!("`{field}` = {}", short(&bad)), bytes(&body), None)
            }
        };
        let declared = declared.unwrap_or(bytes.len());
        Bad {
            what,
            path,
            body: bytes,
            declared,
        }
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!(
            "{}… ({} bytes)",
            &s[..s.floor_char_boundary_compat(80)],
            s.len()
        )
    } else {
        s
    }
}

trait FloorBoundary {
    fn floor_char_boundary_compat(&self, at: usize) -> usize;
}

impl FloorBoundary for str {
    fn floor_char_boundary_compat(&self, mut at: usize) -> usize {
        while !self.is_char_boundary(at) {
            at -= 1;
        }
        at
    }
}

impl Bad {
    /// A sketch of the body for a failure message.
    pub fn describe(&self) -> String {
        let s = String::from_utf8_lossy(&self.body);
        let cut = s.floor_char_boundary_compat(s.len().min(300));
        format!(
            "POST {} ({} of {} bytes): {}",
            self.path,
            self.body.len(),
            self.declared,
            &s[..cut]
        )
    }

    /// Send it on a fresh connection; the response's status. A truncated body is followed by the
    /// end of the client's sending side, so the server sees the body end early.
    pub fn send(&self, addr: &str) -> std::io::Result<u16> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.path, self.declared
        );
        s.write_all(head.as_bytes())?;
        // A server may answer an oversized body before reading it, and close.
        if s.write_all(&self.body).is_ok() && self.declared > self.body.len() {
            s.shutdown(Shutdown::Write)?;
        }
        let mut r = BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line)?;
        line.split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("status line {line:?}")))
    }
}
