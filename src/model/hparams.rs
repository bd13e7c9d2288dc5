//! Hyperparameters from GGUF metadata: what every later stage (memory planner, weights, forward,
//! drafter) needs to know about a model, read once with errors that name the key.
//!
//! Architectures: `llama` (SmolLM2, Llama 3.x; normal RoPE, optional `rope_freqs.weight`),
//! `qwen2` (NEOX RoPE, q/k/v biases), `qwen3` (NEOX RoPE, q/k RMS norms), and DSpark drafters:
//! `dflash` (llama.cpp mainline) and the legacy PrismML `dspark` (keys with a double prefix).

use crate::gguf::{Gguf, GgufError, MetaValue};

pub use super::gemma3::Gemma3Hparams;
pub use super::gemma4::Gemma4Hparams;
pub use super::hybrid::{check_rope_sections, HybridHparams, LayerKind};
pub use super::moe::MoeHparams;

/// The model families flint runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    /// Qwen3.5 / 3.6 hybrid: Gated DeltaNet and gated full-attention layers.
    Qwen35,
    /// Qwen3 attention with a mixture-of-experts FFN (`super::moe`).
    Qwen3Moe,
    /// The Qwen3.5 hybrid with a mixture-of-experts FFN and a gated shared expert.
    Qwen35Moe,
    /// Gemma 3: sliding-window and global attention layers (`model/gemma3.rs`).
    Gemma3,
    /// Gemma 4: per-layer head sizes, shared-KV layers, per-layer embeddings, experts
    /// (`model/gemma4.rs`).
    Gemma4,
    /// A DSpark drafter in llama.cpp's `dflash` format.
    Dflash,
    /// A DSpark drafter in the legacy PrismML `dspark` format.
    DsparkLegacy,
}

impl Arch {
    pub fn from_name(name: &str) -> Option<Arch> {
        Some(match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "qwen35" => Arch::Qwen35,
            "qwen3moe" => Arch::Qwen3Moe,
            "qwen35moe" => Arch::Qwen35Moe,
            "gemma3" => Arch::Gemma3,
            "gemma4" => Arch::Gemma4,
            "dflash" => Arch::Dflash,
            "dspark" => Arch::DsparkLegacy,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen35 => "qwen35",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Qwen35Moe => "qwen35moe",
            Arch::Gemma3 => "gemma3",
            Arch::Gemma4 => "gemma4",
            Arch::Dflash => "dflash",
            Arch::DsparkLegacy => "dspark",
        }
    }

    pub fn is_drafter(self) -> bool {
        matches!(self, Arch::Dflash | Arch::DsparkLegacy)
    }
}

/// Errors reading hyperparameters.
#[derive(Debug, thiserror::Error)]
pub enum HparamsError {
    #[error("unsupported architecture '{arch}' (flint runs llama, qwen2, qwen3, qwen35, qwen3moe, qwen35moe, gemma3, gemma4 and DSpark drafters: dflash, dspark)")]
    UnsupportedArch { arch: String },
    /// An architecture flint reads, plans and runs on its CPU oracle, but not on the device.
    #[error("{arch}: flint reads and plans this architecture, but its device forward is not built yet (the CPU oracle flint::reference::{arch} runs it)")]
    NoDeviceForward { arch: String },
    #[error(transparent)]
    Metadata(#[from] GgufError),
    #[error("{key} = '{value}' is not supported: flint runs the RoPE scaling types none, linear and yarn")]
    RopeScaling { key: String, value: String },
    #[error("{what} = {value} is invalid: {why}")]
    Invalid {
        what: String,
        value: String,
        why: &'static str,
    },
    /// A product (or sum) of metadata values that does not fit the 32 bits flint's shapes use.
    #[error("{what} = {value} overflows 32 bits: the file's hyperparameters are too large")]
    Overflow { what: String, value: String },
    /// A tensor whose shape (ggml order, `[inputs, outputs]`) is not the hyperparameters'.
    #[error("tensor {tensor} has shape {found:?}, but the hyperparameters make it {expected:?}")]
    TensorShape {
        tensor: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
}

/// `{arch}.rope.scaling.type`, as llama.cpp reads it (`llama_rope_scaling_type_from_string`;
/// absent means linear).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeScaling {
    /// No frequency scale, whatever `rope.scaling.factor` says.
    None,
    /// `rope_freq_scale = 1 / rope.scaling.factor`.
    Linear,
    /// YaRN: the linear scale mixed with extrapolation per rotation, and a magnitude correction
    /// (see [`Hparams::rope_ext_factor`] and `crate::kernels::ops::rope`).
    Yarn,
}

/// The transformer backbone's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Hparams {
    pub arch: Arch,
    pub n_layer: u32,
    /// Hidden size `d`.
    pub n_embd: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    /// Per-head size of Q and K.
    pub head_dim: u32,
    /// Per-head size of V.
    pub head_dim_v: u32,
    pub n_ff: u32,
    pub n_vocab: u32,
    /// Training context (`context_length`).
    pub n_ctx_train: u32,
    pub rope_base: f32,
    /// Frequency scale (1 / linear scaling factor).
    pub rope_freq_scale: f32,
    /// Rotated dims per head (`rope.dimension_count`, default `head_dim`).
    pub n_rot: u32,
    /// NEOX rotation (pairs `i, i + n_rot/2`) rather than adjacent pairs.
    pub rope_neox: bool,
    /// `rope.scaling.type` (default linear).
    pub rope_scaling: RopeScaling,
    /// ggml's `ext_factor`: `rope.scaling.yarn_ext_factor`, default 1 for yarn and 0 otherwise
    /// (llama.cpp's context defaults). YaRN's ramp and magnitude correction apply where it is
    /// not 0.
    pub rope_ext_factor: f32,
    /// YaRN's original context: `rope.scaling.original_context_length` (default `n_ctx_train`).
    pub rope_n_ctx_orig: u32,
    /// ggml's `attn_factor`, the cos/sin scale before YaRN's own correction:
    /// `rope.scaling.attn_factor` (default 1), times `rope.scaling.yarn_attn_factor` (default 1)
    /// only where YaRN is off: with YaRN on, llama.cpp replaces the latter by a value that its
    /// kernel's correction cancels (llama-context.cpp, ggml-org/llama.cpp#17945).
    pub rope_attn_factor: f32,
    /// `rope.scaling.yarn_beta_fast` (default 32).
    pub rope_beta_fast: f32,
    /// `rope.scaling.yarn_beta_slow` (default 1).
    pub rope_beta_slow: f32,
    pub rms_eps: f32,
    /// Per-head RMS norm of q and k (qwen3, drafters).
    pub qk_norm: bool,
    /// Biases on the q/k/v projections (qwen2).
    pub qkv_bias: bool,
    /// No `output.weight`: the LM head is `token_embd.weight`.
    pub tied_embeddings: bool,
    /// Hybrid models (qwen35): the layer kinds and the Gated DeltaNet shape. Their attention
    /// layers are gated (`attn_q` holds q and a sigmoid output gate per head).
    pub hybrid: Option<HybridHparams>,
    /// Mixture-of-experts models (qwen3moe, qwen35moe): the experts that replace the FFN.
    pub moe: Option<MoeHparams>,
    /// Gemma 3: sliding layers, their RoPE base, the attention scale, the logit soft-cap.
    pub gemma3: Option<Gemma3Hparams>,
    /// Gemma 4: per-layer head sizes and KV heads, shared-KV layers, per-layer embeddings,
    /// experts (`n_head_kv`, `n_ff` above are then the largest of any layer).
    pub gemma4: Option<Gemma4Hparams>,
}

impl Hparams {
    /// Width of the query projection (`n_head × head_dim`).
    pub fn q_dim(&self) -> u32 {
        self.n_head * self.head_dim
    }
    /// Width of the key projection (`n_head_kv × head_dim`).
    pub fn k_dim(&self) -> u32 {
        self.n_head_kv * self.head_dim
    }
    /// Width of the value projection (`n_head_kv × head_dim_v`).
    pub fn v_dim(&self) -> u32 {
        self.n_head_kv * self.head_dim_v
    }

    /// Read the backbone hyperparameters of `g`.
    pub fn from_gguf(g: &Gguf) -> Result<Hparams, HparamsError> {
        let m = &g.metadata;
        let arch_name = m.architecture()?;
        let arch = Arch::from_name(arch_name).ok_or_else(|| HparamsError::UnsupportedArch {
            arch: arch_name.to_string(),
        })?;
        let p = arch.name();
        let key = |k: &str| format!("{p}.{k}");
        let n_embd = m.u32(&key("embedding_length"))?;
        let n_head = m.u32(&key("attention.head_count"))?;
        let n_head_kv = match arch {
            // one per layer possibly: the largest (Gemma4Hparams has each layer's)
            Arch::Gemma4 => {
                super::gemma4::max_per_layer(g, &key("attention.head_count_kv"))?.unwrap_or(n_head)
            }
            _ => m
                .opt(&key("attention.head_count_kv"), |m, k| m.u32(k))?
                .unwrap_or(n_head),
        };
        if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(HparamsError::Invalid {
                what: format!(
                    "{} / {}",
                    key("attention.head_count"),
                    key("attention.head_count_kv")
                ),
                value: format!("{n_head} / {n_head_kv}"),
                why: "query heads must be a non-zero multiple of KV heads",
            });
        }
        let head_dim = match m.opt(&key("attention.key_length"), |m, k| m.u32(k))? {
            Some(h) => h,
            None => n_embd / n_head,
        };
        let head_dim_v = m
            .opt(&key("attention.value_length"), |m, k| m.u32(k))?
            .unwrap_or(head_dim);
        let n_vocab = vocab_size(g, p)?;
        let tied_embeddings = g.tensor("output.weight").is_none();
        let neox = matches!(
            arch,
            Arch::Qwen2
                | Arch::Qwen3
                | Arch::Qwen35
                | Arch::Qwen3Moe
                | Arch::Qwen35Moe
                | Arch::Gemma3
                | Arch::Gemma4
                | Arch::Dflash
                | Arch::DsparkLegacy
        );
        let scale = m
            .opt(&key("rope.scaling.factor"), |m, k| m.f32(k))?
            .unwrap_or(1.0);
        let n_ctx_train = m
            .opt(&key("context_length"), |m, k| m.u32(k))?
            .unwrap_or(4096);
        let rope = rope_scaling(g, p, n_ctx_train)?;
        let block_count = m.u32(&key("block_count"))?;
        let hybrid = match arch {
            Arch::Qwen35 | Arch::Qwen35Moe => Some(HybridHparams::from_gguf(g, p, block_count)?),
            _ => None,
        };
        let n_layer = hybrid
            .as_ref()
            .map_or(block_count, |h| h.kinds.len() as u32);
        // MoE models may omit feed_forward_length (llama.cpp reads it as optional).
        let moe_arch = matches!(arch, Arch::Qwen3Moe | Arch::Qwen35Moe);
        let n_ff = match moe_arch {
            _ if arch == Arch::Gemma4 => {
                super::gemma4::max_per_layer(g, &key("feed_forward_length"))?.unwrap_or(0)
            }
            true => m
                .opt(&key("feed_forward_length"), |m, k| m.u32(k))?
                .unwrap_or(0),
            false => m.u32(&key("feed_forward_length"))?,
        };
        let moe = match moe_arch {
            true => Some(MoeHparams::from_gguf(g, p, n_ff, arch == Arch::Qwen35Moe)?),
            false => None,
        };
        let gemma3 = match arch {
            Arch::Gemma3 => Some(Gemma3Hparams::from_gguf(
                g, p, n_layer, n_embd, n_head, head_dim,
            )?),
            _ => None,
        };
        let gemma4 = match arch {
            Arch::Gemma4 => Some(Gemma4Hparams::from_gguf(g, p, n_layer, n_head, head_dim)?),
            _ => None,
        };
        let hp = Hparams {
            arch,
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v,
            n_ff,
            n_vocab,
            n_ctx_train,
            rope_base: m
                .opt(&key("rope.freq_base"), |m, k| m.f32(k))?
                .unwrap_or(10000.0),
            rope_freq_scale: if scale > 0.0 && rope.kind != RopeScaling::None {
                1.0 / scale
            } else {
                1.0
            },
            n_rot: m
                .opt(&key("rope.dimension_count"), |m, k| m.u32(k))?
                .unwrap_or(head_dim),
            rope_neox: neox,
            rope_scaling: rope.kind,
            rope_ext_factor: rope.ext_factor,
            rope_n_ctx_orig: rope.n_ctx_orig,
            rope_attn_factor: rope.attn_factor,
            rope_beta_fast: rope.beta_fast,
            rope_beta_slow: rope.beta_slow,
            rms_eps: m.f32(&key("attention.layer_norm_rms_epsilon"))?,
            // qwen35's attention layers always norm q and k (its layer 0 is usually DeltaNet).
            qk_norm: matches!(arch, Arch::Qwen35 | Arch::Qwen35Moe)
                || g.tensor("blk.0.attn_q_norm.weight").is_some(),
            qkv_bias: g.tensor("blk.0.attn_q.bias").is_some(),
            tied_embeddings,
            hybrid,
            moe,
            gemma3,
            gemma4,
        };
        if hp.n_layer == 0 || hp.n_embd == 0 || hp.head_dim == 0 || hp.n_rot > hp.head_dim {
            return Err(HparamsError::Invalid {
                what: format!("{p} shape"),
                value: format!(
                    "layers {} d {} head_dim {} n_rot {}",
                    hp.n_layer, hp.n_embd, hp.head_dim, hp.n_rot
                ),
                why: "layers, hidden size and head size must be non-zero, n_rot <= head_dim",
            });
        }
        if hp.hybrid.is_some() {
            check_rope_sections(g, p, hp.n_rot)?;
        }
        super::shapes::check_widths(&hp)?;
        Ok(hp)
    }

    /// The mixer of layer `il` (attention for every layer of a dense model).
    pub fn layer_kind(&self, il: u32) -> LayerKind {
        self.hybrid
            .as_ref()
            .and_then(|h| h.kinds.get(il as usize).copied())
            .unwrap_or(LayerKind::Attention)
    }

    /// Layers with a KV cache (all of a dense model's; the attention layers of a hybrid; the
    /// layers of a Gemma 4 that do not read an earlier layer's cache).
    pub fn kv_layers(&self) -> Vec<u32> {
        (0..self.n_layer)
            .filter(|&il| self.layer_kind(il) == LayerKind::Attention)
            .filter(|&il| self.gemma4.as_ref().is_none_or(|g| g.has_kv(il)))
            .collect()
    }

    /// Layer `il`'s KV heads and K and V head sizes: Gemma 4's differ by layer kind, every
    /// other model's are `n_head_kv`, `head_dim`, `head_dim_v`.
    pub fn layer_kv_shape(&self, il: u32) -> [u32; 3] {
        match &self.gemma4 {
            Some(g) => [g.n_head_kv(il), g.head_dim(il), g.head_dim(il)],
            None => [self.n_head_kv, self.head_dim, self.head_dim_v],
        }
    }

    /// The window of layer `il` where it attends through one (Gemma 3 and 4 sliding layers).
    pub fn sliding_window_of(&self, il: u32) -> Option<u32> {
        if let Some(g) = self.gemma3.as_ref().filter(|g| g.is_sliding(il)) {
            return Some(g.sliding_window);
        }
        let g = self.gemma4.as_ref().filter(|g| g.is_sliding(il))?;
        (g.sliding_window > 0).then_some(g.sliding_window)
    }

    /// Gated attention (qwen35): `attn_q` rows interleave q and a sigmoid output gate per head.
    pub fn attn_gated(&self) -> bool {
        self.hybrid.is_some()
    }
}

/// The RoPE scaling keys of a model, read as llama.cpp reads them.
struct RopeKeys {
    kind: RopeScaling,
    ext_factor: f32,
    n_ctx_orig: u32,
    attn_factor: f32,
    beta_fast: f32,
    beta_slow: f32,
}

/// Reads `{p}.rope.scaling.*` (llama.cpp: `llama_model::load_hparams` for the keys,
/// `llama_context`'s constructor for the defaults): an unknown type (`longrope`, …) is refused
/// with [`HparamsError::RopeScaling`], every number is checked.
fn rope_scaling(g: &Gguf, p: &str, n_ctx_train: u32) -> Result<RopeKeys, HparamsError> {
    let m = &g.metadata;
    let key = |k: &str| format!("{p}.rope.scaling.{k}");
    let f32_or = |k: &str, default: f32| -> Result<f32, HparamsError> {
        Ok(m.opt(&key(k), |m, k| m.f32(k))?.unwrap_or(default))
    };
    let type_key = key("type");
    let kind = match m.opt(&type_key, |m, k| m.str(k))? {
        None | Some("linear") => RopeScaling::Linear,
        Some("none") => RopeScaling::None,
        Some("yarn") => RopeScaling::Yarn,
        Some(other) => {
            return Err(HparamsError::RopeScaling {
                key: type_key,
                value: other.to_string(),
            })
        }
    };
    let default_ext = if kind == RopeScaling::Yarn { 1.0 } else { 0.0 };
    // llama.cpp: a negative ext_factor means "not set".
    let ext_factor = match f32_or("yarn_ext_factor", -1.0)? {
        e if e < 0.0 => default_ext,
        e => e,
    };
    let n_ctx_orig = m
        .opt(&key("original_context_length"), |m, k| m.u32(k))?
        .unwrap_or(n_ctx_train);
    let mut attn_factor = f32_or("attn_factor", 1.0)?;
    if ext_factor == 0.0 {
        attn_factor *= f32_or("yarn_attn_factor", 1.0)?;
    }
    let keys = RopeKeys {
        kind,
        ext_factor,
        n_ctx_orig,
        attn_factor,
        beta_fast: f32_or("yarn_beta_fast", 32.0)?,
        beta_slow: f32_or("yarn_beta_slow", 1.0)?,
    };
    let invalid = |k: &str, value: String, why| HparamsError::Invalid {
        what: key(k),
        value,
        why,
    };
    for (k, v) in [
        ("yarn_ext_factor", keys.ext_factor),
        ("attn_factor", keys.attn_factor),
        ("yarn_beta_fast", keys.beta_fast),
        ("yarn_beta_slow", keys.beta_slow),
    ] {
        if !v.is_finite() || (k != "yarn_ext_factor" && v <= 0.0) {
            return Err(invalid(
                k,
                v.to_string(),
                "must be finite (and > 0 but for ext_factor)",
            ));
        }
    }
    if ext_factor != 0.0 {
        if n_ctx_orig == 0 {
            return Err(invalid(
                "original_context_length",
                "0".into(),
                "YaRN needs the original context",
            ));
        }
        // llama.cpp folds it into the attention factor for DeepSeek-style YaRN; not done here.
        if let Some(mul) = m.opt(&key("yarn_log_multiplier"), |m, k| m.f32(k))? {
            if mul != 0.0 {
                return Err(invalid(
                    "yarn_log_multiplier",
                    mul.to_string(),
                    "not supported (a DeepSeek-style YaRN attention factor)",
                ));
            }
        }
    }
    Ok(keys)
}

/// Vocabulary size: the tokenizer's token count, else `{arch}.vocab_size`, else the embedding
/// rows (shape-only and drafter files may lack a tokenizer).
fn vocab_size(g: &Gguf, p: &str) -> Result<u32, HparamsError> {
    let m = &g.metadata;
    if let Ok(tokens) = m.str_array("tokenizer.ggml.tokens") {
        return u32::try_from(tokens.len()).map_err(|_| HparamsError::Invalid {
            what: "tokenizer.ggml.tokens".into(),
            value: tokens.len().to_string(),
            why: "too many tokens",
        });
    }
    if let Some(v) = m.opt(&format!("{p}.vocab_size"), |m, k| m.u32(k))? {
        return Ok(v);
    }
    // A drafter without its own embeddings: the Markov head has one row per token.
    let rows = [
        "token_embd.weight",
        "output.weight",
        "markov_w1.weight",
        "dspark.markov_head_a.weight",
    ]
    .iter()
    .find_map(|n| g.tensor(n))
    .and_then(|t| t.shape.get(1).copied());
    match rows {
        Some(r) => u32::try_from(r).map_err(|_| HparamsError::Invalid {
            what: "embedding rows".into(),
            value: r.to_string(),
            why: "too many rows",
        }),
        None => Err(GgufError::MissingKey {
            key: format!("{p}.vocab_size"),
        }
        .into()),
    }
}

/// Read an integer array (any integer element type) as i64s.
pub fn int_array(g: &Gguf, key: &str) -> Result<Vec<i64>, GgufError> {
    use crate::gguf::MetaArray as A;
    let wrong = |v: &MetaValue| GgufError::WrongType {
        key: key.to_string(),
        expected: "array of integers",
        found: v.type_name(),
    };
    let v = g.metadata.get(key).ok_or_else(|| GgufError::MissingKey {
        key: key.to_string(),
    })?;
    let MetaValue::Array(a) = v else {
        return Err(wrong(v));
    };
    Ok(match a {
        A::I32(x) => x.iter().map(|&v| i64::from(v)).collect(),
        A::U32(x) => x.iter().map(|&v| i64::from(v)).collect(),
        A::I64(x) => x.clone(),
        A::U64(x) => x.iter().map(|&v| v as i64).collect(),
        A::I16(x) => x.iter().map(|&v| i64::from(v)).collect(),
        A::U16(x) => x.iter().map(|&v| i64::from(v)).collect(),
        A::I8(x) => x.iter().map(|&v| i64::from(v)).collect(),
        A::U8(x) => x.iter().map(|&v| i64::from(v)).collect(),
        _ => return Err(wrong(v)),
    })
}
