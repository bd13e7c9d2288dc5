//! Tests of `flint serve` end to end: OpenAI, llama-server and Anthropic routes, limits, faults, tools.
//!
//! One binary per area: every test binary links the whole crate, so a binary per file made
//! the test build ten times larger (and slower to link) than one per area.
#[path = "serve/client.rs"]
#[allow(dead_code)]
mod client;
mod common;
#[path = "serve/harness.rs"]
#[allow(dead_code)]
mod harness;

mod control_tokens;
mod serve;
mod serve_anthropic;
mod serve_batch;
mod serve_clients;
mod serve_embeddings;
mod serve_fault;
mod serve_fit;
mod serve_harden;
mod serve_hybrid;
mod serve_limits;
mod serve_llama;
mod serve_logprobs;
mod serve_logs;
mod serve_shutdown;
mod serve_tools;
mod serve_webui;
mod store_hub;
