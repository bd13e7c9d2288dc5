//! The mixture-of-experts feed-forward block of `qwen3moe` and `qwen35moe` (llama.cpp's
//! `build_moe_ffn` with softmax gating and normalised weights, plus qwen35moe's shared expert),
//! as plain Rust over f32 weights dequantized at load.
//!
//! Per token row `x` `[d]` (`ffn_norm(h)` in qwen3moe, `post_attention_norm(h)` in qwen35moe):
//! ```text
//! p      = softmax(W_router · x)                          [n_expert]  (exps in f64, one sum)
//! e_1..k = the k largest p, ties to the lower index        ffn_moe_topk-il
//! w_j    = p[e_j] / max(Σ_j p[e_j], 6.103515625e-5)
//! out    = Σ_j (in order j = 1..k) w_j · W_down[e_j] (silu(W_gate[e_j] x) ⊙ W_up[e_j] x)
//! out   += sigmoid(w_gate_shexp · x) · W_down_sh (silu(W_gate_sh x) ⊙ W_up_sh x)  (qwen35moe)
//! ```
//! Every row is computed alone (its route, its experts), so a row's bits never depend on the
//! other rows of the batch.
//!
//! llama.cpp's CPU backend rounds each activation row to Q8_0 before a product with a Q8_0 or
//! Q4_0 weight; [`MoeWeights::round_activations_q8_0`] makes the expert products do the same
//! (for holding the oracle to llama.cpp's CPU logits on quantized experts). Off by default.

use super::steps::Recorder;
use super::{linear, ForwardError, Tensors};
use crate::gguf::{GgmlType, Gguf};
use crate::reference::attention::kv_quant::quantize_row_q8_0;
use crate::reference::matmul::dequantize_matrix;
use crate::reference::meta::{RefMoe, WEIGHTS_SUM_MIN};
use crate::reference::ops::{add, swiglu};

/// The shared expert of a qwen35moe layer (matrices `[N, K]`).
#[derive(Debug, Clone)]
pub struct SharedExpert {
    /// `[n_ff_shexp, d]` each.
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    /// `[d, n_ff_shexp]`
    pub down: Vec<f32>,
    /// `ffn_gate_inp_shexp` `[d]`: one gate logit per token.
    pub gate_inp: Vec<f32>,
    pub n_ff: usize,
}

/// One layer's router and experts.
#[derive(Debug, Clone)]
pub struct MoeWeights {
    /// `ffn_gate_inp` `[n_expert, d]`.
    pub router: Vec<f32>,
    /// `ffn_gate_exps`, `ffn_up_exps` `[n_expert, n_ff_exp, d]`: expert e's rows at
    /// `e · n_ff_exp · d`.
    pub gate_exps: Vec<f32>,
    pub up_exps: Vec<f32>,
    /// `ffn_down_exps` `[n_expert, d, n_ff_exp]`.
    pub down_exps: Vec<f32>,
    /// The stored types of gate, up and down (for [`Self::round_activations_q8_0`]).
    pub exps_types: [GgmlType; 3],
    pub shared: Option<SharedExpert>,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_ff_exp: usize,
    /// Round the activation row to Q8_0 before each expert product whose weight is Q8_0 or
    /// Q4_0 (llama.cpp CPU).
    pub q8_0_activations: bool,
}

/// Tensor-name fragments of a layer that belong to experts or routing: anything holding one of
/// them that [`MoeWeights::load`] does not read is refused by name.
const EXPERT_MARKS: [&str; 3] = ["exp", "gate_inp", "chexps"];

impl MoeWeights {
    /// Layer `il`'s router, experts and (qwen35moe, where `ffn_up_shexp` exists) shared
    /// expert, each shape checked; any other expert or routing tensor of the layer
    /// (`exp_probs_b`, merged `ffn_gate_up_exps`, biases, scales) is refused, naming it.
    pub(crate) fn load(
        t: &Tensors<'_>,
        il: usize,
        d: usize,
        moe: &RefMoe,
    ) -> Result<MoeWeights, ForwardError> {
        let name = |s: &str| format!("blk.{il}.{s}");
        let (n_expert, ff) = (moe.n_expert as usize, moe.n_ff_exp as usize);
        let mut known = vec![
            name("ffn_gate_inp.weight"),
            name("ffn_gate_exps.weight"),
            name("ffn_up_exps.weight"),
            name("ffn_down_exps.weight"),
        ];
        let shared = match moe.n_ff_shexp {
            Some(sf) if t.g.tensor(&name("ffn_up_shexp.weight")).is_some() => {
                let sf = sf as usize;
                for s in ["gate", "up", "down", "gate_inp"] {
                    known.push(name(&format!("ffn_{s}_shexp.weight")));
                }
                Some(SharedExpert {
                    gate: t.get(&name("ffn_gate_shexp.weight"), d, sf)?,
                    up: t.get(&name("ffn_up_shexp.weight"), d, sf)?,
                    down: t.get(&name("ffn_down_shexp.weight"), sf, d)?,
                    gate_inp: t.get(&name("ffn_gate_inp_shexp.weight"), d, 1)?,
                    n_ff: sf,
                })
            }
            _ => None,
        };
        refuse_unknown(t.g, il, &known)?;
        let (gate_exps, gt) = experts(t, &name("ffn_gate_exps.weight"), [d, ff, n_expert])?;
        let (up_exps, ut) = experts(t, &name("ffn_up_exps.weight"), [d, ff, n_expert])?;
        let (down_exps, dt) = experts(t, &name("ffn_down_exps.weight"), [ff, d, n_expert])?;
        Ok(MoeWeights {
            router: t.get(&name("ffn_gate_inp.weight"), d, n_expert)?,
            gate_exps,
            up_exps,
            down_exps,
            exps_types: [gt, ut, dt],
            shared,
            n_expert,
            n_expert_used: moe.n_expert_used as usize,
            n_ff_exp: ff,
            q8_0_activations: false,
        })
    }

    /// Round activations to Q8_0 before Q8_0 / Q4_0 expert products, as llama.cpp's CPU
    /// backend does (`vec_dot_type`); F32 and other types are unaffected.
    pub fn round_activations_q8_0(&mut self, on: bool) {
        self.q8_0_activations = on;
    }

    /// The route of one row `x` `[d]`: `(experts, weights)`, each `[k]`, best first.
    pub fn route(&self, x: &[f32]) -> (Vec<usize>, Vec<f32>) {
        let logits = linear(x, &self.router, x.len()); // [n_expert]
                                                       // softmax: exponentials of (l - max) in f64, one sum, each rounded once to f32.
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f64> = logits.iter().map(|&l| f64::from(l - max).exp()).collect();
        let sum: f64 = exps.iter().sum();
        let p: Vec<f32> = exps.iter().map(|&e| (e / sum) as f32).collect();
        // top-k: probability descending, ties to the lower index.
        let mut order: Vec<usize> = (0..self.n_expert).collect();
        order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
        order.truncate(self.n_expert_used);
        let picked: Vec<f32> = order.iter().map(|&e| p[e]).collect();
        let total = picked.iter().sum::<f32>().max(WEIGHTS_SUM_MIN);
        (order, picked.iter().map(|&w| w / total).collect())
    }

    /// `y = W x` for expert `e` of `w` (`[n_expert, n, k]`), the activation rounded to Q8_0
    /// first where asked and the weight type calls for it.
    fn expert_product(&self, w: &[f32], ty: GgmlType, e: usize, x: &[f32]) -> Vec<f32> {
        let k = x.len();
        let n = w.len() / (self.n_expert * k);
        let rows = &w[e * n * k..(e + 1) * n * k];
        let quantized = matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0);
        if self.q8_0_activations && quantized {
            if let Some(q) = quantize_row_q8_0(x) {
                if let Ok(xq) = dequantize_matrix(GgmlType::Q8_0, &q, k, 1) {
                    return linear(&xq, rows, k);
                }
            }
        }
        linear(x, rows, k)
    }

    /// The block's output `[T, d]` for rows `cur` `[T, d]` (the normed residual), and each
    /// row's experts `[T, k]`, best first.
    pub fn apply(&self, cur: &[f32], d: usize) -> (Vec<f32>, Vec<usize>) {
        let out = self.forward(cur, d, &mut Recorder::new(false), 0);
        let ids = cur.chunks_exact(d).flat_map(|x| self.route(x).0).collect();
        (out, ids)
    }

    /// The block's output for `cur` `[T, d]` (the normed residual): `[T, d]`, recording each
    /// row's experts as `ffn_moe_topk-il` `[T, k]` (ids as f32) and weights as
    /// `ffn_moe_weights-il` `[T, k]`.
    pub(crate) fn forward(&self, cur: &[f32], d: usize, rec: &mut Recorder, il: usize) -> Vec<f32> {
        let t = cur.len() / d;
        let k = self.n_expert_used;
        let [gt, ut, dt] = self.exps_types;
        let (mut out, mut ids, mut ws) = (Vec::with_capacity(cur.len()), Vec::new(), Vec::new());
        for x in cur.chunks_exact(d) {
            let (experts, weights) = self.route(x);
            let mut acc = vec![0f32; d]; // Σ_j w_j · expert_j(x), in order j
            for (&e, &w) in experts.iter().zip(&weights) {
                let g = self.expert_product(&self.gate_exps, gt, e, x); // [n_ff_exp]
                let u = self.expert_product(&self.up_exps, ut, e, x);
                let y = self.expert_product(&self.down_exps, dt, e, &swiglu(&g, &u)); // [d]
                for (a, v) in acc.iter_mut().zip(y) {
                    *a += w * v;
                }
            }
            if let Some(s) = &self.shared {
                let g = linear(x, &s.gate, d); // [n_ff_shexp]
                let u = linear(x, &s.up, d);
                let y = linear(&swiglu(&g, &u), &s.down, s.n_ff); // [d]
                let gate_logit = linear(x, &s.gate_inp, d)[0];
                let gate = 1.0 / (1.0 + (-gate_logit).exp());
                let gated: Vec<f32> = y.iter().map(|v| v * gate).collect();
                acc = add(&acc, &gated);
            }
            out.extend(acc);
            ids.extend(experts.iter().map(|&e| e as f32));
            ws.extend(weights);
        }
        rec.put("ffn_moe_topk", Some(il), &[t, k], &ids);
        rec.put("ffn_moe_weights", Some(il), &[t, k], &ws);
        out
    }
}

impl super::RefModel {
    /// qwen3moe: round activations to Q8_0 before Q8_0 / Q4_0 expert products in every layer
    /// ([`MoeWeights::round_activations_q8_0`]); nothing for a dense model.
    pub fn round_moe_activations_q8_0(&mut self, on: bool) {
        for m in self
            .weights
            .layers
            .iter_mut()
            .filter_map(|l| l.moe.as_mut())
        {
            m.round_activations_q8_0(on);
        }
    }
}

impl crate::reference::hybrid::RefHybridModel {
    /// qwen35moe: as [`super::RefModel::round_moe_activations_q8_0`].
    pub fn round_moe_activations_q8_0(&mut self, on: bool) {
        for m in self
            .weights
            .layers
            .iter_mut()
            .filter_map(|l| l.moe.as_mut())
        {
            m.round_activations_q8_0(on);
        }
    }
}

/// Expert tensor `name` of shape `[k, n, n_expert]` as f32 `[n_expert, n, k]`, with its type.
pub(crate) fn experts(
    t: &Tensors<'_>,
    name: &str,
    [k, n, e]: [usize; 3],
) -> Result<(Vec<f32>, GgmlType), ForwardError> {
    let info =
        t.g.tensor(name)
            .ok_or_else(|| ForwardError::MissingTensor {
                name: name.to_string(),
            })?;
    let want = vec![k as u64, n as u64, e as u64];
    if info.shape != want {
        return Err(ForwardError::Shape {
            name: name.to_string(),
            expected: want,
            found: info.shape.clone(),
        });
    }
    let data = t.g.tensor_data(t.bytes, info)?;
    Ok((dequantize_matrix(info.ty, data, k, n * e)?, info.ty))
}

/// Refuses any routing or expert tensor of layer `il` not in `known`.
fn refuse_unknown(g: &Gguf, il: usize, known: &[String]) -> Result<(), ForwardError> {
    let prefix = format!("blk.{il}.");
    let unknown = g.tensors.iter().find(|t| {
        t.name.starts_with(&prefix)
            && EXPERT_MARKS.iter().any(|m| t.name.contains(m))
            && !known.contains(&t.name)
    });
    match unknown {
        Some(t) => Err(ForwardError::Unsupported {
            what: "expert or routing tensor",
            value: t.name.clone(),
        }),
        None => Ok(()),
    }
}
