//! Response bodies in OpenAI's shapes: whole completions, SSE chunks (`data: {json}` events
//! ending with `data: [DONE]`), `usage`, and llama.cpp's `timings` object with the speculative
//! counters. Streams end with an `error` event when the generation fails or the server stops.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::error::ApiError;
use super::request::Endpoint;
use super::slots::{Event, Outcome};

/// What every body of one response repeats.
#[derive(Debug, Clone)]
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub endpoint: Endpoint,
    pub include_usage: bool,
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

    /// A whole (non-streamed) completion.
    pub fn whole(&self, text: String, o: &Outcome) -> Value {
        let choice = match self.endpoint {
            Endpoint::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": o.finish_reason,
            }),
            Endpoint::Completion | Endpoint::LlamaCompletion => json!({
                "index": 0,
                "text": text,
                "logprobs": null,
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
    fn chunk(&self, text: Option<&str>, role: bool, finish: Option<&str>) -> Value {
        let choice = match self.endpoint {
            Endpoint::Chat => {
                let mut delta = json!({});
                if role {
                    delta["role"] = json!("assistant");
                }
                if let Some(t) = text {
                    delta["content"] = json!(t);
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Endpoint::Completion | Endpoint::LlamaCompletion => json!({
                "index": 0,
                "text": text.unwrap_or(""),
                "logprobs": null,
                "finish_reason": finish,
            }),
        };
        self.envelope(true, json!([choice]))
    }
}

/// Collect a generation into one response (503 when cut by shutdown, 500 on failure).
pub async fn collect(meta: Meta, mut rx: UnboundedReceiver<Event>) -> Result<Response, ApiError> {
    let mut text = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Done(o) => return Ok(axum::Json(meta.whole(text, &o)).into_response()),
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
    let start = (rx, meta, Stage::Start);
    let events = futures_util::stream::unfold(start, |(mut rx, meta, stage)| async move {
        let (ev, next) = match stage {
            Stage::Start if meta.endpoint == Endpoint::Chat => {
                (data(&meta.chunk(Some(""), true, None)), Stage::Body)
            }
            Stage::Start | Stage::Body => match rx.recv().await {
                Some(Event::Text(t)) => (data(&meta.chunk(Some(&t), false, None)), Stage::Body),
                Some(Event::Done(o)) => {
                    let mut last = meta.chunk(None, false, Some(o.finish_reason));
                    last["timings"] = timings(&o);
                    (data(&last), Stage::Usage(Box::new(o)))
                }
                Some(Event::Error(m)) => (data(&ApiError::internal(m).body()), Stage::End),
                Some(Event::Shutdown) => (data(&shutting_down().body()), Stage::End),
                None => (
                    data(&ApiError::internal("the generation ended without a result").body()),
                    Stage::End,
                ),
            },
            Stage::Usage(o) if meta.include_usage => {
                let mut v = meta.envelope(true, json!([]));
                v["usage"] = usage(&o);
                (data(&v), Stage::Done)
            }
            Stage::Usage(_) | Stage::Done => (Ok(SseEvent::default().data("[DONE]")), Stage::End),
            Stage::End => return None,
        };
        Some((ev, (rx, meta, next)))
    });
    sse(events, keep_alive)
}

pub fn shutting_down() -> ApiError {
    ApiError::unavailable("the server is shutting down")
}
