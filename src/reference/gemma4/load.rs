//! Gemma 4's hyperparameters as the oracle reads them (llama.cpp's keys and defaults) and every
//! weight dequantized to f32 (matrices `[N, K]`, row-major).

use super::moe::Gemma4Experts;
use super::Gemma4Cache;
use crate::gguf::{Gguf, GgufError, GgufFile, MetaArray, MetaValue};
use crate::reference::forward::{ForwardError, Tensors};

/// Gemma 4's hyperparameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4Ref {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_vocab: usize,
    pub eps: f32,
    pub window: usize,
    /// Per layer: sliding.
    pub sliding: Vec<bool>,
    /// Per layer: KV heads.
    pub n_head_kv: Vec<usize>,
    /// Per layer: dense FFN width.
    pub n_ff: Vec<usize>,
    /// Head size of sliding / global layers.
    pub head_swa: usize,
    pub head_full: usize,
    /// Rotated dims of sliding / global layers.
    pub rot_swa: usize,
    pub rot_full: usize,
    pub rope_base: f32,
    pub rope_base_swa: f32,
    /// Layers with their own K/V (`n_layer − shared_kv_layers`).
    pub n_kv: usize,
    /// Per-layer embedding width (0: none).
    pub n_per_layer: usize,
    /// Experts used per token (MoE layers).
    pub n_expert_used: usize,
    /// 0: off.
    pub softcap: f32,
}

fn key_u32(g: &Gguf, k: &str) -> Result<Option<u32>, GgufError> {
    g.metadata.opt(&format!("gemma4.{k}"), |m, k| m.u32(k))
}

fn key_f32(g: &Gguf, k: &str) -> Result<Option<f32>, GgufError> {
    g.metadata.opt(&format!("gemma4.{k}"), |m, k| m.f32(k))
}

fn need(g: &Gguf, k: &str) -> Result<usize, ForwardError> {
    key_u32(g, k)?.map(|v| v as usize).ok_or_else(|| {
        ForwardError::Gguf(GgufError::MissingKey {
            key: format!("gemma4.{k}"),
        })
    })
}

/// `gemma4.{k}`: a number for every layer or one per layer; `default` where absent.
fn per_layer(g: &Gguf, k: &str, n: usize, default: usize) -> Result<Vec<usize>, ForwardError> {
    let key = format!("gemma4.{k}");
    let v: Vec<usize> = match g.metadata.get(&key) {
        None => vec![default; n],
        Some(MetaValue::Array(MetaArray::U32(a))) => a.iter().map(|&x| x as usize).collect(),
        Some(MetaValue::Array(MetaArray::I32(a))) => a.iter().map(|&x| x.max(0) as usize).collect(),
        Some(_) => vec![g.metadata.u32(&key)? as usize; n],
    };
    if v.len() != n {
        return Err(ForwardError::Unsupported {
            what: "per-layer array length",
            value: format!("{key}: {}", v.len()),
        });
    }
    Ok(v)
}

impl Gemma4Ref {
    /// Reads the `gemma4.*` keys with llama.cpp's defaults.
    pub fn from_gguf(g: &Gguf) -> Result<Gemma4Ref, ForwardError> {
        let arch = g.metadata.str("general.architecture")?;
        if arch != "gemma4" {
            return Err(ForwardError::Unsupported {
                what: "architecture for the gemma4 reference forward",
                value: arch.to_string(),
            });
        }
        let n_layer = need(g, "block_count")?;
        let n_embd = need(g, "embedding_length")?;
        let n_head = need(g, "attention.head_count")?;
        let head_full = need(g, "attention.key_length")?;
        let rot_full = key_u32(g, "rope.dimension_count")?.map_or(head_full, |v| v as usize);
        let sliding = match g.metadata.get("gemma4.attention.sliding_window_pattern") {
            Some(MetaValue::Array(MetaArray::Bool(v))) if v.len() == n_layer => v.clone(),
            _ => {
                return Err(ForwardError::Unsupported {
                    what: "gemma4.attention.sliding_window_pattern (a bool per layer)",
                    value: "absent or malformed".into(),
                })
            }
        };
        let n_vocab = g
            .tensor("token_embd.weight")
            .and_then(|t| t.shape.get(1).copied())
            .ok_or_else(|| ForwardError::MissingTensor {
                name: "token_embd.weight".into(),
            })? as usize;
        let shared = key_u32(g, "attention.shared_kv_layers")?.unwrap_or(0) as usize;
        Ok(Gemma4Ref {
            n_layer,
            n_embd,
            n_head,
            n_vocab,
            eps: key_f32(g, "attention.layer_norm_rms_epsilon")?.ok_or_else(|| {
                ForwardError::Gguf(GgufError::MissingKey {
                    key: "gemma4.attention.layer_norm_rms_epsilon".into(),
                })
            })?,
            window: need(g, "attention.sliding_window")?,
            sliding,
            n_head_kv: per_layer(g, "attention.head_count_kv", n_layer, n_head)?,
            n_ff: per_layer(g, "feed_forward_length", n_layer, 0)?,
            head_swa: need(g, "attention.key_length_swa")?,
            head_full,
            rot_swa: key_u32(g, "rope.dimension_count_swa")?.map_or(rot_full, |v| v as usize),
            rot_full,
            rope_base: key_f32(g, "rope.freq_base")?.unwrap_or(10000.0),
            rope_base_swa: key_f32(g, "rope.freq_base_swa")?.unwrap_or(10000.0),
            n_kv: n_layer.saturating_sub(shared),
            n_per_layer: need(g, "embedding_length_per_layer_input")?,
            n_expert_used: key_u32(g, "expert_used_count")?.unwrap_or(0) as usize,
            softcap: key_f32(g, "final_logit_softcapping")?.unwrap_or(30.0),
        })
    }

    /// Head size of layer `il`.
    pub fn head_dim(&self, il: usize) -> usize {
        if self.sliding[il] {
            self.head_swa
        } else {
            self.head_full
        }
    }

    /// The layer whose cache layer `il` reads (llama.cpp's `reuse`: n_kv − 2 sliding, n_kv − 1
    /// global).
    pub fn kv_source(&self, il: usize) -> usize {
        match (il < self.n_kv, self.sliding[il]) {
            (true, _) => il,
            (false, true) => self.n_kv.saturating_sub(2),
            (false, false) => self.n_kv.saturating_sub(1),
        }
    }
}

/// One layer's weights (matrices `[N, K]`).
#[derive(Debug, Clone)]
pub struct Gemma4Layer {
    pub attn_norm: Vec<f32>,
    pub wq: Vec<f32>,
    pub q_norm: Vec<f32>,
    /// Layers with their own K/V: `attn_k`, `attn_k_norm`, `attn_v` (absent: V is K's projection).
    pub wk: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wv: Option<Vec<f32>>,
    pub wo: Vec<f32>,
    pub post_attn_norm: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    pub down: Vec<f32>,
    pub post_ffw_norm: Vec<f32>,
    pub experts: Option<Gemma4Experts>,
    /// Per-layer embeddings: `inp_gate` `[P, d]`, `proj` `[d, P]`, `post_norm` `[d]`.
    pub ple: Option<[Vec<f32>; 3]>,
    pub out_scale: Option<f32>,
}

/// A Gemma 4 model ready to run on the CPU.
#[derive(Debug, Clone)]
pub struct RefGemma4Model {
    pub hp: Gemma4Ref,
    /// `[n_vocab, n_embd]`
    pub token_embd: Vec<f32>,
    /// `None`: tied to `token_embd`.
    pub output: Option<Vec<f32>>,
    pub output_norm: Vec<f32>,
    /// `rope_freqs` `[head_full / 2]`: the global layers' frequency divisors.
    pub rope_freqs: Option<Vec<f32>>,
    /// `per_layer_token_embd` `[n_vocab, L·P]`, `per_layer_model_proj` `[L·P, d]`,
    /// `per_layer_proj_norm` `[P]`.
    pub ple: Option<[Vec<f32>; 3]>,
    pub layers: Vec<Gemma4Layer>,
}

impl RefGemma4Model {
    /// Read the hyperparameters and dequantize every weight of a mapped GGUF file.
    pub fn load(file: &GgufFile) -> Result<RefGemma4Model, ForwardError> {
        RefGemma4Model::from_gguf(&file.gguf, file.bytes())
    }

    /// As [`Self::load`], from a parsed file and its bytes.
    pub fn from_gguf(g: &Gguf, bytes: &[u8]) -> Result<RefGemma4Model, ForwardError> {
        let hp = Gemma4Ref::from_gguf(g)?;
        let t = Tensors { g, bytes };
        let (d, pl) = (hp.n_embd, hp.n_per_layer);
        let layers = (0..hp.n_layer)
            .map(|il| load_layer(&t, &hp, il))
            .collect::<Result<Vec<_>, _>>()?;
        let ple = if pl > 0 {
            let all = pl * hp.n_layer;
            Some([
                t.get("per_layer_token_embd.weight", all, hp.n_vocab)?,
                t.get("per_layer_model_proj.weight", d, all)?,
                t.get("per_layer_proj_norm.weight", pl, 1)?,
            ])
        } else {
            None
        };
        Ok(RefGemma4Model {
            token_embd: t.get("token_embd.weight", d, hp.n_vocab)?,
            output: t.opt("output.weight", d, hp.n_vocab)?,
            output_norm: t.get("output_norm.weight", d, 1)?,
            rope_freqs: t.opt("rope_freqs.weight", hp.head_full / 2, 1)?,
            ple,
            layers,
            hp,
        })
    }

    /// An empty cache: one K and V per layer with its own, none for shared layers.
    pub fn new_cache(&self) -> Gemma4Cache {
        let hp = &self.hp;
        let width: Vec<usize> = (0..hp.n_layer)
            .map(|il| {
                if il < hp.n_kv {
                    hp.n_head_kv[il] * hp.head_dim(il)
                } else {
                    0
                }
            })
            .collect();
        Gemma4Cache {
            k: vec![Vec::new(); hp.n_layer],
            v: vec![Vec::new(); hp.n_layer],
            width,
            len: 0,
        }
    }

    /// The LM head `[n_vocab, n_embd]`.
    pub fn lm_head(&self) -> &[f32] {
        self.output.as_deref().unwrap_or(&self.token_embd)
    }
}

/// Layer `il`'s weights.
fn load_layer(t: &Tensors<'_>, hp: &Gemma4Ref, il: usize) -> Result<Gemma4Layer, ForwardError> {
    let n = |s: &str| format!("blk.{il}.{s}.weight");
    let (d, hd, ff) = (hp.n_embd, hp.head_dim(il), hp.n_ff[il]);
    let (q, kv) = (hp.n_head * hd, hp.n_head_kv[il] * hd);
    let own = il < hp.n_kv;
    let opt_if = |name: &str, k, n| if own { t.opt(name, k, n) } else { Ok(None) };
    let ple = if hp.n_per_layer > 0 {
        let pl = hp.n_per_layer;
        Some([
            t.get(&n("inp_gate"), d, pl)?,
            t.get(&n("proj"), pl, d)?,
            t.get(&n("post_norm"), d, 1)?,
        ])
    } else {
        None
    };
    let experts = match t.g.tensor(&n("ffn_gate_inp")) {
        Some(_) => Some(Gemma4Experts::load(t, il, d, hp.n_expert_used)?),
        None => None,
    };
    let wk = opt_if(&n("attn_k"), d, kv)?;
    if own && wk.is_none() {
        return Err(ForwardError::MissingTensor { name: n("attn_k") });
    }
    Ok(Gemma4Layer {
        attn_norm: t.get(&n("attn_norm"), d, 1)?,
        wq: t.get(&n("attn_q"), d, q)?,
        q_norm: t.get(&n("attn_q_norm"), hd, 1)?,
        wk,
        k_norm: opt_if(&n("attn_k_norm"), hd, 1)?,
        wv: opt_if(&n("attn_v"), d, kv)?,
        wo: t.get(&n("attn_output"), q, d)?,
        post_attn_norm: t.get(&n("post_attention_norm"), d, 1)?,
        ffn_norm: t.get(&n("ffn_norm"), d, 1)?,
        gate: t.get(&n("ffn_gate"), d, ff)?,
        up: t.get(&n("ffn_up"), d, ff)?,
        down: t.get(&n("ffn_down"), ff, d)?,
        post_ffw_norm: t.get(&n("post_ffw_norm"), d, 1)?,
        experts,
        ple,
        out_scale: t
            .opt(&n("layer_output_scale"), 1, 1)?
            .and_then(|v| v.first().copied()),
    })
}
