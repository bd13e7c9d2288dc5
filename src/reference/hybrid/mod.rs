//! The whole forward pass of `qwen35` (Qwen3.5: Gated DeltaNet layers with a recurrent state,
//! gated full attention every few layers), as plain straight-line Rust: the oracle the GPU
//! hybrid forward is tested against. llama.cpp `src/models/qwen35.cpp` and
//! `delta-net-base.cpp`, HF transformers `qwen3_5`.
//!
//! Per layer `il` (the mixer is [`deltanet`] or [`attn`], as [`RefHybrid::kinds`] says):
//! ```text
//! cur = rms_norm(x) · attn_norm                                    attn_norm-il
//! h   = x + Mixer(cur)                                             attn_out-il, ffn_inp-il
//! cur = rms_norm(h) · post_attention_norm                          ffn_norm-il
//! x   = h + (silu(cur·W_gateᵀ) ⊙ cur·W_upᵀ)·W_downᵀ                  ffn_out-il, l_out-il
//! ```
//! then `output_norm` and the LM head (`output`, else `token_embd`) on the requested rows.
//! Numerics as the dense oracle ([`crate::reference::forward`]): f32 weights dequantized once,
//! f32 activations, every dot product summed in f64 and rounded once, attention in f64. The
//! DeltaNet runs its tokens strictly in order, so a token gives the same bits in a batch as
//! alone after the same tokens.
//!
//! [`RefHybridModel::forward`] continues a [`RefHybridState`] (KV cache plus recurrent state):
//! it runs at `start_pos == state.len()` only; rolling back is [`RefHybridState::restore`] of a
//! [`RefHybridState::snapshot`]. Captures ([`Capture`]) work as in the dense forward: logits
//! rows, DSpark taps (the residual entering layer `i`, `n_layer` = before the final norm) and
//! named activations, all `[T, …]` f32: per layer `attn_norm`, then the mixer's own (DeltaNet:
//! `beta`, `g` `[T, n_v]`, `conv_out` `[T, conv_dim]`, `delta_out` `[T, n_v, head_v]`,
//! `final_output` `[T, value_dim]`; attention: `q`, `k`, `v`, `kqv_out`, `attn_gated`), then
//! `attn_out` (the mixer's output, `[T, n_embd]`), `ffn_inp`, `ffn_norm`, `ffn_out`, `l_out`
//! (each `-il`); then `result_norm` and `logits` of the requested rows.
//!
//! A GPU test holds its forward to it as to the dense oracle:
//! ```text
//! let oracle = RefHybridModel::load(&file)?;
//! let mut state = oracle.new_state(GgmlType::F16)?;         // KV type of the GPU cache
//! let logits = oracle.forward_last(&mut state, &prompt, 0)?; // then (&[tok], pos) per step
//! let snap = state.snapshot();  …  state.restore(&snap)?;   // rollback of rejected drafts
//! ```

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod attn;
pub mod deltanet;
mod pass;
mod state;
mod weights;

pub use state::{DeltaNetState, RefHybridSnapshot, RefHybridState};
pub use weights::{DeltaNetWeights, GatedAttnWeights, HybridLayer, HybridWeights, Mixer};

use crate::gguf::{GgmlType, Gguf, GgufFile};
use crate::reference::forward::{Capture, ForwardError, RefKvCache};
use crate::reference::meta::{RefHparams, RefHybrid};
use crate::reference::ops::RopeRef;

pub(crate) use crate::reference::forward::steps::Recorder;

/// A `qwen35` model ready to run on the CPU: hyperparameters and f32 weights.
#[derive(Debug, Clone)]
pub struct RefHybridModel {
    /// The backbone (`n_layer`: the main-pass layers, MTP blocks excluded).
    pub hp: RefHparams,
    /// Layer kinds and the DeltaNet shape.
    pub hy: RefHybrid,
    pub weights: HybridWeights,
    /// NEOX RoPE on the first `n_rot` dims of each head (YaRN from `hp.rope_yarn`, if any).
    pub rope: RopeRef,
}

impl RefHybridModel {
    /// Read the hyperparameters and dequantize every weight of a mapped GGUF file.
    pub fn load(file: &GgufFile) -> Result<RefHybridModel, ForwardError> {
        RefHybridModel::from_gguf(&file.gguf, file.bytes())
    }

    /// As [`Self::load`], from a parsed file `g` and the bytes it was parsed from.
    pub fn from_gguf(g: &Gguf, bytes: &[u8]) -> Result<RefHybridModel, ForwardError> {
        let hp = RefHparams::from_gguf(g)?;
        if !hp.arch.is_hybrid() {
            return Err(ForwardError::Unsupported {
                what: "architecture for the hybrid reference forward (qwen35, qwen35moe)",
                value: hp.arch.name().to_string(),
            });
        }
        let hy = RefHybrid::from_gguf(g, &hp)?;
        if hp.head_dim_v != hp.head_dim || hp.n_rot % 2 != 0 {
            return Err(ForwardError::Unsupported {
                what: "head shape",
                value: format!(
                    "head_dim {} head_dim_v {} n_rot {}",
                    hp.head_dim, hp.head_dim_v, hp.n_rot
                ),
            });
        }
        let weights = HybridWeights::load(g, bytes, &hp, &hy)?;
        let rope = RopeRef {
            n_rot: hp.n_rot as usize,
            neox: true,
            freq_base: hp.rope_base,
            freq_scale: hp.rope_freq_scale,
        };
        Ok(RefHybridModel {
            hp,
            hy,
            weights,
            rope,
        })
    }

    /// An empty state (position 0): zero conv and delta-rule states, and a KV cache of
    /// `kv_type` (F32 exact, F16, Q8_0 or Q4_0) for the attention layers.
    pub fn new_state(&self, kv_type: GgmlType) -> Result<RefHybridState, ForwardError> {
        let kv = RefKvCache::new(
            self.hp.n_layer as usize,
            self.hp.k_dim() as usize,
            self.hp.v_dim() as usize,
            kv_type,
        )?;
        Ok(RefHybridState::new(&self.hy, kv))
    }

    /// Logits `[n_vocab]` of the last of `tokens`, continuing `state` (which must hold
    /// `start_pos` positions).
    pub fn forward_last(
        &self,
        state: &mut RefHybridState,
        tokens: &[u32],
        start_pos: usize,
    ) -> Result<Vec<f32>, ForwardError> {
        Ok(self
            .forward(state, tokens, start_pos, &Capture::default())?
            .logits)
    }
}
