//! Hybrid (`qwen35`) hyperparameters: which layers are Gated DeltaNet (linear attention with a
//! recurrent state) and which are gated full attention, and the DeltaNet shapes.
//!
//! Keys as llama.cpp reads them (`src/models/qwen35.cpp`, `llama-hparams.cpp`): `ssm.conv_kernel`
//! (d_conv), `ssm.state_size` (head_k_dim), `ssm.group_count` (k heads), `ssm.time_step_rank`
//! (v heads), `ssm.inner_size` (v heads × head_v_dim), `full_attention_interval` (default 4) or the
//! per-layer bool array `attention.recurrent_layers`, and `nextn_predict_layers` (MTP blocks at the
//! end of `block_count`, never run in the main pass). Layer `il` is recurrent iff
//! `(il + 1) % interval != 0`.

use crate::gguf::{Gguf, MetaArray, MetaValue};

use super::hparams::HparamsError;

/// The mixer of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// Softmax attention over a KV cache (gated by a sigmoid of a second query half in qwen35).
    Attention,
    /// Gated DeltaNet: a causal conv1d and the delta-rule recurrence, a fixed-size state.
    DeltaNet,
}

/// The Gated DeltaNet shape of a hybrid model.
#[derive(Debug, Clone, PartialEq)]
pub struct HybridHparams {
    /// Causal conv1d kernel width (`ssm.conv_kernel`).
    pub d_conv: u32,
    /// Per-head size of the DeltaNet q and k (`ssm.state_size`).
    pub head_k_dim: u32,
    /// Per-head size of v (`ssm.inner_size / ssm.time_step_rank`).
    pub head_v_dim: u32,
    /// DeltaNet q/k heads (`ssm.group_count`).
    pub n_k_heads: u32,
    /// DeltaNet v heads (`ssm.time_step_rank`); v head `h` reads q/k head `h % n_k_heads`.
    pub n_v_heads: u32,
    /// MTP blocks after the main layers (skipped).
    pub n_nextn: u32,
    /// Per main-pass layer.
    pub kinds: Vec<LayerKind>,
}

impl HybridHparams {
    /// Width of the DeltaNet q (and k) projection: `n_k_heads × head_k_dim`.
    pub fn key_dim(&self) -> u32 {
        self.n_k_heads * self.head_k_dim
    }
    /// Width of v, z and the DeltaNet output: `n_v_heads × head_v_dim`.
    pub fn value_dim(&self) -> u32 {
        self.n_v_heads * self.head_v_dim
    }
    /// Channels of the conv1d (q | k | v): `2·key_dim + value_dim`.
    pub fn conv_dim(&self) -> u32 {
        2 * self.key_dim() + self.value_dim()
    }
    /// f32 values of one layer's conv state: the last `d_conv − 1` pre-conv rows.
    pub fn conv_state_len(&self) -> u64 {
        u64::from(self.d_conv - 1) * u64::from(self.conv_dim())
    }
    /// f32 values of one layer's delta-rule state: `n_v_heads × head_k_dim × head_v_dim`.
    pub fn ssm_state_len(&self) -> u64 {
        u64::from(self.n_v_heads) * u64::from(self.head_k_dim) * u64::from(self.head_v_dim)
    }
    /// Layers that are Gated DeltaNet.
    pub fn n_recurrent(&self) -> u32 {
        self.kinds
            .iter()
            .filter(|k| **k == LayerKind::DeltaNet)
            .count() as u32
    }

    /// Reads the hybrid keys of a `qwen35` file (`p` = "qwen35"); `block_count` is the count
    /// with MTP layers. Returns the hybrid shape and the main-pass layer count.
    pub fn from_gguf(g: &Gguf, p: &str, block_count: u32) -> Result<HybridHparams, HparamsError> {
        let m = &g.metadata;
        let key = |k: &str| format!("{p}.{k}");
        let invalid = |what: String, value: String, why| HparamsError::Invalid { what, value, why };
        let n_nextn = m
            .opt(&key("nextn_predict_layers"), |m, k| m.u32(k))?
            .unwrap_or(0);
        if n_nextn >= block_count {
            return Err(invalid(
                key("nextn_predict_layers"),
                n_nextn.to_string(),
                "leaves no main-pass layer (block_count counts the MTP layers)",
            ));
        }
        let n_layer = block_count - n_nextn;
        let d_conv = m.u32(&key("ssm.conv_kernel"))?;
        let head_k_dim = m.u32(&key("ssm.state_size"))?;
        let n_k_heads = m.u32(&key("ssm.group_count"))?;
        let n_v_heads = m.u32(&key("ssm.time_step_rank"))?;
        let inner = m.u32(&key("ssm.inner_size"))?;
        if !(2..=16).contains(&d_conv) {
            return Err(invalid(
                key("ssm.conv_kernel"),
                d_conv.to_string(),
                "flint runs conv kernels of 2 to 16 taps",
            ));
        }
        if n_k_heads == 0 || n_v_heads == 0 || n_v_heads % n_k_heads != 0 {
            return Err(invalid(
                format!("{} / {}", key("ssm.time_step_rank"), key("ssm.group_count")),
                format!("{n_v_heads} / {n_k_heads}"),
                "v heads must be a non-zero multiple of k heads",
            ));
        }
        if inner == 0 || inner % n_v_heads != 0 {
            return Err(invalid(
                key("ssm.inner_size"),
                inner.to_string(),
                "must be a non-zero multiple of ssm.time_step_rank",
            ));
        }
        let head_v_dim = inner / n_v_heads;
        // The delta-rule kernel keeps one state column of head_k_dim floats per invocation and
        // runs one invocation per v column of a head.
        if head_k_dim == 0 || head_k_dim > 256 || head_v_dim > 256 {
            return Err(invalid(
                format!("{} / head_v_dim", key("ssm.state_size")),
                format!("{head_k_dim} / {head_v_dim}"),
                "flint runs DeltaNet head sizes of 1 to 256",
            ));
        }
        let kinds = match m.get(&key("attention.recurrent_layers")) {
            Some(MetaValue::Array(MetaArray::Bool(flags))) => {
                if flags.len() < n_layer as usize {
                    return Err(invalid(
                        key("attention.recurrent_layers"),
                        format!("{} entries", flags.len()),
                        "needs one entry per main-pass layer",
                    ));
                }
                flags[..n_layer as usize]
                    .iter()
                    .map(|&r| {
                        if r {
                            LayerKind::DeltaNet
                        } else {
                            LayerKind::Attention
                        }
                    })
                    .collect()
            }
            Some(other) => {
                return Err(invalid(
                    key("attention.recurrent_layers"),
                    other.type_name(),
                    "must be an array of bools",
                ))
            }
            None => {
                let interval = m
                    .opt(&key("full_attention_interval"), |m, k| m.u32(k))?
                    .unwrap_or(4);
                if interval == 0 {
                    return Err(invalid(
                        key("full_attention_interval"),
                        "0".into(),
                        "must be at least 1",
                    ));
                }
                (0..n_layer)
                    .map(|il| {
                        if (il + 1) % interval != 0 {
                            LayerKind::DeltaNet
                        } else {
                            LayerKind::Attention
                        }
                    })
                    .collect()
            }
        };
        Ok(HybridHparams {
            d_conv,
            head_k_dim,
            head_v_dim,
            n_k_heads,
            n_v_heads,
            n_nextn,
            kinds,
        })
    }
}

/// Checks `rope.dimension_sections` of a qwen35 file: with text positions (p, p, p, 0) llama.cpp's
/// interleaved multi-section RoPE is plain NEOX RoPE only where every rotated pair takes one of
/// the first three sections; a pair left on the fourth (position 0) is refused, naming it.
pub fn check_rope_sections(g: &Gguf, p: &str, n_rot: u32) -> Result<(), HparamsError> {
    let key = format!("{p}.rope.dimension_sections");
    let s = super::hparams::int_array(g, &key)?;
    let invalid = |why| HparamsError::Invalid {
        what: key.clone(),
        value: format!("{s:?}"),
        why,
    };
    if s.len() != 4 || s.iter().any(|&v| v < 0) {
        return Err(invalid("must hold 4 non-negative section sizes"));
    }
    let total: i64 = s.iter().sum();
    if total <= 0 {
        return Err(invalid("the sections are empty"));
    }
    // ggml's IMROPE: pair i is in sector i % total; sector % 3 picks t, h or w while the sector
    // is below 3 × that section, else the fourth (e) position.
    for i in 0..i64::from(n_rot / 2) {
        let sector = i % total;
        let text = match sector % 3 {
            0 => sector < 3 * s[0],
            1 => sector < 3 * s[1],
            _ => sector < 3 * s[2],
        };
        if !text {
            return Err(invalid(
                "a rotated pair falls in the fourth section (position 0 for text): not supported",
            ));
        }
    }
    Ok(())
}
