//! Tests of WGSL kernels against the CPU oracle and gguf-py: matmul, attention, ops, dequantization, shader checks.
//!
//! One binary per area: every test binary links the whole crate, so a binary per file made
//! the test build ten times larger (and slower to link) than one per area.

mod common;
#[path = "kernels_matmul_data.rs"]
mod data;

mod gpu_check;
mod gpu_dequant;
mod kernels_attention;
mod kernels_attention_fused;
mod kernels_attention_invariance;
mod kernels_attention_row0;
mod kernels_kv_shift;
mod kernels_matmul;
mod kernels_matmul_controls;
mod kernels_matmul_invariance;
mod kernels_matmul_rope;
mod kernels_matmul_split;
mod kernels_ops;
mod kernels_ops_logprob;
mod kernels_ops_rope_kv;
mod kernels_ops_select;
mod kernels_quant_vectors;
mod quant_vectors;
mod shaders;
mod shaders_doc;
