//! The mixer of a layer, by kind: softmax attention (every dense model; qwen35's gated
//! attention) or a Gated DeltaNet (qwen35's linear-attention layers), and their weights' upload.
//!
//! GGUF names and shapes (ggml `ne` order `{in, out}`), as llama.cpp's `src/models/qwen35.cpp`:
//! attention `attn_q` `{d, n_head·head_dim}` (`{d, 2·n_head·head_dim}` when gated: per head q then
//! its gate), `attn_k`, `attn_v`, `attn_output`, optional biases and `attn_q_norm`/`attn_k_norm`
//! `{head_dim}`; DeltaNet `attn_qkv` `{d, conv_dim}`, `attn_gate` `{d, value_dim}`, `ssm_beta` and
//! `ssm_alpha` `{d, n_v}`, `ssm_conv1d.weight` `{d_conv, conv_dim}`, `ssm_dt.bias` `{n_v}`, `ssm_a`
//! `{n_v}` (no `.weight`), `ssm_norm.weight` `{head_v}`, `ssm_out.weight` `{value_dim, d}`.

use crate::kernels::matmul::GpuWeight;
use crate::{Error, Result};

use super::hparams::{Arch, Hparams};
use super::weights::{Loader, Qkv};

/// A layer's token mixer.
#[derive(Debug, Clone)]
pub enum Mixer {
    Attention(Box<AttnWeights>),
    DeltaNet(Box<DeltaWeights>),
}

/// Attention weights.
#[derive(Debug, Clone)]
pub struct AttnWeights {
    /// q (with its gate, interleaved per head, in qwen35), k and v.
    pub qkv: Qkv,
    pub wo: GpuWeight,
    /// qwen2: `[q]`, `[k]`, `[v]`.
    pub bias_qkv: Option<[wgpu::Buffer; 3]>,
    /// qwen3, qwen35: `[head_dim]` each.
    pub qk_norm: Option<[wgpu::Buffer; 2]>,
}

/// Gated DeltaNet weights.
#[derive(Debug, Clone)]
pub struct DeltaWeights {
    /// `[d] → [conv_dim]`: q | k | v before the conv.
    pub qkv: GpuWeight,
    /// `[d] → [value_dim]`: z, the output gate.
    pub gate: GpuWeight,
    /// `[d] → [n_v]` each.
    pub beta: GpuWeight,
    pub alpha: GpuWeight,
    /// `[conv_dim, d_conv]` f32 taps.
    pub conv: wgpu::Buffer,
    /// `[n_v]` f32: `ssm_dt.bias`, `ssm_a`.
    pub dt_bias: wgpu::Buffer,
    pub a: wgpu::Buffer,
    /// `[head_v]` f32.
    pub norm: wgpu::Buffer,
    /// `[value_dim] → [d]`.
    pub out: GpuWeight,
}

impl AttnWeights {
    /// The separate q, k and v weights, or an error naming the layer's stacked weight (only
    /// the target model stacks them; drafters never do).
    pub fn separate_qkv(&self) -> Result<[&GpuWeight; 3]> {
        match &self.qkv {
            Qkv::Separate { wq, wk, wv } => Ok([wq, wk, wv]),
            Qkv::Stacked { w, .. } => Err(Error::Usage(format!(
                "{} holds q, k and v stacked where separate weights were expected",
                w.name
            ))),
        }
    }
}

/// Checks that matrix `w` maps `k` inputs to `n` outputs.
fn expect_shape(w: &GpuWeight, k: u32, n: u32) -> Result<()> {
    if w.k != k || w.n != n {
        return Err(Error::Usage(format!(
            "tensor {} is [{}, {}], expected [{k}, {n}]",
            w.name, w.k, w.n
        )));
    }
    Ok(())
}

impl Loader<'_> {
    /// Layer `il`'s attention weights.
    pub(super) fn attention(&mut self, il: u32, hp: &Hparams) -> Result<AttnWeights> {
        let p = |s: &str| format!("blk.{il}.{s}");
        let bias_qkv = if hp.arch == Arch::Qwen2 || hp.qkv_bias {
            let q = self.optional_vector(&p("attn_q.bias"), hp.q_dim())?;
            let k = self.optional_vector(&p("attn_k.bias"), hp.k_dim())?;
            let v = self.optional_vector(&p("attn_v.bias"), hp.v_dim())?;
            match (q, k, v) {
                (Some(q), Some(k), Some(v)) => Some([q, k, v]),
                _ => None,
            }
        } else {
            None
        };
        let qk_norm = if hp.qk_norm {
            Some([
                self.vector(&p("attn_q_norm.weight"), hp.head_dim)?,
                self.vector(&p("attn_k_norm.weight"), hp.head_dim)?,
            ])
        } else {
            None
        };
        let names = ["attn_q.weight", "attn_k.weight", "attn_v.weight"].map(p);
        let stacked = match self.stack {
            Some(family) => self.stacked(&p("attn_qkv"), &names, family, false)?,
            None => None,
        };
        let q_width = hp.q_dim() * if hp.attn_gated() { 2 } else { 1 };
        let qkv = match stacked {
            Some((w, rows)) => {
                if rows[0] != q_width || rows[1] != hp.k_dim() || rows[2] != hp.v_dim() {
                    return Err(Error::Usage(format!(
                        "layer {il}: q, k, v weights have {rows:?} rows, expected [{q_width}, {}, {}]",
                        hp.k_dim(),
                        hp.v_dim()
                    )));
                }
                Qkv::Stacked {
                    w,
                    q_rows: rows[0],
                    k_rows: rows[1],
                }
            }
            None => {
                let [wq, wk, wv] = [
                    self.matrix(&names[0])?,
                    self.matrix(&names[1])?,
                    self.matrix(&names[2])?,
                ];
                expect_shape(&wq, hp.n_embd, q_width)?;
                expect_shape(&wk, hp.n_embd, hp.k_dim())?;
                expect_shape(&wv, hp.n_embd, hp.v_dim())?;
                Qkv::Separate { wq, wk, wv }
            }
        };
        let wo = self.matrix(&p("attn_output.weight"))?;
        Ok(AttnWeights {
            qkv,
            wo,
            bias_qkv,
            qk_norm,
        })
    }

    /// Layer `il`'s Gated DeltaNet weights (a hybrid model's recurrent layer).
    pub(super) fn delta_net(&mut self, il: u32, hp: &Hparams) -> Result<DeltaWeights> {
        let h = hp.hybrid.as_ref().ok_or_else(|| {
            Error::Usage(format!(
                "layer {il} is Gated DeltaNet in a non-hybrid model"
            ))
        })?;
        let p = |s: &str| format!("blk.{il}.{s}");
        let d = hp.n_embd;
        let w = DeltaWeights {
            qkv: self.matrix(&p("attn_qkv.weight"))?,
            gate: self.matrix(&p("attn_gate.weight"))?,
            beta: self.matrix(&p("ssm_beta.weight"))?,
            alpha: self.matrix(&p("ssm_alpha.weight"))?,
            conv: self.vector(&p("ssm_conv1d.weight"), h.conv_dim() * h.d_conv)?,
            dt_bias: self.vector(&p("ssm_dt.bias"), h.n_v_heads)?,
            a: self.vector(&p("ssm_a"), h.n_v_heads)?,
            norm: self.vector(&p("ssm_norm.weight"), h.head_v_dim)?,
            out: self.matrix(&p("ssm_out.weight"))?,
        };
        expect_shape(&w.qkv, d, h.conv_dim())?;
        expect_shape(&w.gate, d, h.value_dim())?;
        expect_shape(&w.beta, d, h.n_v_heads)?;
        expect_shape(&w.alpha, d, h.n_v_heads)?;
        expect_shape(&w.out, h.value_dim(), d)?;
        Ok(w)
    }
}
