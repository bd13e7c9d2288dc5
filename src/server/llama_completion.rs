//! llama-server's `/completion` response shapes (tools/server/README.md, "POST /completion"):
//! one JSON object `{"content", "stop": true, "tokens_predicted", "tokens_evaluated",
//! "stop_type", "stopping_word", "timings", …}`, or, streamed, server-sent events
//! `data: {"content": piece, "stop": false, …}` and a last event with `"stop": true`, empty
//! `content` and the counters. There is no `data: [DONE]` on this route. A failure ends the
//! stream with `data: {"error": …}` instead of the last event (no answer is 200 with work it did
//! not do).

use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::error::ApiError;
use super::logprobs::LpToken;
use super::response::{data, shutting_down, sse, timings};
use super::slots::{Event, Outcome};

/// What every event of one response repeats.
#[derive(Debug, Clone)]
pub struct LlamaMeta {
    pub model: String,
    /// Prompt tokens (`tokens_evaluated`).
    pub prompt_tokens: usize,
    /// The slot's context (`timings.n_ctx`, and whether the generation was `truncated`).
    pub n_ctx: u32,
    /// `n_probs` > 0: `Some(post_sampling_probs)`.
    pub probs: Option<bool>,
}

/// llama-server's `stop_type`: `eos`, `word` or `limit`.
fn stop_type(o: &Outcome) -> &'static str {
    match (o.finish_reason, &o.stop_word) {
        (_, Some(_)) => "word",
        ("stop", None) => "eos",
        _ => "limit",
    }
}

impl LlamaMeta {
    /// Adds `completion_probabilities` of `entries` when asked for.
    fn with_probs(&self, mut v: Value, entries: &[LpToken]) -> Value {
        if let Some(post) = self.probs {
            v["completion_probabilities"] = super::logprobs::llama(entries, post);
        }
        v
    }

    /// A partial event: one piece of text.
    fn partial(&self, content: &str, predicted: usize) -> Value {
        json!({
            "index": 0,
            "content": content,
            "tokens": [],
            "stop": false,
            "id_slot": -1,
            "tokens_predicted": predicted,
            "tokens_evaluated": self.prompt_tokens,
        })
    }

    /// The final object (`content` empty when streamed: the text went in the partial events).
    fn last(&self, content: &str, o: &Outcome) -> Value {
        let mut t = timings(o);
        t["n_ctx"] = json!(self.n_ctx);
        t["n_past"] = json!(o.prompt_tokens + o.completion_tokens);
        json!({
            "index": 0,
            "content": content,
            "tokens": [],
            "id_slot": -1,
            "stop": true,
            "model": self.model,
            "tokens_predicted": o.completion_tokens,
            "tokens_evaluated": o.prompt_tokens,
            "has_new_line": content.contains('\n'),
            "truncated": o.prompt_tokens + o.completion_tokens >= self.n_ctx as usize,
            "stop_type": stop_type(o),
            "stopping_word": o.stop_word.as_deref().unwrap_or(""),
            "tokens_cached": o.cached_tokens,
            "timings": t,
        })
    }
}

/// Collects a generation into llama-server's one object (503 when cut by shutdown, 500 on
/// failure).
pub async fn collect(
    meta: LlamaMeta,
    mut rx: UnboundedReceiver<Event>,
) -> Result<Response, ApiError> {
    let (mut text, mut entries) = (String::new(), Vec::new());
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Logprobs(e) => entries.extend(e),
            Event::Done(o) => {
                let v = meta.with_probs(meta.last(&text, &o), &entries);
                return Ok(axum::Json(v).into_response());
            }
            Event::Error(m) => return Err(ApiError::internal(m)),
            Event::Shutdown => return Err(shutting_down()),
        }
    }
    Err(ApiError::internal("the generation ended without a result"))
}

/// Streams a generation as llama-server's events.
pub fn stream(
    meta: LlamaMeta,
    rx: UnboundedReceiver<Event>,
    keep_alive: Option<std::time::Duration>,
) -> Response {
    // (receiver, meta, pieces sent so far, log-probability entries not sent yet, ended)
    let start = (rx, meta, 0usize, Vec::new(), false);
    let events =
        futures_util::stream::unfold(start, |(mut rx, meta, n, mut lp, ended)| async move {
            if ended {
                return None;
            }
            let mut next = rx.recv().await;
            while let Some(Event::Logprobs(e)) = next {
                lp.extend(e);
                next = rx.recv().await;
            }
            let entries: Vec<LpToken> = std::mem::take(&mut lp);
            let (ev, n, ended) = match next {
                Some(Event::Text(t)) => {
                    let v = meta.with_probs(meta.partial(&t, n + 1), &entries);
                    (data(&v), n + 1, false)
                }
                Some(Event::Done(o)) => {
                    (data(&meta.with_probs(meta.last("", &o), &entries)), n, true)
                }
                Some(Event::Logprobs(_)) => return None,
                Some(Event::Error(m)) => (data(&ApiError::internal(m).body()), n, true),
                Some(Event::Shutdown) => (data(&shutting_down().body()), n, true),
                None => (
                    data(&ApiError::internal("the generation ended without a result").body()),
                    n,
                    true,
                ),
            };
            Some((ev, (rx, meta, n, lp, ended)))
        });
    sse(events, keep_alive)
}
