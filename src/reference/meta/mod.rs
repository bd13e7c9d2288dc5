//! The oracle's own reading of a model's hyperparameters from its GGUF metadata: every key
//! written out in full, read with small plain getters, checked, with errors that name the key
//! and the value. It shares nothing with the GPU path's reader but the container parser
//! ([`crate::gguf`]), so a misread key cannot hide by being misread the same way on both sides.
//!
//! - [`RefHparams`]: the backbone of `llama`, `qwen2`, `qwen3`, `qwen35` and of DSpark drafters
//!   (`dflash`, and the legacy `dspark`, whose backbone keys are `dspark.*`).
//! - [`RefHybrid`] (`hybrid.rs`): what `qwen35` adds: the layer kinds and the Gated DeltaNet
//!   shape.
//! - [`RefMoe`] (`moe.rs`): what `qwen3moe` and `qwen35moe` add: the experts and the router.
//! - [`RefDrafterMeta`] (`drafter.rs`): what a drafter declares (block size, taps, heads).
//! - [`drafter_tensor`]: the legacy `dspark` names of the drafter-only tensors.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod drafter;
mod hybrid;
mod moe;
mod read;

pub use drafter::{drafter_tensor, RefDrafterMeta};
pub use hybrid::{RefHybrid, RefLayerKind};
pub use moe::{RefMoe, WEIGHTS_SUM_MIN};

use crate::gguf::Gguf;
use read::{f32_key, string_key, u32_key};

/// Errors reading hyperparameters: each names the key (or tensor) and the value found.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("metadata key '{key}' is missing")]
    Missing { key: String },
    #[error("metadata key '{key}' holds {found} = {value}, expected {expected}")]
    Type {
        key: String,
        expected: &'static str,
        found: String,
        value: String,
    },
    #[error("{key} = {value} is invalid: {why}")]
    Invalid {
        key: String,
        value: String,
        why: &'static str,
    },
    #[error(
        "architecture '{arch}' is not one the oracle reads (llama, qwen2, qwen3, qwen35, qwen3moe, \
         qwen35moe, dflash, dspark)"
    )]
    Arch { arch: String },
    #[error(
        "architecture '{arch}' is a mixture-of-experts model: MoE is not supported (its dense \
         sibling qwen35 is)"
    )]
    Moe { arch: String },
    #[error("architecture '{arch}' is not a hybrid (qwen35) model")]
    NotHybrid { arch: String },
    #[error("architecture '{arch}' is not a DSpark drafter (dflash, dspark)")]
    NotDrafter { arch: String },
    #[error(
        "{key} = '{value}' is a RoPE scaling type the oracle does not run (none, linear, yarn)"
    )]
    RopeScaling { key: String, value: String },
}

/// The architectures the oracle reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefArch {
    Llama,
    Qwen2,
    Qwen3,
    /// Qwen3.5: Gated DeltaNet and gated full attention layers ([`RefHybrid`]).
    Qwen35,
    /// Qwen3 attention with a mixture-of-experts FFN ([`RefMoe`]).
    Qwen3Moe,
    /// The Qwen3.5 hybrid with a mixture-of-experts FFN and a gated shared expert.
    Qwen35Moe,
    /// A DSpark drafter, llama.cpp's `dflash` format.
    Dflash,
    /// A DSpark drafter, the legacy PrismML `dspark` format.
    DsparkLegacy,
}

impl RefArch {
    /// The value of `general.architecture`, which is also the prefix of the model's keys.
    pub fn name(self) -> &'static str {
        match self {
            RefArch::Llama => "llama",
            RefArch::Qwen2 => "qwen2",
            RefArch::Qwen3 => "qwen3",
            RefArch::Qwen35 => "qwen35",
            RefArch::Qwen3Moe => "qwen3moe",
            RefArch::Qwen35Moe => "qwen35moe",
            RefArch::Dflash => "dflash",
            RefArch::DsparkLegacy => "dspark",
        }
    }

    pub fn is_drafter(self) -> bool {
        matches!(self, RefArch::Dflash | RefArch::DsparkLegacy)
    }

    /// Gated DeltaNet / gated attention layers (`qwen35`, `qwen35moe`).
    pub fn is_hybrid(self) -> bool {
        matches!(self, RefArch::Qwen35 | RefArch::Qwen35Moe)
    }
}

/// `{arch}.rope.scaling.type` (llama.cpp's names; absent means linear).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefRopeScaling {
    /// No frequency scale, whatever `rope.scaling.factor` says.
    None,
    /// `1 / rope.scaling.factor`.
    Linear,
    /// YaRN (`rope.scaling.factor`, then [`RefYarn`]).
    Yarn,
}

/// ggml_rope_ext's YaRN parameters, as llama.cpp derives them from the metadata; the oracle's
/// RoPE (`reference::ops`, `RopeRef::rotate`) implements llama.cpp's `rope_yarn` with them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefYarn {
    /// `{arch}.rope.scaling.original_context_length` (default `{arch}.context_length`, else
    /// 4096).
    pub n_ctx_orig: u32,
    /// `{arch}.rope.scaling.yarn_ext_factor`; absent (or negative: "not set" in llama.cpp): 1
    /// for yarn, 0 otherwise. 0 turns YaRN off.
    pub ext_factor: f32,
    /// `{arch}.rope.scaling.attn_factor` (default 1); where YaRN is off, times
    /// `{arch}.rope.scaling.yarn_attn_factor` (default 1), which llama.cpp overrides with YaRN
    /// on (by a value its kernel's own correction cancels).
    pub attn_factor: f32,
    /// `{arch}.rope.scaling.yarn_beta_fast` (default 32).
    pub beta_fast: f32,
    /// `{arch}.rope.scaling.yarn_beta_slow` (default 1).
    pub beta_slow: f32,
}

impl RefYarn {
    /// Whether the rotation differs from plain RoPE at all (YaRN on, or a cos/sin scale).
    pub fn is_active(&self) -> bool {
        self.ext_factor != 0.0 || self.attn_factor != 1.0
    }
}

/// The backbone's shape, as the oracle needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct RefHparams {
    pub arch: RefArch,
    /// `{arch}.block_count` (for `qwen35`, less its `nextn_predict_layers` MTP blocks: the
    /// layers of the main pass)
    pub n_layer: u32,
    /// `{arch}.embedding_length`: the hidden size `d`.
    pub n_embd: u32,
    /// `{arch}.attention.head_count`
    pub n_head: u32,
    /// `{arch}.attention.head_count_kv` (default: `n_head`).
    pub n_head_kv: u32,
    /// `{arch}.attention.key_length` (default: `n_embd / n_head`): per-head size of Q and K.
    pub head_dim: u32,
    /// `{arch}.attention.value_length` (default: `head_dim`): per-head size of V.
    pub head_dim_v: u32,
    /// `{arch}.feed_forward_length`
    pub n_ff: u32,
    /// Tokens in `tokenizer.ggml.tokens`, else `{arch}.vocab_size`, else the embedding rows.
    pub n_vocab: u32,
    /// `{arch}.rope.freq_base` (default 10000).
    pub rope_base: f32,
    /// `1 / {arch}.rope.scaling.factor` (default 1; a factor ≤ 0 counts as none, and so does
    /// scaling type none).
    pub rope_freq_scale: f32,
    /// `{arch}.rope.scaling.type`.
    pub rope_scaling: RefRopeScaling,
    /// YaRN and the cos/sin scale (inactive for a model without those keys).
    pub rope_yarn: RefYarn,
    /// `{arch}.rope.dimension_count` (default: `head_dim`): rotated dims per head.
    pub n_rot: u32,
    /// NEOX pairs (`i`, `i + n_rot/2`) for every architecture but llama (adjacent pairs).
    pub rope_neox: bool,
    /// `{arch}.attention.layer_norm_rms_epsilon` (required).
    pub rms_eps: f32,
}

impl RefHparams {
    /// Width of the query projection: `n_head · head_dim`.
    pub fn q_dim(&self) -> u32 {
        self.n_head * self.head_dim
    }

    /// Width of the key projection: `n_head_kv · head_dim`.
    pub fn k_dim(&self) -> u32 {
        self.n_head_kv * self.head_dim
    }

    /// Width of the value projection: `n_head_kv · head_dim_v`.
    pub fn v_dim(&self) -> u32 {
        self.n_head_kv * self.head_dim_v
    }

    /// Read the backbone of `g` from its metadata (and, for the vocabulary only, its tensors).
    pub fn from_gguf(g: &Gguf) -> Result<RefHparams, MetaError> {
        let m = &g.metadata;
        let arch_name = string_key(m, "general.architecture")?.ok_or(MetaError::Missing {
            key: "general.architecture".into(),
        })?;
        let arch = match arch_name {
            "llama" => RefArch::Llama,
            "qwen2" => RefArch::Qwen2,
            "qwen3" => RefArch::Qwen3,
            "qwen35" => RefArch::Qwen35,
            "qwen3moe" => RefArch::Qwen3Moe,
            "qwen35moe" => RefArch::Qwen35Moe,
            "dflash" => RefArch::Dflash,
            "dspark" => RefArch::DsparkLegacy,
            other => {
                return Err(MetaError::Arch {
                    arch: other.to_string(),
                })
            }
        };
        let p = arch.name();
        let key = |k: &str| format!("{p}.{k}");
        let need_u32 = |k: &str| {
            let k = key(k);
            u32_key(m, &k)?.ok_or(MetaError::Missing { key: k })
        };

        let mut n_layer = need_u32("block_count")?;
        let n_embd = need_u32("embedding_length")?;
        let n_head = need_u32("attention.head_count")?;
        let n_ff = need_u32("feed_forward_length")?;
        let n_head_kv = u32_key(m, &key("attention.head_count_kv"))?.unwrap_or(n_head);
        for (k, v) in [("block_count", n_layer), ("embedding_length", n_embd)] {
            positive(&key(k), v)?;
        }
        if arch.is_hybrid() {
            n_layer -= hybrid::nextn_layers(m, p, n_layer)?;
        }
        positive(&key("attention.head_count"), n_head)?;
        positive(&key("attention.head_count_kv"), n_head_kv)?;
        if n_head % n_head_kv != 0 {
            return Err(MetaError::Invalid {
                key: key("attention.head_count_kv"),
                value: n_head_kv.to_string(),
                why: "the query heads must be a whole multiple of the KV heads",
            });
        }

        let head_dim = match u32_key(m, &key("attention.key_length"))? {
            Some(h) => h,
            None => n_embd / n_head,
        };
        positive(&key("attention.key_length"), head_dim)?;
        let head_dim_v = u32_key(m, &key("attention.value_length"))?.unwrap_or(head_dim);
        positive(&key("attention.value_length"), head_dim_v)?;
        let n_rot = u32_key(m, &key("rope.dimension_count"))?.unwrap_or(head_dim);
        if n_rot > head_dim {
            return Err(MetaError::Invalid {
                key: key("rope.dimension_count"),
                value: n_rot.to_string(),
                why: "more rotated dims than the head has",
            });
        }

        let rope_base = f32_key(m, &key("rope.freq_base"))?.unwrap_or(10000.0);
        let factor = f32_key(m, &key("rope.scaling.factor"))?.unwrap_or(1.0);
        let n_ctx_train = u32_key(m, &key("context_length"))?.unwrap_or(4096);
        let (rope_scaling, rope_yarn) = rope_scaling(m, p, n_ctx_train)?;
        let rope_freq_scale = if factor > 0.0 && rope_scaling != RefRopeScaling::None {
            1.0 / factor
        } else {
            1.0
        };
        let eps_key = key("attention.layer_norm_rms_epsilon");
        let rms_eps = f32_key(m, &eps_key)?.ok_or(MetaError::Missing { key: eps_key })?;

        Ok(RefHparams {
            arch,
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v,
            n_ff,
            n_vocab: vocab(g, p)?,
            rope_base,
            rope_freq_scale,
            rope_scaling,
            rope_yarn,
            n_rot,
            rope_neox: arch != RefArch::Llama,
            rms_eps,
        })
    }
}

/// `{p}.rope.scaling.*`: the type (`longrope` and other unknown ones refused, naming the value)
/// and YaRN's parameters with llama.cpp's defaults (`llama_model::load_hparams` reads the keys,
/// `llama_context`'s constructor sets the defaults).
fn rope_scaling(
    m: &crate::gguf::Metadata,
    p: &str,
    n_ctx_train: u32,
) -> Result<(RefRopeScaling, RefYarn), MetaError> {
    let key = |k: &str| format!("{p}.rope.scaling.{k}");
    let type_key = key("type");
    let scaling = match string_key(m, &type_key)? {
        None | Some("linear") => RefRopeScaling::Linear,
        Some("none") => RefRopeScaling::None,
        Some("yarn") => RefRopeScaling::Yarn,
        Some(other) => {
            return Err(MetaError::RopeScaling {
                key: type_key,
                value: other.to_string(),
            })
        }
    };
    // Negative: "not set" (llama.cpp); NaN is kept, to be refused below.
    let ext_factor = match f32_key(m, &key("yarn_ext_factor"))? {
        Some(e) if e.is_nan() || e >= 0.0 => e,
        _ if scaling == RefRopeScaling::Yarn => 1.0,
        _ => 0.0,
    };
    let attn_factor = f32_key(m, &key("attn_factor"))?.unwrap_or(1.0)
        * if ext_factor == 0.0 {
            f32_key(m, &key("yarn_attn_factor"))?.unwrap_or(1.0)
        } else {
            1.0
        };
    let yarn = RefYarn {
        n_ctx_orig: u32_key(m, &key("original_context_length"))?.unwrap_or(n_ctx_train),
        ext_factor,
        attn_factor,
        beta_fast: f32_key(m, &key("yarn_beta_fast"))?.unwrap_or(32.0),
        beta_slow: f32_key(m, &key("yarn_beta_slow"))?.unwrap_or(1.0),
    };
    let invalid = |k: &str, v: f32, why| MetaError::Invalid {
        key: key(k),
        value: v.to_string(),
        why,
    };
    if !ext_factor.is_finite() {
        return Err(invalid("yarn_ext_factor", ext_factor, "must be finite"));
    }
    for (k, v) in [
        ("attn_factor", yarn.attn_factor),
        ("yarn_beta_fast", yarn.beta_fast),
        ("yarn_beta_slow", yarn.beta_slow),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(invalid(k, v, "must be finite and > 0"));
        }
    }
    if ext_factor != 0.0 {
        if yarn.n_ctx_orig == 0 {
            return Err(MetaError::Invalid {
                key: key("original_context_length"),
                value: "0".into(),
                why: "YaRN needs the original context",
            });
        }
        if let Some(mul) = f32_key(m, &key("yarn_log_multiplier"))? {
            if mul != 0.0 {
                return Err(invalid(
                    "yarn_log_multiplier",
                    mul,
                    "a DeepSeek-style YaRN attention factor, which the oracle does not run",
                ));
            }
        }
    }
    Ok((scaling, yarn))
}

/// `value` of `key` must not be 0.
fn positive(key: &str, value: u32) -> Result<(), MetaError> {
    if value == 0 {
        return Err(MetaError::Invalid {
            key: key.to_string(),
            value: "0".into(),
            why: "must not be 0",
        });
    }
    Ok(())
}

/// The vocabulary size, from the first source present: the tokenizer's token list,
/// `{p}.vocab_size`, or the rows of the first of the embedding, the LM head or a drafter's
/// Markov head (files without a tokenizer, drafters without their own embeddings).
fn vocab(g: &Gguf, p: &str) -> Result<u32, MetaError> {
    let tokens_key = "tokenizer.ggml.tokens";
    if let Some(n) = read::string_array_len(&g.metadata, tokens_key)? {
        return u32::try_from(n).map_err(|_| MetaError::Invalid {
            key: tokens_key.into(),
            value: format!("{n} tokens"),
            why: "more tokens than a u32 counts",
        });
    }
    let size_key = format!("{p}.vocab_size");
    if let Some(n) = u32_key(&g.metadata, &size_key)? {
        return Ok(n);
    }
    for name in [
        "token_embd.weight",
        "output.weight",
        "markov_w1.weight",
        "dspark.markov_head_a.weight",
    ] {
        if let Some(t) = g.tensor(name) {
            // GGUF shapes are [ne0 = row length, ne1 = rows].
            let rows = t.shape.get(1).copied().unwrap_or(1);
            return u32::try_from(rows).map_err(|_| MetaError::Invalid {
                key: format!("{name} rows"),
                value: rows.to_string(),
                why: "more rows than a u32 counts",
            });
        }
    }
    Err(MetaError::Missing { key: size_key })
}
