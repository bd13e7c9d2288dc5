//! The streamed answer of `/v1/messages`: Anthropic's named server-sent events, in order
//! `message_start` (the message with no content, its input tokens), `content_block_start` (one
//! text block), `ping`, a `content_block_delta` (`text_delta`) per piece of text,
//! `content_block_stop`, `message_delta` (stop reason, stop sequence, output tokens) and
//! `message_stop`; a failure ends the stream with an `error` event in Anthropic's error shape.
//! Reference: <https://docs.anthropic.com/en/docs/build-with-claude/streaming>.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::anthropic::{stop_reason, AnthropicError, MessageMeta};
use super::error::ApiError;
use super::slots::Event;

fn named(name: &str, v: &Value) -> SseEvent {
    SseEvent::default().event(name).data(v.to_string())
}

fn error_event(e: ApiError) -> SseEvent {
    named("error", &AnthropicError(e).body())
}

/// Where the stream is: events to send, then more from the generation unless it ended.
struct St {
    rx: UnboundedReceiver<Event>,
    queue: VecDeque<SseEvent>,
    ended: bool,
}

/// Stream a generation as Anthropic's message events.
pub fn stream(meta: MessageMeta, rx: UnboundedReceiver<Event>) -> Response {
    let mut queue = VecDeque::new();
    queue.push_back(named(
        "message_start",
        &json!({"type": "message_start", "message": meta.message(None, None)}),
    ));
    queue.push_back(named(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
    ));
    queue.push_back(named("ping", &json!({"type": "ping"})));
    let st = St {
        rx,
        queue,
        ended: false,
    };
    let events = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.queue.pop_front() {
                return Some((Ok::<_, Infallible>(ev), st));
            }
            if st.ended {
                return None;
            }
            let next = st.rx.recv().await;
            st.ended = !matches!(next, Some(Event::Text(_) | Event::Logprobs(_)));
            match next {
                Some(Event::Text(t)) if t.is_empty() => {}
                // Anthropic's API has no log-probabilities (the request cannot ask for them).
                Some(Event::Logprobs(_)) => {}
                Some(Event::Text(t)) => st.queue.push_back(named(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": 0,
                            "delta": {"type": "text_delta", "text": t.text}}),
                )),
                Some(Event::Done(o)) => {
                    let (reason, seq) = stop_reason(&o);
                    st.queue.extend([
                        named(
                            "content_block_stop",
                            &json!({"type": "content_block_stop", "index": 0}),
                        ),
                        named(
                            "message_delta",
                            &json!({"type": "message_delta",
                                    "delta": {"stop_reason": reason, "stop_sequence": seq},
                                    "usage": {"output_tokens": o.completion_tokens}}),
                        ),
                        named("message_stop", &json!({"type": "message_stop"})),
                    ]);
                }
                Some(Event::Error(m)) => st.queue.push_back(error_event(ApiError::internal(m))),
                Some(Event::Shutdown) => st.queue.push_back(error_event(ApiError::unavailable(
                    "the server is shutting down",
                ))),
                None => st.queue.push_back(error_event(ApiError::internal(
                    "the generation ended without a result",
                ))),
            }
        }
    });
    Sse::new(events).into_response()
}
