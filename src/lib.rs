//! flint: a portable LLM inference runtime that runs GGUF models through wgpu (Vulkan first) with
//! WGSL compute shaders, and speeds decoding up with DSpark speculative decoding.
//!
//! Modules, in dependency order (a module never imports one below it in this list):
//! - [`gguf`]: the hardened GGUF reader and writer, metadata values, tensor infos, ggml types.
//! - [`quant`]: CPU block formats: dequantization to f32, the reference for every GPU kernel.
//! - [`gpu`]: adapter and device selection, error capture, shader registry, pipeline cache.
//! - [`kernels`]: the Rust side of each WGSL kernel family.
//! - [`reference`]: the CPU oracle: every kernel in plain, readable Rust (tests and debugging).
//!
//! See `docs/ARCHITECTURE.md` for the plan and the decisions behind it.

pub mod bench;
pub mod cli;
pub mod engine;
pub mod error;
pub mod gguf;
pub mod gpu;
pub mod grammar;
pub mod kernels;
pub mod kv_cache;
pub mod logging;
pub mod memory;
pub mod model;
pub mod quant;
pub mod reference;
pub mod sampling;
pub mod server;
pub mod speculative;
pub mod store;
pub mod tokenizer;

pub use error::{Error, Result};
