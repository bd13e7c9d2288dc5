//! Weights of a `qwen35` model, dequantized to f32 once at load (any type [`crate::quant`]
//! decodes), every shape checked against the hyperparameters before its data is read.
//!
//! GGUF names and shapes (`[ne0, ne1]`, kept as f32 `[ne1, ne0]`: `N` rows of `K`), as
//! llama.cpp's converter writes them:
//! ```text
//! token_embd.weight        [d, n_vocab]      output.weight [d, n_vocab] (absent: tied)
//! output_norm.weight       [d]
//! blk.i.attn_norm.weight   [d]               blk.i.post_attention_norm.weight [d]
//! blk.i.ffn_gate / ffn_up  [d, n_ff]         blk.i.ffn_down.weight            [n_ff, d]
//! attention layers:
//! blk.i.attn_q.weight      [d, 2·n_head·head_dim]   (per head: q then its gate)
//! blk.i.attn_k / attn_v    [d, n_head_kv·head_dim]  blk.i.attn_output [n_head·head_dim, d]
//! blk.i.attn_q_norm / attn_k_norm.weight [head_dim]
//! DeltaNet layers:
//! blk.i.attn_qkv.weight    [d, conv_dim]     blk.i.attn_gate.weight [d, value_dim]
//! blk.i.ssm_beta / ssm_alpha.weight [d, n_v] blk.i.ssm_conv1d.weight [d_conv, conv_dim]
//! blk.i.ssm_dt.bias        [n_v]             blk.i.ssm_a [n_v] (= −exp(A_log))
//! blk.i.ssm_norm.weight    [head_v_dim]      blk.i.ssm_out.weight [value_dim, d]
//! ```
//! Norm weights are used as stored (the converter folds Qwen3.5's `1 + w` into them).

use crate::gguf::Gguf;
use crate::reference::forward::moe::MoeWeights;
use crate::reference::forward::{ForwardError, Tensors};
use crate::reference::meta::{RefArch, RefHparams, RefHybrid, RefLayerKind, RefMoe};

/// A gated full attention layer's mixer (matrices `[N, K]`).
#[derive(Debug, Clone)]
pub struct GatedAttnWeights {
    /// `[n_head · 2 · head_dim, n_embd]`: per head, head_dim rows of q then head_dim of gate.
    pub wq: Vec<f32>,
    /// `[n_head_kv · head_dim, n_embd]` each.
    pub wk: Vec<f32>,
    pub wv: Vec<f32>,
    /// `[head_dim]` each.
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    /// `[n_embd, n_head · head_dim]`
    pub wo: Vec<f32>,
}

/// A Gated DeltaNet layer's mixer (matrices `[N, K]`).
#[derive(Debug, Clone)]
pub struct DeltaNetWeights {
    /// `[conv_dim, n_embd]`: the q | k | v channels before the conv.
    pub qkv: Vec<f32>,
    /// `[value_dim, n_embd]`: z, the output gate.
    pub gate: Vec<f32>,
    /// `[n_v, n_embd]` each.
    pub beta: Vec<f32>,
    pub alpha: Vec<f32>,
    /// `[conv_dim, d_conv]`: channel c's taps contiguous, oldest input first.
    pub conv: Vec<f32>,
    /// `[n_v]` each.
    pub dt_bias: Vec<f32>,
    pub a: Vec<f32>,
    /// `[head_v_dim]`
    pub norm: Vec<f32>,
    /// `[n_embd, value_dim]`
    pub out: Vec<f32>,
}

/// The mixer of one layer.
#[derive(Debug, Clone)]
pub enum Mixer {
    Attention(GatedAttnWeights),
    DeltaNet(DeltaNetWeights),
}

/// One block: norms, mixer, SwiGLU feed-forward.
#[derive(Debug, Clone)]
pub struct HybridLayer {
    /// `[n_embd]` each.
    pub attn_norm: Vec<f32>,
    pub post_attention_norm: Vec<f32>,
    pub mixer: Mixer,
    /// `[n_ff, n_embd]`, `[n_ff, n_embd]`, `[n_embd, n_ff]` (empty in a MoE layer)
    pub ffn_gate: Vec<f32>,
    pub ffn_up: Vec<f32>,
    pub ffn_down: Vec<f32>,
    /// qwen35moe: the router, experts and shared expert that replace the dense FFN.
    pub moe: Option<MoeWeights>,
}

/// The whole model's weights (the main-pass layers; MTP blocks are not loaded).
#[derive(Debug, Clone)]
pub struct HybridWeights {
    /// `[n_vocab, n_embd]`
    pub token_embd: Vec<f32>,
    pub layers: Vec<HybridLayer>,
    /// `[n_embd]`
    pub output_norm: Vec<f32>,
    /// `[n_vocab, n_embd]`; `None` when tied to `token_embd`.
    pub output: Option<Vec<f32>>,
}

impl HybridWeights {
    /// The LM head `[n_vocab, n_embd]`.
    pub fn lm_head(&self) -> &[f32] {
        self.output.as_deref().unwrap_or(&self.token_embd)
    }

    /// Dequantize every tensor the forward pass reads from `g` (parsed from `bytes`).
    pub fn load(
        g: &Gguf,
        bytes: &[u8],
        hp: &RefHparams,
        hy: &RefHybrid,
    ) -> Result<HybridWeights, ForwardError> {
        let t = Tensors { g, bytes };
        let d = hp.n_embd as usize;
        let (n_ff, n_vocab) = (hp.n_ff as usize, hp.n_vocab as usize);
        let head_dim = hp.head_dim as usize;
        let (n_head, n_head_kv) = (hp.n_head as usize, hp.n_head_kv as usize);
        let n_v = hy.n_v_heads as usize;
        let moe = match hp.arch {
            RefArch::Qwen35Moe => Some(RefMoe::from_gguf(g, hp)?),
            _ => None,
        };
        let mut layers = Vec::with_capacity(hy.kinds.len());
        for (il, kind) in hy.kinds.iter().enumerate() {
            let name = |s: &str| format!("blk.{il}.{s}");
            let (ffn_gate, ffn_up, ffn_down, moe) = match &moe {
                Some(m) => {
                    let w = MoeWeights::load(&t, il, d, m)?;
                    (Vec::new(), Vec::new(), Vec::new(), Some(w))
                }
                None => (
                    t.get(&name("ffn_gate.weight"), d, n_ff)?,
                    t.get(&name("ffn_up.weight"), d, n_ff)?,
                    t.get(&name("ffn_down.weight"), n_ff, d)?,
                    None,
                ),
            };
            let mixer = match kind {
                RefLayerKind::Attention => Mixer::Attention(GatedAttnWeights {
                    wq: t.get(&name("attn_q.weight"), d, 2 * n_head * head_dim)?,
                    wk: t.get(&name("attn_k.weight"), d, n_head_kv * head_dim)?,
                    wv: t.get(&name("attn_v.weight"), d, n_head_kv * head_dim)?,
                    q_norm: t.get(&name("attn_q_norm.weight"), head_dim, 1)?,
                    k_norm: t.get(&name("attn_k_norm.weight"), head_dim, 1)?,
                    wo: t.get(&name("attn_output.weight"), n_head * head_dim, d)?,
                }),
                RefLayerKind::DeltaNet => Mixer::DeltaNet(DeltaNetWeights {
                    qkv: t.get(&name("attn_qkv.weight"), d, hy.conv_dim())?,
                    gate: t.get(&name("attn_gate.weight"), d, hy.value_dim())?,
                    beta: t.get(&name("ssm_beta.weight"), d, n_v)?,
                    alpha: t.get(&name("ssm_alpha.weight"), d, n_v)?,
                    conv: t.get(
                        &name("ssm_conv1d.weight"),
                        hy.d_conv as usize,
                        hy.conv_dim(),
                    )?,
                    dt_bias: t.get(&name("ssm_dt.bias"), n_v, 1)?,
                    a: t.get(&name("ssm_a"), n_v, 1)?,
                    norm: t.get(&name("ssm_norm.weight"), hy.head_v_dim as usize, 1)?,
                    out: t.get(&name("ssm_out.weight"), hy.value_dim(), d)?,
                }),
            };
            layers.push(HybridLayer {
                attn_norm: t.get(&name("attn_norm.weight"), d, 1)?,
                post_attention_norm: t.get(&name("post_attention_norm.weight"), d, 1)?,
                mixer,
                ffn_gate,
                ffn_up,
                ffn_down,
                moe,
            });
        }
        Ok(HybridWeights {
            token_embd: t.get("token_embd.weight", d, n_vocab)?,
            layers,
            output_norm: t.get("output_norm.weight", d, 1)?,
            output: t.opt("output.weight", d, n_vocab)?,
        })
    }
}
