//! Weights of a llama / qwen2 / qwen3 model, dequantized to f32 once at load.
//!
//! A matrix is GGUF `[ne0 = K, ne1 = N]` (N rows of K), kept as f32 `[N, K]`. Every tensor's
//! shape is checked against the hyperparameters before its data is read, so a bad file is a
//! [`ForwardError`], never a panic later in the forward pass.

use super::ForwardError;
use crate::gguf::Gguf;
use crate::reference::matmul::dequantize_matrix;
use crate::reference::meta::{RefArch, RefHparams, RefMoe};

use super::moe::MoeWeights;

/// One transformer block's weights (shapes as stored, `[N, K]` for matrices).
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// `[n_embd]`
    pub attn_norm: Vec<f32>,
    /// `[n_head·head_dim, n_embd]`, `[n_head_kv·head_dim, n_embd]`, `[n_head_kv·head_dim_v, n_embd]`
    pub wq: Vec<f32>,
    pub wk: Vec<f32>,
    pub wv: Vec<f32>,
    /// qwen2: `[n_head·head_dim]`, `[n_head_kv·head_dim]`, `[n_head_kv·head_dim_v]`
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    /// qwen3: per-head RMSNorm weights `[head_dim]`
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    /// `[n_embd, n_head·head_dim_v]`
    pub wo: Vec<f32>,
    /// `[n_embd]`
    pub ffn_norm: Vec<f32>,
    /// `[n_ff, n_embd]`, `[n_ff, n_embd]`, `[n_embd, n_ff]` (empty in a MoE layer)
    pub ffn_gate: Vec<f32>,
    pub ffn_up: Vec<f32>,
    pub ffn_down: Vec<f32>,
    /// qwen3moe: the router and experts that replace the dense FFN.
    pub moe: Option<MoeWeights>,
}

/// The whole model's weights.
#[derive(Debug, Clone)]
pub struct Weights {
    /// `[n_vocab, n_embd]`
    pub token_embd: Vec<f32>,
    pub layers: Vec<LayerWeights>,
    /// `[n_embd]`
    pub output_norm: Vec<f32>,
    /// `[n_vocab, n_embd]`; `None` when tied: the LM head is `token_embd`.
    pub output: Option<Vec<f32>>,
    /// llama 3.x `rope_freqs.weight` `[n_rot / 2]`: frequency divisors.
    pub rope_freqs: Option<Vec<f32>>,
}

impl Weights {
    /// The LM head `[n_vocab, n_embd]`.
    pub fn lm_head(&self) -> &[f32] {
        self.output.as_deref().unwrap_or(&self.token_embd)
    }

    /// Dequantize every tensor the forward pass reads. `bytes` is the whole file `g` was parsed
    /// from.
    pub fn load(g: &Gguf, bytes: &[u8], hp: &RefHparams) -> Result<Weights, ForwardError> {
        let dense = matches!(hp.arch, RefArch::Llama | RefArch::Qwen2 | RefArch::Qwen3);
        if !dense && hp.arch != RefArch::Qwen3Moe {
            return Err(ForwardError::Unsupported {
                what: "architecture for the dense reference forward (qwen35: reference::hybrid)",
                value: hp.arch.name().to_string(),
            });
        }
        let t = Tensors { g, bytes };
        let n_embd = hp.n_embd as usize;
        let (q_dim, k_dim, v_dim) = (
            hp.q_dim() as usize,
            hp.k_dim() as usize,
            hp.v_dim() as usize,
        );
        let o_dim = (hp.n_head * hp.head_dim_v) as usize;
        let (n_ff, n_vocab) = (hp.n_ff as usize, hp.n_vocab as usize);
        let head_dim = hp.head_dim as usize;
        let moe = match dense {
            true => None,
            false => Some(RefMoe::from_gguf(g, hp)?),
        };
        let mut layers = Vec::with_capacity(hp.n_layer as usize);
        for il in 0..hp.n_layer {
            let name = |s: &str| format!("blk.{il}.{s}");
            let (ffn_gate, ffn_up, ffn_down, moe) = match &moe {
                Some(m) => {
                    let w = MoeWeights::load(&t, il as usize, n_embd, m)?;
                    (Vec::new(), Vec::new(), Vec::new(), Some(w))
                }
                None => (
                    t.get(&name("ffn_gate.weight"), n_embd, n_ff)?,
                    t.get(&name("ffn_up.weight"), n_embd, n_ff)?,
                    t.get(&name("ffn_down.weight"), n_ff, n_embd)?,
                    None,
                ),
            };
            layers.push(LayerWeights {
                attn_norm: t.get(&name("attn_norm.weight"), n_embd, 1)?,
                wq: t.get(&name("attn_q.weight"), n_embd, q_dim)?,
                wk: t.get(&name("attn_k.weight"), n_embd, k_dim)?,
                wv: t.get(&name("attn_v.weight"), n_embd, v_dim)?,
                bq: t.opt(&name("attn_q.bias"), q_dim, 1)?,
                bk: t.opt(&name("attn_k.bias"), k_dim, 1)?,
                bv: t.opt(&name("attn_v.bias"), v_dim, 1)?,
                q_norm: t.opt(&name("attn_q_norm.weight"), head_dim, 1)?,
                k_norm: t.opt(&name("attn_k_norm.weight"), head_dim, 1)?,
                wo: t.get(&name("attn_output.weight"), o_dim, n_embd)?,
                ffn_norm: t.get(&name("ffn_norm.weight"), n_embd, 1)?,
                ffn_gate,
                ffn_up,
                ffn_down,
                moe,
            });
        }
        Ok(Weights {
            token_embd: t.get("token_embd.weight", n_embd, n_vocab)?,
            layers,
            output_norm: t.get("output_norm.weight", n_embd, 1)?,
            output: t.opt("output.weight", n_embd, n_vocab)?,
            rope_freqs: t.opt("rope_freqs.weight", (hp.n_rot / 2) as usize, 1)?,
        })
    }
}

/// Tensor lookup in one parsed file (also the drafter oracle's loader).
pub(crate) struct Tensors<'a> {
    pub(crate) g: &'a Gguf,
    pub(crate) bytes: &'a [u8],
}

impl Tensors<'_> {
    /// Tensor `name`, which must be `[k, n]` (`n = 1`: a vector `[k]`), as f32 `[n, k]`.
    pub(crate) fn get(&self, name: &str, k: usize, n: usize) -> Result<Vec<f32>, ForwardError> {
        self.opt(name, k, n)?
            .ok_or_else(|| ForwardError::MissingTensor {
                name: name.to_string(),
            })
    }

    /// As [`Self::get`], `None` when the file has no tensor `name`.
    pub(crate) fn opt(
        &self,
        name: &str,
        k: usize,
        n: usize,
    ) -> Result<Option<Vec<f32>>, ForwardError> {
        let Some(info) = self.g.tensor(name) else {
            return Ok(None);
        };
        // Trailing 1s do not count: `[k]` and `[k, 1]` are the same vector.
        let mut dims: Vec<u64> = info.shape.clone();
        while dims.len() > 1 && dims.last() == Some(&1) {
            dims.pop();
        }
        let want: Vec<u64> = if n == 1 {
            vec![k as u64]
        } else {
            vec![k as u64, n as u64]
        };
        if dims != want {
            return Err(ForwardError::Shape {
                name: name.to_string(),
                expected: want,
                found: info.shape.clone(),
            });
        }
        let data = self.g.tensor_data(self.bytes, info)?;
        Ok(Some(dequantize_matrix(info.ty, data, k, n)?))
    }
}
