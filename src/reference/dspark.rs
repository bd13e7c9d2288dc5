//! The CPU oracle of a DSpark drafter (docs/DSPARK.md), f32 activations throughout, built from
//! the reference ops ([`rms_norm`], [`rope`], [`attention`], the threaded [`linear`]): what the
//! GPU drafter is checked against.
//!
//! - [`RefDrafter::load`] reads a drafter in either GGUF format (`dflash` or the legacy
//!   `dspark`: metadata and tensor names through [`crate::reference::meta`]) next to its
//!   target, borrows the target's `token_embd` (and LM head: `output`, or the tied
//!   `token_embd`) when the drafter has none, and checks the drafter against the target
//!   ([`load`]).
//! - Its cache holds, per committed position, every drafter layer's K and V row, rounded
//!   through the cache type (f16, q8_0, q4_0 or exact f32) as [`RefKvCache`] rounds them, so
//!   attention reads what a GPU cache of that type returns. Positions may arrive in any order
//!   and leave gaps; attention reads the positions present, in ascending order.
//! - [`RefDrafter::inject`] turns tap rows into K/V (§1.3): `g = RMSNorm_enc(fc · taps)`,
//!   `K = RoPE_pos(k_norm(W_K g))`, `V = W_V g` (no attn_norm, no queries, no FFN).
//! - [`RefDrafter::draft`] runs one block (§1.4–1.8), see [`draft`]; a log-SNR conditioned
//!   drafter adds its slot rows ([`snr`]) to the block's embeddings first.
//!
//! [`RefKvCache`]: crate::reference::forward::RefKvCache

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod draft;
mod load;
pub mod snr;

use std::collections::BTreeMap;

use crate::gguf::{GgmlType, GgufError};
use crate::quant::QuantError;
use crate::reference::attention::attention;
use crate::reference::forward::{linear, store_kv_rows, ForwardError, LayerWeights};
use crate::reference::matmul::MatmulRefError;
use crate::reference::meta::{MetaError, RefDrafterMeta, RefHparams};
use crate::reference::ops::{rms_norm, rope, RopeRef};

/// Errors of the drafter oracle: a drafter it cannot run (or that does not fit the target), or
/// a bad request. Each names the values involved.
#[derive(Debug, thiserror::Error)]
pub enum DsparkRefError {
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Hparams(#[from] MetaError),
    #[error(transparent)]
    Matmul(#[from] MatmulRefError),
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error("the target is itself a drafter (architecture {arch})")]
    TargetIsDrafter { arch: &'static str },
    #[error("unsupported drafter {what}: {value}")]
    Unsupported { what: &'static str, value: String },
    #[error("drafter tap {tap} is past the target's {n_layer} layers (taps are 0..={n_layer})")]
    TapOutOfRange { tap: u32, n_layer: u32 },
    #[error("the drafter declares taps {drafter} wide; the target's hidden size is {target}")]
    TargetHidden { drafter: u32, target: u32 },
    #[error("{tensor} takes {found} inputs; {taps} taps of the target's {target_hidden} need {expected}")]
    FcWidth {
        tensor: String,
        found: u64,
        taps: usize,
        target_hidden: u32,
        expected: u64,
    },
    #[error("the drafter's hidden size {drafter} differs from the target's {target}, whose embeddings it borrows")]
    EmbdWidth { drafter: u32, target: u32 },
    #[error("{tensor} has {rows} rows; the target's vocabulary has {target_vocab} tokens")]
    VocabRows {
        tensor: String,
        rows: u64,
        target_vocab: u32,
    },
    #[error("the Markov head is incomplete: {present} without {missing}")]
    MarkovIncomplete { present: String, missing: String },
    #[error("{tensor} has rank {found}; {w1} has rank {rank}")]
    MarkovRank {
        tensor: String,
        found: u64,
        w1: String,
        rank: u32,
    },
    #[error("{tensor} takes {found} inputs; hidden size {d} + Markov rank {rank} need {expected}")]
    ConfWidth {
        tensor: String,
        found: u64,
        d: u32,
        rank: u32,
        expected: u64,
    },
    #[error(
        "the drafter's vocabulary has {drafter} tokens; the target's LM head has {target} rows"
    )]
    VocabSize { drafter: u32, target: u64 },
    #[error("the drafter names no mask token")]
    MissingMask,
    #[error("mask token {id} is not below the target's vocabulary of {n_vocab}")]
    MaskOutOfRange { id: u32, n_vocab: u32 },
    #[error("{got} tap values for {positions} positions of {width}")]
    TapsShape {
        got: usize,
        positions: usize,
        width: u64,
    },
    #[error("position {pos} is past the last position RoPE takes (i32::MAX)")]
    Position { pos: u64 },
    #[error("token id {id} is not below the vocabulary size {n_vocab}")]
    TokenOutOfRange { id: u32, n_vocab: u32 },
}

/// The drafter's weights as f32 (matrices `[N, K]`, N rows of K).
#[derive(Debug, Clone)]
pub struct DrafterWeights {
    /// `[d, m·d_t]`
    pub fc: Vec<f32>,
    /// `[d]`
    pub enc_norm: Vec<f32>,
    /// Qwen3 blocks (`q_norm`, `k_norm` always present, no biases).
    pub layers: Vec<LayerWeights>,
    /// `[d]`
    pub output_norm: Vec<f32>,
    /// `[V, d]`: the drafter's own or the target's.
    pub token_embd: Vec<f32>,
    /// `[V, d]`; `None`: the LM head is [`Self::token_embd`].
    pub lm_head: Option<Vec<f32>>,
    /// `W1 [V, R]` and `W2 [V, R]`; `None` without a Markov head.
    pub markov: Option<(Vec<f32>, Vec<f32>)>,
    /// `[d + R]` and the bias; `None` without a confidence head.
    pub conf: Option<(Vec<f32>, f32)>,
    /// Log-SNR rows `[γ, d]` added to the block's embeddings ([`snr::rows`]); `None` for a
    /// drafter without conditioning.
    pub log_snr: Option<Vec<f32>>,
}

impl DrafterWeights {
    /// The LM head `[V, d]`.
    pub fn lm_head(&self) -> &[f32] {
        self.lm_head.as_deref().unwrap_or(&self.token_embd)
    }
}

/// One cached context position: every layer's K `[n_layer, k_dim]` and V `[n_layer, v_dim]`,
/// already rounded to the cache type.
#[derive(Debug, Clone, PartialEq)]
struct CtxRow {
    k: Vec<f32>,
    v: Vec<f32>,
}

/// A DSpark drafter on the CPU, with its context cache.
#[derive(Debug, Clone)]
pub struct RefDrafter {
    /// What the drafter declares (its backbone in `meta.hp`; taps in the layer-input convention).
    pub meta: RefDrafterMeta,
    pub weights: DrafterWeights,
    /// NEOX RoPE with the drafter's base.
    pub rope: RopeRef,
    /// The mask token of the block's slots 1..γ.
    pub mask_token: u32,
    /// Vocabulary size (the target's).
    pub n_vocab: u32,
    kv_type: GgmlType,
    cache: BTreeMap<u32, CtxRow>,
}

/// One drafted block (`γ` = block size, `V` = vocabulary, `d` = drafter hidden size).
#[derive(Debug, Clone, PartialEq)]
pub struct RefDraft {
    /// `[γ]`: slot `j` proposes the token at position `p0 + j + 1`.
    pub tokens: Vec<u32>,
    /// `[γ]`: the confidence head's `c_j` (1.0 without one).
    pub conf: Vec<f32>,
    /// `[γ, V]`: corrected logits `L_j = U_j + W2·W1[prev_j]` (= `U` without a Markov head).
    pub logits: Vec<f32>,
    /// `[γ, V]`: base logits `U = h · LM headᵀ`.
    pub base_logits: Vec<f32>,
    /// `[γ, d]`: `h`, after the final norm.
    pub hidden: Vec<f32>,
}

/// Tap sanitising before fusion: NaN → 0, everything else clamped to ±65504 (f16's range).
pub fn sanitize_tap(x: f32) -> f32 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(-65504.0, 65504.0)
    }
}

impl RefDrafter {
    /// The cache type K/V rows are rounded through.
    pub fn kv_type(&self) -> GgmlType {
        self.kv_type
    }

    /// γ: slots per block (= drafts per block, anchor-first).
    pub fn block_size(&self) -> usize {
        self.meta.block_size as usize
    }

    /// Cached context positions, ascending.
    pub fn positions(&self) -> Vec<u32> {
        self.cache.keys().copied().collect()
    }

    /// Forget every cached position from `len` on.
    pub fn truncate(&mut self, len: u32) {
        drop(self.cache.split_off(&len));
    }

    /// Forget every cached position.
    pub fn reset(&mut self) {
        self.cache.clear();
    }

    /// A position window's rebase, as the device does it: the cached rows at `from..from + n`
    /// move to `to..to + n`, every layer's K row rotated by `to − from` from its stored (rounded)
    /// values and rounded again, V rows as they are; every other row is forgotten.
    pub fn shift(&mut self, from: u32, to: u32, n: u32) -> Result<(), DsparkRefError> {
        let hp = &self.meta.hp;
        let (n_kv, head_dim) = (hp.n_head_kv as usize, hp.head_dim as usize);
        let delta = i64::from(to) - i64::from(from);
        let delta = i32::try_from(delta).map_err(|_| DsparkRefError::Position {
            pos: u64::from(from),
        })?;
        let k_dim = n_kv * head_dim;
        let mut moved = BTreeMap::new();
        for r in 0..n {
            let Some(row) = self.cache.get(&(from + r)) else {
                continue;
            };
            let mut k = Vec::with_capacity(row.k.len());
            for layer in row.k.chunks(k_dim) {
                let rotated = rope(layer, &[delta], n_kv, head_dim, &self.rope, None);
                k.extend(store_kv_rows(self.kv_type, &rotated)?);
            }
            moved.insert(
                to + r,
                CtxRow {
                    k,
                    v: row.v.clone(),
                },
            );
        }
        self.cache = moved;
        Ok(())
    }

    /// Inject context rows: `taps` `[n, m·d_t]` row-major (row `r`, tap `k` at columns
    /// `k·d_t..`, taps in the drafter's order), `positions` `[n]`. Replaces any row already
    /// cached at one of `positions` (a position given twice: the later row wins).
    pub fn inject(&mut self, taps: &[f32], positions: &[u32]) -> Result<(), DsparkRefError> {
        let hp = &self.meta.hp;
        let width = self.meta.tap_width();
        let n = positions.len();
        if (taps.len() as u64) != (n as u64).saturating_mul(width) {
            return Err(DsparkRefError::TapsShape {
                got: taps.len(),
                positions: n,
                width,
            });
        }
        if let Some(&pos) = positions.iter().find(|&&p| i32::try_from(p).is_err()) {
            return Err(DsparkRefError::Position {
                pos: u64::from(pos),
            });
        }
        if n == 0 {
            return Ok(());
        }
        let (d, head_dim) = (hp.n_embd as usize, hp.head_dim as usize);
        let (k_dim, v_dim) = (hp.k_dim() as usize, hp.v_dim() as usize);
        let n_kv = hp.n_head_kv as usize;
        let eps = hp.rms_eps;
        let w = &self.weights;
        let x: Vec<f32> = taps.iter().map(|&v| sanitize_tap(v)).collect(); // [n, m·d_t]
        let fused = linear(&x, &w.fc, width as usize); // [n, d]
        let g = rms_norm(&fused, d, Some(&w.enc_norm), eps); // [n, d]
        let pos: Vec<i32> = positions.iter().map(|&p| p as i32).collect(); // checked above
                                                                           // Per layer K [n, k_dim] and V [n, v_dim], rounded to the cache type.
        let mut per_layer = Vec::with_capacity(w.layers.len());
        for lw in &w.layers {
            let mut k = linear(&g, &lw.wk, d); // [n, n_kv · head_dim]
            if let Some(nw) = &lw.k_norm {
                k = rms_norm(&k, head_dim, Some(nw), eps);
            }
            let k = rope(&k, &pos, n_kv, head_dim, &self.rope, None);
            let v = linear(&g, &lw.wv, d); // [n, n_kv · head_dim_v]
            per_layer.push((
                store_kv_rows(self.kv_type, &k)?,
                store_kv_rows(self.kv_type, &v)?,
            ));
        }
        for (r, &p) in positions.iter().enumerate() {
            let mut row = CtxRow {
                k: Vec::with_capacity(per_layer.len() * k_dim),
                v: Vec::with_capacity(per_layer.len() * v_dim),
            };
            for (k, v) in &per_layer {
                row.k
                    .extend_from_slice(k.get(r * k_dim..(r + 1) * k_dim).unwrap_or_default());
                row.v
                    .extend_from_slice(v.get(r * v_dim..(r + 1) * v_dim).unwrap_or_default());
            }
            self.cache.insert(p, row);
        }
        Ok(())
    }
}

/// Attention of the block queries over the cached context rows and the block's own rows.
///
/// `q` `[γ, n_head, head_dim]`; `ctx`: cached rows before the anchor, ascending; `k_blk`,
/// `v_blk` `[γ, k_dim]` / `[γ, v_dim]` already rounded to the cache type. Non-causal.
fn block_attention(
    hp: &RefHparams,
    il: usize,
    q: &[f32],
    ctx: &[&CtxRow],
    k_blk: &[f32],
    v_blk: &[f32],
) -> Vec<f32> {
    let (k_dim, v_dim) = (hp.k_dim() as usize, hp.v_dim() as usize);
    let mut k_all = Vec::with_capacity((ctx.len() + 1) * k_dim + k_blk.len()); // [L, k_dim]
    let mut v_all = Vec::with_capacity((ctx.len() + 1) * v_dim + v_blk.len()); // [L, v_dim]
    for row in ctx {
        k_all.extend_from_slice(row.k.get(il * k_dim..(il + 1) * k_dim).unwrap_or_default());
        v_all.extend_from_slice(row.v.get(il * v_dim..(il + 1) * v_dim).unwrap_or_default());
    }
    k_all.extend_from_slice(k_blk);
    v_all.extend_from_slice(v_blk);
    let head_dim = hp.head_dim as usize;
    let dims = crate::reference::attention::AttnDims {
        n_q: q.len() / (hp.q_dim() as usize).max(1),
        n_head: hp.n_head as usize,
        n_kv_heads: hp.n_head_kv as usize,
        head_dim,
        kv_len: k_all.len() / k_dim.max(1),
    };
    let scale = 1.0 / (head_dim as f32).sqrt();
    attention(
        dims,
        q,
        &k_all,
        &v_all,
        crate::reference::attention::Mask::None,
        scale,
    )
}
