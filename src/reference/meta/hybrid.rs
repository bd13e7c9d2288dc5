//! The hybrid shape of a `qwen35` model (Qwen3.5: Gated DeltaNet layers and gated full attention
//! layers), read by the oracle itself from the keys llama.cpp reads (`llama-model.cpp`,
//! `LLM_ARCH_QWEN35`):
//!
//! - `qwen35.ssm.conv_kernel` (d_conv), `ssm.state_size` (head_k_dim), `ssm.group_count`
//!   (q/k heads), `ssm.time_step_rank` (v heads), `ssm.inner_size` (v heads × head_v_dim);
//! - `qwen35.attention.recurrent_layers` (a bool per layer), else
//!   `qwen35.full_attention_interval` (default 4): layer `il` is DeltaNet iff
//!   `(il + 1) % interval != 0`;
//! - `qwen35.nextn_predict_layers` (default 0): multi-token-prediction blocks counted in
//!   `block_count` after the main layers, never run by the main pass;
//! - `qwen35.rope.dimension_sections` (4 sizes): llama.cpp's interleaved multi-section RoPE,
//!   which for text positions `(p, p, p, 0)` is plain NEOX RoPE as long as every rotated pair
//!   falls in one of the first three sections (a pair in the fourth is refused, naming it).

use super::read::{bool_array_key, int_array_key, u32_key};
use super::{MetaError, RefHparams};
use crate::gguf::{Gguf, Metadata};

/// The mixer of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefLayerKind {
    /// Gated softmax attention over a KV cache.
    Attention,
    /// Gated DeltaNet: causal conv1d, then the delta rule over a fixed-size state.
    DeltaNet,
}

/// The Gated DeltaNet shape and the layer kinds of a `qwen35` model.
#[derive(Debug, Clone, PartialEq)]
pub struct RefHybrid {
    /// `ssm.conv_kernel`: taps of the causal depthwise conv1d.
    pub d_conv: u32,
    /// `ssm.state_size`: per-head size of the DeltaNet q and k.
    pub head_k_dim: u32,
    /// `ssm.inner_size / ssm.time_step_rank`: per-head size of v.
    pub head_v_dim: u32,
    /// `ssm.group_count`: q/k heads.
    pub n_k_heads: u32,
    /// `ssm.time_step_rank`: v heads; v head `h` reads q/k head `h % n_k_heads`.
    pub n_v_heads: u32,
    /// `nextn_predict_layers`: MTP blocks after the main layers (not run).
    pub n_nextn: u32,
    /// One per main-pass layer.
    pub kinds: Vec<RefLayerKind>,
}

impl RefHybrid {
    /// `n_k_heads · head_k_dim`: width of the DeltaNet q (and of k).
    pub fn key_dim(&self) -> usize {
        (self.n_k_heads * self.head_k_dim) as usize
    }

    /// `n_v_heads · head_v_dim`: width of v, of the gate z and of the DeltaNet output.
    pub fn value_dim(&self) -> usize {
        (self.n_v_heads * self.head_v_dim) as usize
    }

    /// Channels of the conv1d, `[q | k | v]`: `2·key_dim + value_dim`.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// f32 values of one layer's conv state: `(d_conv − 1) · conv_dim`.
    pub fn conv_state_len(&self) -> usize {
        (self.d_conv as usize - 1) * self.conv_dim()
    }

    /// f32 values of one layer's delta-rule state: `n_v_heads · head_k_dim · head_v_dim`.
    pub fn ssm_state_len(&self) -> usize {
        self.value_dim() * self.head_k_dim as usize
    }

    /// The mixer of layer `il` (`None` past the main-pass layers).
    pub fn kind(&self, il: usize) -> Option<RefLayerKind> {
        self.kinds.get(il).copied()
    }

    /// Read the hybrid keys of the `qwen35` file `g`, whose backbone `hp` was read from it.
    pub fn from_gguf(g: &Gguf, hp: &RefHparams) -> Result<RefHybrid, MetaError> {
        if !hp.arch.is_hybrid() {
            return Err(MetaError::NotHybrid {
                arch: hp.arch.name().to_string(),
            });
        }
        let m = &g.metadata;
        let p = hp.arch.name();
        let key = |k: &str| format!("{p}.{k}");
        let need = |k: &str| {
            let k = key(k);
            u32_key(m, &k)?.ok_or(MetaError::Missing { key: k })
        };
        let invalid = |k: &str, value: String, why| MetaError::Invalid {
            key: key(k),
            value,
            why,
        };
        let d_conv = need("ssm.conv_kernel")?;
        let head_k_dim = need("ssm.state_size")?;
        let n_k_heads = need("ssm.group_count")?;
        let n_v_heads = need("ssm.time_step_rank")?;
        let inner = need("ssm.inner_size")?;
        for (k, v) in [
            ("ssm.conv_kernel", d_conv),
            ("ssm.state_size", head_k_dim),
            ("ssm.group_count", n_k_heads),
            ("ssm.time_step_rank", n_v_heads),
        ] {
            super::positive(&key(k), v)?;
        }
        if n_v_heads % n_k_heads != 0 {
            return Err(invalid(
                "ssm.time_step_rank",
                format!("{n_v_heads} (ssm.group_count {n_k_heads})"),
                "the v heads must be a whole multiple of the q/k heads",
            ));
        }
        if inner == 0 || inner % n_v_heads != 0 {
            return Err(invalid(
                "ssm.inner_size",
                format!("{inner} (ssm.time_step_rank {n_v_heads})"),
                "must be a non-zero multiple of the v heads",
            ));
        }
        let n_nextn = nextn(m, p)?; // checked by RefHparams::from_gguf
        let n_layer = hp.n_layer as usize;
        let kinds = match bool_array_key(m, &key("attention.recurrent_layers"))? {
            Some(flags) => {
                if flags.len() < n_layer {
                    return Err(invalid(
                        "attention.recurrent_layers",
                        format!("{} entries for {n_layer} layers", flags.len()),
                        "needs one entry per main-pass layer",
                    ));
                }
                flags[..n_layer]
                    .iter()
                    .map(|&r| kind_of(r))
                    .collect::<Vec<_>>()
            }
            None => {
                let interval = u32_key(m, &key("full_attention_interval"))?.unwrap_or(4);
                super::positive(&key("full_attention_interval"), interval)?;
                (0..hp.n_layer)
                    .map(|il| kind_of((il + 1) % interval != 0))
                    .collect()
            }
        };
        check_rope_sections(m, p, hp.n_rot)?;
        Ok(RefHybrid {
            d_conv,
            head_k_dim,
            head_v_dim: inner / n_v_heads,
            n_k_heads,
            n_v_heads,
            n_nextn,
            kinds,
        })
    }
}

fn kind_of(recurrent: bool) -> RefLayerKind {
    if recurrent {
        RefLayerKind::DeltaNet
    } else {
        RefLayerKind::Attention
    }
}

/// `{p}.nextn_predict_layers` (default 0), unchecked.
fn nextn(m: &Metadata, p: &str) -> Result<u32, MetaError> {
    Ok(u32_key(m, &format!("{p}.nextn_predict_layers"))?.unwrap_or(0))
}

/// `{p}.nextn_predict_layers`, which must leave at least one main-pass layer of
/// `block_count`.
pub(super) fn nextn_layers(m: &Metadata, p: &str, block_count: u32) -> Result<u32, MetaError> {
    let n = nextn(m, p)?;
    if n >= block_count {
        return Err(MetaError::Invalid {
            key: format!("{p}.nextn_predict_layers"),
            value: format!("{n} (block_count {block_count})"),
            why: "leaves no main-pass layer (block_count counts the MTP layers)",
        });
    }
    Ok(n)
}

/// `{p}.rope.dimension_sections`: 4 non-negative sizes, every rotated pair `i < n_rot / 2` in
/// one of the first three sections. ggml's interleaved multi-section RoPE gives pair `i` the
/// sector `i % Σ sections`, and takes position t, h or w for `sector % 3 = 0, 1, 2` while the
/// sector is below 3 × that section, else e (0 for text).
fn check_rope_sections(m: &Metadata, p: &str, n_rot: u32) -> Result<(), MetaError> {
    let key = format!("{p}.rope.dimension_sections");
    let Some(s) = int_array_key(m, &key)? else {
        return Err(MetaError::Missing { key });
    };
    let invalid = |why| MetaError::Invalid {
        key: key.clone(),
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
    for i in 0..i64::from(n_rot / 2) {
        let sector = i % total;
        let limit = 3 * s[(sector % 3) as usize];
        if sector >= limit {
            return Err(invalid(
                "a rotated pair falls in the fourth section (position 0 for text): not run",
            ));
        }
    }
    Ok(())
}
