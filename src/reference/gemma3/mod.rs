//! The whole forward pass of `gemma3` (Gemma 3) as plain straight-line Rust, read from the GGUF
//! by the oracle itself: the oracle the GPU Gemma 3 forward is tested against. Written from
//! llama.cpp b11434's graph (`src/models/gemma3.cpp`, hparams in `src/llama-model.cpp` and
//! `src/llama-hparams.{h,cpp}`; <https://github.com/ggml-org/llama.cpp/blob/b11434/src/models/gemma3.cpp>).
//!
//! Per layer `il` (sliding iff `il % n < n − 1`, n = `attention.sliding_window_pattern`,
//! default 6, or the per-layer bool array; no `attention.sliding_window`: all global):
//! ```text
//! x    = token_embd[tok] · √d                                         (before layer 0)
//! cur  = rms_norm(x) · attn_norm
//! q, k = rms_norm_per_head(cur·Wqᵀ) · q_norm, … (cur·Wkᵀ) · k_norm;   v = cur·Wvᵀ
//! q, k = NEOX RoPE: sliding (base rope.freq_base_swa, default 10000, scale 1)
//!                   global  (base rope.freq_base, scale 1 / rope.scaling.factor)
//! o    = softmax(q·Kᵀ · s + mask) · V   s = 1/√key_length (1/√(d / n_head) at 62 layers)
//!        mask: causal; sliding layers also hide keys with pos_q − pos_k ≥ window
//! h    = x + rms_norm(o·Woᵀ) · post_attention_norm
//! u    = rms_norm(h) · ffn_norm
//! x    = h + rms_norm((gelu_tanh(u·Wgᵀ) ⊙ u·Wuᵀ)·Wdᵀ) · post_ffw_norm
//! ```
//! then `output_norm`, the LM head (`output`, else `token_embd`), and `cap · tanh(logits / cap)`
//! where `final_logit_softcapping` is set. Numerics as the dense oracle
//! ([`crate::reference::forward`]): f32 weights, f64 sums rounded once, attention in f64, GELU
//! in f32 from the tanh formula (llama.cpp's CPU backend reads it from an f16 table, which is
//! what separates the two by ~1e-3 per activation).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod pass;

use crate::gguf::{Gguf, GgufError, GgufFile, MetaArray, MetaValue};
use crate::reference::forward::{ForwardError, RefKvCache, Tensors};

/// Gemma 3's hyperparameters, as the oracle reads them.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma3Ref {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_vocab: usize,
    pub eps: f32,
    /// 0: no sliding layers.
    pub window: usize,
    /// Per layer.
    pub sliding: Vec<bool>,
    pub rope_base: f32,
    pub rope_scale: f32,
    pub rope_base_swa: f32,
    pub attn_scale: f32,
    /// 0: off.
    pub softcap: f32,
}

/// One layer's weights (matrices `[N, K]`).
#[derive(Debug, Clone)]
pub struct Gemma3Layer {
    pub attn_norm: Vec<f32>,
    pub wq: Vec<f32>,
    pub wk: Vec<f32>,
    pub wv: Vec<f32>,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub wo: Vec<f32>,
    pub post_attn_norm: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    pub down: Vec<f32>,
    pub post_ffw_norm: Vec<f32>,
}

/// A Gemma 3 model ready to run on the CPU.
#[derive(Debug, Clone)]
pub struct RefGemma3Model {
    pub hp: Gemma3Ref,
    /// `[n_vocab, n_embd]`
    pub token_embd: Vec<f32>,
    /// `None`: tied to `token_embd`.
    pub output: Option<Vec<f32>>,
    pub output_norm: Vec<f32>,
    pub layers: Vec<Gemma3Layer>,
}

fn key_u32(g: &Gguf, k: &str) -> Result<Option<u32>, GgufError> {
    g.metadata.opt(&format!("gemma3.{k}"), |m, k| m.u32(k))
}

fn key_f32(g: &Gguf, k: &str) -> Result<Option<f32>, GgufError> {
    g.metadata.opt(&format!("gemma3.{k}"), |m, k| m.f32(k))
}

impl Gemma3Ref {
    /// Reads the `gemma3.*` keys with llama.cpp's defaults.
    pub fn from_gguf(g: &Gguf) -> Result<Gemma3Ref, ForwardError> {
        let arch = g.metadata.str("general.architecture")?;
        if arch != "gemma3" {
            return Err(ForwardError::Unsupported {
                what: "architecture for the gemma3 reference forward",
                value: arch.to_string(),
            });
        }
        let need = |k: &str| -> Result<u32, ForwardError> {
            key_u32(g, k)?.ok_or_else(|| {
                ForwardError::Gguf(GgufError::MissingKey {
                    key: format!("gemma3.{k}"),
                })
            })
        };
        let n_layer = need("block_count")? as usize;
        let n_embd = need("embedding_length")? as usize;
        let n_head = need("attention.head_count")? as usize;
        let n_head_kv = key_u32(g, "attention.head_count_kv")?.map_or(n_head, |v| v as usize);
        let head_dim =
            key_u32(g, "attention.key_length")?.map_or(n_embd / n_head.max(1), |v| v as usize);
        let n_vocab = g
            .tensor("token_embd.weight")
            .and_then(|t| t.shape.get(1).copied())
            .ok_or_else(|| ForwardError::MissingTensor {
                name: "token_embd.weight".into(),
            })? as usize;
        let window = key_u32(g, "attention.sliding_window")?.unwrap_or(0) as usize;
        let pattern_key = "gemma3.attention.sliding_window_pattern";
        let sliding: Vec<bool> = if window == 0 {
            vec![false; n_layer]
        } else if let Some(MetaValue::Array(MetaArray::Bool(v))) = g.metadata.get(pattern_key) {
            v.clone()
        } else {
            let n = key_u32(g, "attention.sliding_window_pattern")?.unwrap_or(6) as usize;
            (0..n_layer).map(|il| n == 0 || il % n < n - 1).collect()
        };
        if sliding.len() != n_layer {
            return Err(ForwardError::Unsupported {
                what: "sliding_window_pattern length",
                value: sliding.len().to_string(),
            });
        }
        let scaling = g
            .metadata
            .opt("gemma3.rope.scaling.type", |m, k| m.str(k))?
            .unwrap_or("linear");
        let factor = key_f32(g, "rope.scaling.factor")?.unwrap_or(1.0);
        let rope_scale = match scaling {
            "linear" if factor > 0.0 => 1.0 / factor,
            "linear" | "none" => 1.0,
            other => {
                return Err(ForwardError::Unsupported {
                    what: "rope scaling type for the gemma3 oracle",
                    value: other.to_string(),
                })
            }
        };
        let attn_scale = if n_layer == 62 {
            1.0 / ((n_embd / n_head) as f32).sqrt()
        } else {
            1.0 / (head_dim as f32).sqrt()
        };
        Ok(Gemma3Ref {
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            n_ff: need("feed_forward_length")? as usize,
            n_vocab,
            eps: key_f32(g, "attention.layer_norm_rms_epsilon")?.ok_or_else(|| {
                ForwardError::Gguf(GgufError::MissingKey {
                    key: "gemma3.attention.layer_norm_rms_epsilon".into(),
                })
            })?,
            window,
            sliding,
            rope_base: key_f32(g, "rope.freq_base")?.unwrap_or(10000.0),
            rope_scale,
            rope_base_swa: key_f32(g, "rope.freq_base_swa")?.unwrap_or(10000.0),
            attn_scale,
            softcap: key_f32(g, "final_logit_softcapping")?.unwrap_or(0.0),
        })
    }
}

impl RefGemma3Model {
    /// Read the hyperparameters and dequantize every weight of a mapped GGUF file.
    pub fn load(file: &GgufFile) -> Result<RefGemma3Model, ForwardError> {
        RefGemma3Model::from_gguf(&file.gguf, file.bytes())
    }

    /// As [`Self::load`], from a parsed file and its bytes.
    pub fn from_gguf(g: &Gguf, bytes: &[u8]) -> Result<RefGemma3Model, ForwardError> {
        let hp = Gemma3Ref::from_gguf(g)?;
        let t = Tensors { g, bytes };
        let d = hp.n_embd;
        let q = hp.n_head * hp.head_dim;
        let kv = hp.n_head_kv * hp.head_dim;
        let mut layers = Vec::with_capacity(hp.n_layer);
        for il in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}.weight");
            layers.push(Gemma3Layer {
                attn_norm: t.get(&n("attn_norm"), d, 1)?,
                wq: t.get(&n("attn_q"), d, q)?,
                wk: t.get(&n("attn_k"), d, kv)?,
                wv: t.get(&n("attn_v"), d, kv)?,
                q_norm: t.get(&n("attn_q_norm"), hp.head_dim, 1)?,
                k_norm: t.get(&n("attn_k_norm"), hp.head_dim, 1)?,
                wo: t.get(&n("attn_output"), q, d)?,
                post_attn_norm: t.get(&n("post_attention_norm"), d, 1)?,
                ffn_norm: t.get(&n("ffn_norm"), d, 1)?,
                gate: t.get(&n("ffn_gate"), d, hp.n_ff)?,
                up: t.get(&n("ffn_up"), d, hp.n_ff)?,
                down: t.get(&n("ffn_down"), hp.n_ff, d)?,
                post_ffw_norm: t.get(&n("post_ffw_norm"), d, 1)?,
            });
        }
        Ok(RefGemma3Model {
            token_embd: t.get("token_embd.weight", d, hp.n_vocab)?,
            output: t.opt("output.weight", d, hp.n_vocab)?,
            output_norm: t.get("output_norm.weight", d, 1)?,
            layers,
            hp,
        })
    }

    /// An empty (full-context) KV cache: F32 exact, F16, Q8_0 or Q4_0.
    pub fn new_cache(&self, kv_type: crate::gguf::GgmlType) -> Result<RefKvCache, ForwardError> {
        let kv = self.hp.n_head_kv * self.hp.head_dim;
        RefKvCache::new(self.hp.n_layer, kv, kv, kv_type)
    }

    /// The LM head `[n_vocab, n_embd]`.
    pub fn lm_head(&self) -> &[f32] {
        self.output.as_deref().unwrap_or(&self.token_embd)
    }
}
