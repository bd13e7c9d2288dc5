//! The CPU oracle: every GPU kernel in plain, readable Rust, shapes in comments. GPU kernels are
//! tested against it; it is tested against llama.cpp and a float reference on the real model.
//! Written for reading, not speed (but compiled optimized: tests run with `--release`).
//!
//! - [`matmul`]: dequantized matrix × vector / matrix, embedding rows.
//! - [`ops`]: RMSNorm, RoPE, SwiGLU/GeGLU, add, scale, softmax, argmax, top-k.
//! - [`attention`]: attention over a KV cache (f16, q8_0, q4_0), causal or explicit mask.
//! - [`meta`]: hyperparameters and drafter metadata, read from the GGUF by the oracle itself.
//! - [`forward`], [`dspark`]: the whole forward pass of a model and of a DSpark drafter.
//! - [`hybrid`]: the whole forward pass of a `qwen35` hybrid (Gated DeltaNet and gated
//!   attention), with its recurrent state.
//! - [`gemma3`]: the whole forward pass of Gemma 3 (sliding-window and global layers).
//! - [`gemma4`]: the whole forward pass of Gemma 4 (per-layer embeddings, shared-KV layers,
//!   experts).
//!
//! The oracle shares no code with the GPU path beyond the GGUF container parser and the
//! dequantizers (`crate::gguf`, `crate::quant`); `tests/reference_independent.rs` holds it to that.

pub mod attention;
pub mod dspark;
pub mod forward;
pub mod gemma3;
pub mod gemma4;
pub mod hybrid;
pub mod matmul;
pub mod meta;
pub mod ops;
