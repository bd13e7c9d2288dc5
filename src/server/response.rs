//! Response bodies in OpenAI's shapes: whole completions, SSE chunks (`data: {json}` events
//! ending with `data: [DONE]`), `usage`, and llama.cpp's `timings` object with the speculative
//! counters. Streams end with an `error` event when the generation fails or the server stops.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::drafted::Piece;
use super::error::ApiError;
use super::logprobs::{self as lp, LpToken, Offsets};
use super::request::{Endpoint, LogprobAsk};
use super::slots::{Event, Outcome};
use super::tools::delta::{self, Streamer};
use super::tools::parse::Reader;

/// What every body of one response repeats.
#[derive(Debug, Clone)]
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub endpoint: Endpoint,
    pub include_usage: bool,
    /// How to read a chat answer (reasoning, tool calls); `None`: the text is the content.
    pub reader: Option<Reader>,
    /// Log-probabilities asked for, and the prompt's text with `echo`.
    pub logprobs: LogprobAsk,
    pub echo: Option<String>,
}

fn usage(o: &Outcome) -> Value {
    json!({
        "prompt_tokens": o.prompt_tokens,
        "completion_tokens": o.completion_tokens,
        "total_tokens": o.prompt_tokens + o.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": o.cached_tokens},
    })
}

/// llama.cpp's `timings` (prompt = the tokens actually processed, after the reused prefix).
pub fn timings(o: &Outcome) -> Value {
    let per = |n: usize, ms: f64| {
        if n > 0 {
            (
                ms / n as f64,
                if ms > 0.0 { 1e3 * n as f64 / ms } else { 0.0 },
            )
        } else {
            (0.0, 0.0)
        }
    };
    let prompt_n = o.prompt_tokens - o.cached_tokens.min(o.prompt_tokens);
    let (ppt, pps) = per(prompt_n, o.prompt_ms);
    let (tpt, tps) = per(o.completion_tokens, o.predicted_ms);
    let mut t = json!({
        "cache_n": o.cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": o.prompt_ms,
        "prompt_per_token_ms": ppt,
        "prompt_per_second": pps,
        "predicted_n": o.completion_tokens,
        "predicted_ms": o.predicted_ms,
        "predicted_per_token_ms": tpt,
        "predicted_per_second": tps,
    });
    if let Some((drafted, accepted)) = o.spec {
        t["draft_n"] = json!(drafted);
        t["draft_n_accepted"] = json!(accepted);
        t["draft_cycles"] = json!(o.draft_cycles);
    }
    t
}

impl Meta {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion | Endpoint::LlamaCompletion, _) => "text_completion",
        }
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": concat!("flint-", env!("CARGO_PKG_VERSION")),
            "choices": choices,
        })
    }

    /// The prefix of this response's tool-call ids.
    fn call_prefix(&self) -> String {
        self.id.replacen("chatcmpl", "call", 1)
    }

    /// The `logprobs` of a choice holding `entries` (`null` when none were asked for).
    fn logprobs(&self, entries: &[LpToken], at: &mut Offsets) -> Value {
        match (self.logprobs.top, self.endpoint) {
            (None, _) => Value::Null,
            (Some(_), Endpoint::Chat) => lp::chat(entries),
            (Some(n), _) => lp::legacy(entries, n, at),
        }
    }

    /// A whole (non-streamed) completion.
    pub fn whole(&self, text: String, entries: &[LpToken], o: &Outcome) -> Value {
        let logprobs = self.logprobs(entries, &mut Offsets::default());
        let text = match &self.echo {
            Some(prompt) => format!("{prompt}{text}"),
            None => text,
        };
        let choice = match (self.endpoint, &self.reader) {
            (Endpoint::Chat, Some(reader)) => {
                let parsed = reader.parse(&text, false);
                json!({
                    "index": 0,
                    "message": delta::message(&parsed, &self.call_prefix()),
                    "logprobs": logprobs,
                    "finish_reason": finish_reason(o, !parsed.calls.is_empty()),
                })
            }
            (Endpoint::Chat, None) => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": logprobs,
                "finish_reason": o.finish_reason,
            }),
            (Endpoint::Completion | Endpoint::LlamaCompletion, _) => json!({
                "index": 0,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": o.finish_reason,
            }),
        };
        let mut v = self.envelope(false, json!([choice]));
        v["usage"] = usage(o);
        v["timings"] = timings(o);
        v
    }

    /// One streamed chunk: `delta` text (chat: also the role in the first chunk) and the
    /// finish reason in the last.
    fn chunk(&self, text: Option<&str>, role: bool, finish: Option<&str>, lp: Value) -> Value {
        let choice = match self.endpoint {
            Endpoint::Chat => {
                let mut delta = json!({});
                if role {
                    delta["role"] = json!("assistant");
                }
                if let Some(t) = text {
                    delta["content"] = json!(t);
                }
                json!({"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish})
            }
            Endpoint::Completion | Endpoint::LlamaCompletion => json!({
                "index": 0,
                "text": text.unwrap_or(""),
                "logprobs": lp,
                "finish_reason": finish,
            }),
        };
        self.envelope(true, json!([choice]))
    }
}

/// `chunk` with `marks` (accepted drafts, `[start, end)` in characters of its text) as its
/// choice's `draft_accepted` when there are any.
fn marked(mut chunk: Value, marks: &[[usize; 2]]) -> Value {
    if !marks.is_empty() {
        chunk["choices"][0]["draft_accepted"] = json!(marks);
    }
    chunk
}

/// Collect a generation into one response (503 when cut by shutdown, 500 on failure).
pub async fn collect(meta: Meta, rx: UnboundedReceiver<Event>) -> Result<Response, ApiError> {
    Ok(axum::Json(collect_value(meta, rx).await?).into_response())
}

/// [`collect`]'s body.
pub async fn collect_value(
    meta: Meta,
    mut rx: UnboundedReceiver<Event>,
) -> Result<Value, ApiError> {
    let (mut text, mut entries) = (String::new(), Vec::new());
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Logprobs(e) => entries.extend(e),
            Event::Done(o) => return Ok(meta.whole(text, &entries, &o)),
            Event::Error(m) => return Err(ApiError::internal(m)),
            Event::Shutdown => return Err(shutting_down()),
        }
    }
    Err(ApiError::internal("the generation ended without a result"))
}

/// Where a stream is.
enum Stage {
    Start,
    Body,
    Usage(Box<Outcome>),
    Done,
    End,
}

/// `tool_calls` when the answer made calls and ended by itself.
fn finish_reason(o: &Outcome, calls: bool) -> &'static str {
    if calls && o.finish_reason == "stop" {
        "tool_calls"
    } else {
        o.finish_reason
    }
}

/// A stream's state between events.
struct Streaming {
    rx: UnboundedReceiver<Event>,
    meta: Meta,
    stage: Stage,
    /// Reads tool calls and reasoning out of the text (chat with a reader).
    reader: Option<Streamer>,
    /// Chunks ready to send before the next event is read.
    pending: std::collections::VecDeque<Value>,
    /// The answer so far with its accepted drafts, for the reader's content deltas.
    located: super::drafted::Located,
    /// Log-probability entries not sent yet (they go with the next chunk of text), and where
    /// the next legacy `text_offset` starts.
    lp: Vec<LpToken>,
    at: Offsets,
    /// The prompt's text with `echo`, until the first chunk carries it.
    echo: Option<String>,
}

impl Streaming {
    fn delta_chunk(&self, delta: Value, finish: Option<&str>, lp: Value) -> Value {
        self.meta.envelope(
            true,
            json!([{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}]),
        )
    }

    /// The `logprobs` of the next chunk: the entries waiting (`null` when none were asked).
    fn take_lp(&mut self) -> Value {
        let entries = std::mem::take(&mut self.lp);
        self.meta.logprobs(&entries, &mut self.at)
    }

    /// Chat delta chunks, the entries waiting going with the first; content gets its accepted
    /// drafts (`draft_accepted`).
    fn delta_chunks(&mut self, deltas: Vec<Value>, finish: Option<&str>) -> Vec<Value> {
        let mut out = Vec::with_capacity(deltas.len());
        for d in deltas {
            let lp = if out.is_empty() {
                self.take_lp()
            } else {
                Value::Null
            };
            let marks = match d.get("content").and_then(Value::as_str) {
                Some(c) => self.located.content(c),
                None => Vec::new(),
            };
            out.push(marked(self.delta_chunk(d, finish, lp), &marks));
        }
        out
    }

    /// A completion chunk of `t` (after the echoed prompt, in the first one), with `t`'s
    /// accepted drafts (`draft_accepted`, in characters of the chunk's text).
    fn text_chunk(&mut self, t: &Piece, finish: Option<&str>) -> Value {
        let (text, shift) = match self.echo.take() {
            Some(p) => (format!("{p}{}", t.text), p.chars().count()),
            None => (t.text.clone(), 0),
        };
        let lp = self.take_lp();
        let text = (!text.is_empty() || finish.is_none()).then_some(text);
        let marks: Vec<[usize; 2]> = t
            .drafted
            .iter()
            .map(|[a, b]| [a + shift, b + shift])
            .collect();
        marked(self.meta.chunk(text.as_deref(), false, finish, lp), &marks)
    }

    /// The next event of the stream (`None`: it ended).
    async fn next(&mut self) -> Option<Result<SseEvent, Infallible>> {
        loop {
            if let Some(v) = self.pending.pop_front() {
                return Some(data(&v));
            }
            let (ev, next) = match std::mem::replace(&mut self.stage, Stage::End) {
                Stage::Start if self.meta.endpoint == Endpoint::Chat => (
                    data(&self.meta.chunk(Some(""), true, None, Value::Null)),
                    Stage::Body,
                ),
                Stage::Start | Stage::Body => match self.rx.recv().await {
                    Some(Event::Logprobs(e)) => {
                        self.lp.extend(e);
                        self.stage = Stage::Body;
                        continue;
                    }
                    Some(Event::Text(t)) => match &mut self.reader {
                        Some(r) => {
                            let deltas = r.push(&t);
                            self.located.push(&t);
                            let chunks = self.delta_chunks(deltas, None);
                            self.pending.extend(chunks);
                            self.stage = Stage::Body;
                            continue;
                        }
                        None if self.meta.endpoint == Endpoint::Chat => {
                            let lp = self.take_lp();
                            let c = self.meta.chunk(Some(&t), false, None, lp);
                            (data(&marked(c, &t.drafted)), Stage::Body)
                        }
                        None => (data(&self.text_chunk(&t, None)), Stage::Body),
                    },
                    Some(Event::Done(o)) => {
                        let mut calls = false;
                        if let Some(r) = &mut self.reader {
                            let (deltas, parsed) = r.finish();
                            calls = !parsed.calls.is_empty();
                            let chunks = self.delta_chunks(deltas, None);
                            self.pending.extend(chunks);
                        }
                        let finish = Some(finish_reason(&o, calls));
                        let mut last = match self.meta.endpoint {
                            Endpoint::Chat => {
                                let lp = self.take_lp();
                                self.meta.chunk(None, false, finish, lp)
                            }
                            _ => self.text_chunk(&Piece::default(), finish),
                        };
                        last["timings"] = timings(&o);
                        self.pending.push_back(last);
                        self.stage = Stage::Usage(Box::new(o));
                        continue;
                    }
                    Some(Event::Error(m)) => (data(&ApiError::internal(m).body()), Stage::End),
                    Some(Event::Shutdown) => (data(&shutting_down().body()), Stage::End),
                    None => (
                        data(&ApiError::internal("the generation ended without a result").body()),
                        Stage::End,
                    ),
                },
                Stage::Usage(o) if self.meta.include_usage => {
                    let mut v = self.meta.envelope(true, json!([]));
                    v["usage"] = usage(&o);
                    (data(&v), Stage::Done)
                }
                Stage::Usage(_) | Stage::Done => {
                    (Ok(SseEvent::default().data("[DONE]")), Stage::End)
                }
                Stage::End => return None,
            };
            self.stage = next;
            return Some(ev);
        }
    }
}

pub fn data(v: &Value) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default().data(v.to_string()))
}

/// Server-sent `events`, with a `: keep-alive` comment after every `keep_alive` without an
/// event (while the request waits in the queue or between tokens), so proxies keep the stream.
pub fn sse<S>(events: S, keep_alive: Option<Duration>) -> Response
where
    S: futures_util::Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
{
    match keep_alive {
        Some(every) => Sse::new(events)
            .keep_alive(KeepAlive::new().interval(every).text("keep-alive"))
            .into_response(),
        None => Sse::new(events).into_response(),
    }
}

/// Stream a generation as server-sent events.
pub fn stream(meta: Meta, rx: UnboundedReceiver<Event>, keep_alive: Option<Duration>) -> Response {
    let reader = match (meta.endpoint, &meta.reader) {
        (Endpoint::Chat, Some(r)) => Some(Streamer::new(r.clone(), meta.call_prefix())),
        _ => None,
    };
    let echo = meta.echo.clone();
    let start = Streaming {
        rx,
        meta,
        stage: Stage::Start,
        reader,
        pending: Default::default(),
        located: Default::default(),
        lp: Vec::new(),
        at: Offsets::default(),
        echo,
    };
    let events = futures_util::stream::unfold(start, |mut st| async move {
        let ev = st.next().await?;
        Some((ev, st))
    });
    sse(events, keep_alive)
}

pub fn shutting_down() -> ApiError {
    ApiError::unavailable("the server is shutting down")
}
