//! The whole forward pass of `gemma4` (Gemma 4: E2B/E4B with per-layer embeddings and shared-KV
//! layers, 26B-A4B with experts, 31B) as plain straight-line Rust, read from the GGUF by the
//! oracle itself. Written from llama.cpp b11434's graph (`src/models/gemma4.cpp`,
//! `build_moe_ffn` in `src/llama-graph.cpp`, hparams in `src/llama-model.cpp` and
//! `src/llama-hparams.{h,cpp}`; <https://github.com/ggml-org/llama.cpp/blob/b11434/src/models/gemma4.cpp>).
//!
//! Per layer `il` (sliding iff `attention.sliding_window_pattern[il]`; `h` its head size:
//! `key_length_swa` sliding, `key_length` global; `n_kv = n_layer − shared_kv_layers`):
//! ```text
//! x    = token_embd[tok] · √d                                          (before layer 0)
//! pl   = (rms_norm(x·Wmpᵀ/√d per layer)·proj_norm + ple_embd[tok]·√P) / √2     (P > 0)
//! cur  = rms_norm(x) · attn_norm
//! q    = rope(rms_norm_per_head(cur·Wqᵀ) · q_norm)
//! il < n_kv: k = rope(rms_norm_per_head(cur·Wkᵀ) · k_norm); v = rms_norm_per_head(cur·Wvᵀ)
//!            (cur·Wkᵀ where attn_v is absent), appended to layer il's cache
//! il ≥ n_kv: attend over layer n_kv − 2's (sliding) or n_kv − 1's (global) cache
//! rope: NEOX; sliding base rope.freq_base_swa (10000), n_rot rope.dimension_count_swa;
//!       global base rope.freq_base, n_rot rope.dimension_count, frequencies / rope_freqs
//! o    = softmax(q·Kᵀ + mask) · V          scale 1; sliding: keys with pos_q − pos_k ≥ window hidden
//! h    = x + rms_norm(o·Woᵀ) · post_attention_norm
//! f    = (gelu(u·Wgᵀ) ⊙ u·Wuᵀ)·Wdᵀ,   u = rms_norm(h) · ffn_norm
//! MoE  : f = rms_norm(f)·post_ffw_norm_1 + rms_norm(moe(rms_norm(h)·pre_ffw_norm_2))·post_ffw_norm_2
//! x    = h + rms_norm(f) · post_ffw_norm
//! P > 0: x += rms_norm((gelu(x·Wigᵀ) ⊙ pl[il])·Wprojᵀ) · post_norm
//! x   *= layer_output_scale                                               (where present)
//! ```
//! then `output_norm`, the LM head (`output`, else `token_embd`) and `cap · tanh(logits / cap)`
//! (`final_logit_softcapping`, default 30). Numerics as the dense oracle: f32 weights, f64 sums
//! rounded once, attention in f64, GELU in f32 from the tanh formula (llama.cpp's CPU backend
//! reads it from an f16 table, ~1e-3 per activation apart).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod load;
mod moe;
mod pass;

pub use load::{Gemma4Layer, Gemma4Ref, RefGemma4Model};
pub use moe::Gemma4Experts;

use crate::reference::forward::ForwardError;

/// The K/V rows of every layer that keeps its own (f32, exact): layer il's rows
/// `[len, n_head_kv(il), head_dim(il)]`; shared layers hold none.
#[derive(Debug, Clone, Default)]
pub struct Gemma4Cache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// K/V row width of each layer (0 for shared layers).
    width: Vec<usize>,
    len: usize,
}

impl Gemma4Cache {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops every position from `pos` on.
    fn truncate_to(&mut self, pos: usize) -> Result<(), ForwardError> {
        if pos > self.len {
            return Err(ForwardError::Position {
                start_pos: pos,
                cache_len: self.len,
            });
        }
        for ((k, v), &w) in self.k.iter_mut().zip(&mut self.v).zip(&self.width) {
            k.truncate(pos * w);
            v.truncate(pos * w);
        }
        self.len = pos;
        Ok(())
    }

    /// Elements of K (= of V) that layer `il` holds: `len · width`.
    fn layer(&self, il: usize) -> (&[f32], &[f32]) {
        (&self.k[il], &self.v[il])
    }
}
