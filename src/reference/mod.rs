//! The CPU oracle: every GPU kernel in plain, readable Rust, shapes in comments. GPU kernels are
//! tested against it; it is tested against llama.cpp and a float reference on the real model.
//! Written for reading, not speed (but compiled optimized: tests run with `--release`).
//!
//! - [`matmul`]: dequantized matrix × vector / matrix, embedding rows.
//! - [`ops`]: RMSNorm, RoPE, SwiGLU/GeGLU, add, scale, softmax, argmax, top-k.
//! - [`attention`]: attention over a KV cache (f16, q8_0, q4_0), causal or explicit mask.

pub mod attention;
pub mod dspark;
pub mod forward;
pub mod matmul;
pub mod ops;
