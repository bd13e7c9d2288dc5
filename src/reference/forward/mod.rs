//! The whole forward pass of `llama` (SmolLM2, Llama 3.x with `rope_freqs.weight`), `qwen2`
//! (q/k/v biases) and `qwen3` (per-head q/k RMSNorm), tied or separate LM head, as plain
//! straight-line Rust: the oracle GPU forward passes are tested against (design principle 4).
//!
//! What it computes: weights dequantized exactly to f32 once at load ([`crate::quant`],
//! bit-exact with llama.cpp), f32 activations, matrix products accumulated in f64 and rounded
//! once per output ([`linear`]), RMSNorm / RoPE (YaRN included: llama.cpp's `rope_yarn`) /
//! SwiGLU from [`crate::reference::ops`],
//! attention in f64 from [`crate::reference::attention`] over a KV cache held in f32 or rounded
//! to f16 / q8_0 / q4_0 with the reference quantizers ([`RefKvCache`]). This is the "float
//! reference" of `tests/data/fixtures` (numpy, f32 everywhere), computed more exactly.
//!
//! [`RefModel::forward`] takes any number of tokens at `start_pos` (a prefill, one decode
//! step, or a verify batch), appends their K/V rows to the cache (dropping rows from
//! `start_pos` on first: rollback), and returns the logits of the requested rows. Optionally it
//! captures the named activations of every layer (llama.cpp's callback names, see
//! [`Capture::named`]) and the taps DSpark needs: the residual stream entering layer `i`.
//!
//! Row results do not depend on the batch: a row computed in a prefill of N tokens equals, to
//! the bit, the same row computed alone after N-1 cached tokens (fixed reduction orders).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod cache;
mod linear;
pub mod moe;
mod pass;
pub(crate) mod steps;
#[cfg(test)]
mod tests;
mod weights;

pub(crate) use cache::store as store_kv_rows;
pub use cache::RefKvCache;
pub use linear::{linear, max_threads};
pub(crate) use weights::Tensors;
pub use weights::{LayerWeights, Weights};

use crate::gguf::{Gguf, GgufError, GgufFile};
use crate::quant::QuantError;
use crate::reference::matmul::MatmulRefError;
use crate::reference::meta::{MetaError, RefHparams};
use crate::reference::ops::RopeRef;

/// Errors of the reference forward pass: a model it cannot run, or a bad request.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Hparams(#[from] MetaError),
    #[error(transparent)]
    Matmul(#[from] MatmulRefError),
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error("tensor '{name}' is missing")]
    MissingTensor { name: String },
    #[error("tensor '{name}' has shape {found:?}, expected {expected:?}")]
    Shape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("unsupported {what}: {value}")]
    Unsupported { what: &'static str, value: String },
    #[error("token id {id} is not below the vocabulary size {n_vocab}")]
    TokenOutOfRange { id: u32, n_vocab: usize },
    #[error("start position {start_pos} is past the {cache_len} positions the cache holds")]
    Position { start_pos: usize, cache_len: usize },
    #[error(
        "a forward at position {start_pos} of a recurrent state that holds {state_len} \
         positions: it continues the state, or restores a snapshot first to roll back"
    )]
    RecurrentPosition { start_pos: usize, state_len: usize },
    #[error("an empty batch: forward needs at least one token")]
    EmptyBatch,
    #[error("logits row {row} asked of a batch of {n_tokens} tokens")]
    RowOutOfRange { row: usize, n_tokens: usize },
    #[error(
        "tap at layer {layer} asked; layers are 0..={n_layer} ({n_layer} = before the final norm)"
    )]
    TapOutOfRange { layer: usize, n_layer: usize },
}

/// Which rows of the batch get logits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Rows {
    /// The last token only (a prefill, a decode step).
    #[default]
    Last,
    /// Every token (a verify batch).
    All,
    /// These rows, in this order.
    List(Vec<usize>),
    /// No logits (only taps / activations).
    None,
}

/// What [`RefModel::forward`] returns besides the logits.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// Rows of the batch that get logits.
    pub rows: Rows,
    /// Layers `i` in `0..=n_layer` whose input residual stream to return (`n_layer`: the
    /// output of the last layer, before the final norm).
    pub taps: Vec<usize>,
    /// Capture the named activations, per layer `il` (all `[n_tokens, …]` f32):
    /// `attn_norm-{il}` `[T, n_embd]`; `q-{il}` `[T, n_head, head_dim]` and `k-{il}`
    /// `[T, n_head_kv, head_dim]` after biases, q/k norms and RoPE (k as computed, before any
    /// cache rounding); `v-{il}` `[T, n_head_kv, head_dim_v]`; `kqv_out-{il}`
    /// `[T, n_head·head_dim_v]` (attention before the output projection); `attn_out-{il}`
    /// `[T, n_embd]` (after it); `ffn_inp-{il}` (residual after attention); `ffn_norm-{il}`;
    /// `ffn_out-{il}` (after the down projection); `l_out-{il}` (the layer's output); then
    /// `result_norm` `[R, n_embd]` and `logits` `[R, n_vocab]` for the R requested rows.
    pub named: bool,
}

/// One captured tensor, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// The result of one forward call.
#[derive(Debug, Clone, Default)]
pub struct ForwardOutput {
    /// The batch rows that got logits, in the order of [`Self::logits`].
    pub rows: Vec<usize>,
    /// `[rows.len(), n_vocab]`
    pub logits: Vec<f32>,
    /// `(layer, [n_tokens, n_embd])` for each requested tap, in request order.
    pub taps: Vec<(usize, Vec<f32>)>,
    /// Named activations in computation order (empty unless asked).
    pub named: Vec<Named>,
}

impl ForwardOutput {
    /// The captured activation `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Named> {
        self.named.iter().find(|n| n.name == name)
    }
}

/// A model ready to run on the CPU: hyperparameters and f32 weights.
#[derive(Debug, Clone)]
pub struct RefModel {
    pub hp: RefHparams,
    pub weights: Weights,
    /// RoPE as the metadata says (normal pairs for llama, NEOX for qwen2/qwen3); YaRN from
    /// `hp.rope_yarn`.
    pub rope: RopeRef,
}

impl RefModel {
    /// Read the hyperparameters and dequantize every weight of a mapped GGUF file.
    pub fn load(file: &GgufFile) -> Result<RefModel, ForwardError> {
        RefModel::from_gguf(&file.gguf, file.bytes())
    }

    /// As [`Self::load`], from a parsed file `g` and the bytes it was parsed from.
    pub fn from_gguf(g: &Gguf, bytes: &[u8]) -> Result<RefModel, ForwardError> {
        let hp = RefHparams::from_gguf(g)?;
        if hp.head_dim_v != hp.head_dim || hp.n_rot % 2 != 0 {
            return Err(ForwardError::Unsupported {
                what: "head shape",
                value: format!(
                    "head_dim {} head_dim_v {} n_rot {}",
                    hp.head_dim, hp.head_dim_v, hp.n_rot
                ),
            });
        }
        let weights = Weights::load(g, bytes, &hp)?;
        let rope = RopeRef {
            n_rot: hp.n_rot as usize,
            neox: hp.rope_neox,
            freq_base: hp.rope_base,
            freq_scale: hp.rope_freq_scale,
        };
        Ok(RefModel { hp, weights, rope })
    }

    /// An empty KV cache for this model: `kv_type` F32 (exact), F16, Q8_0 or Q4_0.
    pub fn new_cache(&self, kv_type: crate::gguf::GgmlType) -> Result<RefKvCache, ForwardError> {
        RefKvCache::new(
            self.hp.n_layer as usize,
            self.hp.k_dim() as usize,
            self.hp.v_dim() as usize,
            kv_type,
        )
    }

    /// Logits `[n_vocab]` of the last of `tokens` at `start_pos` (prefill or decode step).
    pub fn forward_last(
        &self,
        cache: &mut RefKvCache,
        tokens: &[u32],
        start_pos: usize,
    ) -> Result<Vec<f32>, ForwardError> {
        Ok(self
            .forward(cache, tokens, start_pos, &Capture::default())?
            .logits)
    }
}
