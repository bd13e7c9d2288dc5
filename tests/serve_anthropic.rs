//! `POST /v1/messages` and `/v1/messages/count_tokens` of `flint serve` (Anthropic's Messages
//! API), held to the official `anthropic` Python client (tests/serve/anthropic_client.py): text,
//! system prompts, stop sequences, `max_tokens`, streaming (Anthropic's named SSE events)
//! assembled to the non-streamed text, the same greedy text as `/v1/chat/completions` (the
//! `openai` client), token counting, and refusals of tool use, images and thinking in
//! Anthropic's error shape.

use crate::harness;

use std::time::Duration;

use harness::{script, serial, Server};

#[test]
fn the_anthropic_client_reads_messages_and_their_stream() {
    let _g = serial();
    let s = Server::start(&[]);
    let r = script(
        "anthropic_client.py",
        &["--base-url", &s.url()],
        Duration::from_secs(240),
    );
    s.stop();
    for what in ["tools", "image", "thinking"] {
        assert_eq!(r["refused"][what], 400, "{what}: {r}");
    }
    assert!(r["input_tokens"].as_u64().unwrap_or(0) > 0, "{r}");
}
