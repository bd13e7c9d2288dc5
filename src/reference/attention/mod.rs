//! CPU oracle for the KV cache and the GPU attention kernels.
//!
//! - [`kv_quant`]: quantize-on-store with llama.cpp's reference rules: f16 (round to nearest
//!   even), q8_0 and q4_0 (`quantize_row_*_ref`), producing ggml blocks that
//!   `crate::quant::dequantize` reads back.
//! - [`attend`]: softmax attention in f64 over dequantized cache rows, grouped-query heads,
//!   no mask / causal / explicit additive mask.
//!
//! Tests build the expected cache with [`kv_quant`], dequantize it, and compare the GPU
//! attention with [`attend::attention`] over those exact values.

pub mod attend;
pub mod kv_quant;

pub use attend::{attention, AttnDims, Mask};
pub use kv_quant::{
    quantize_block_q4_0, quantize_block_q8_0, quantize_row_f16, quantize_row_q4_0,
    quantize_row_q8_0, round_f16,
};
