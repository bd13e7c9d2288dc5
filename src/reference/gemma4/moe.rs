//! Gemma 4's experts (26B-A4B): llama.cpp's `build_moe_ffn` as `src/models/gemma4.cpp` calls
//! it, with the router on the residual, not on the experts' input. Per token row:
//! ```text
//! r      = rms_norm(h) / √d · ffn_gate_inp.scale           h: the attention block's output [d]
//! p      = softmax(W_router · r)                                               [n_expert]
//! e_1..k = the k largest p, ties to the lower index;  w_j = p[e_j] / max(Σ_j p[e_j], 2^-14)
//! out    = Σ_j w_j · s[e_j] · W_down[e_j] (gelu(g) ⊙ u),  [g | u] = W_gate_up[e_j] · x
//! ```
//! `x` = `rms_norm(h) · pre_ffw_norm_2`; `s` = `ffn_down_exps.scale` (1 where absent);
//! `W_gate_up` is the merged `ffn_gate_up_exps` (gate rows first) or `ffn_gate_exps` over
//! `ffn_up_exps`.

use crate::reference::forward::moe::experts;
use crate::reference::forward::{linear, ForwardError, Tensors};
use crate::reference::ops::{geglu, rms_norm};

/// One layer's router and experts (matrices `[N, K]`).
#[derive(Debug, Clone)]
pub struct Gemma4Experts {
    /// `ffn_gate_inp` `[n_expert, d]` and its `scale` `[d]`.
    pub router: Vec<f32>,
    pub router_scale: Vec<f32>,
    /// `[n_expert, 2·f_e, d]`: expert e's gate rows, then its up rows.
    pub gate_up: Vec<f32>,
    /// `ffn_down_exps` `[n_expert, d, f_e]`.
    pub down: Vec<f32>,
    /// `ffn_down_exps.scale` `[n_expert]`.
    pub down_scale: Vec<f32>,
    /// `pre_ffw_norm_2`, `post_ffw_norm_1`, `post_ffw_norm_2` `[d]`.
    pub pre_norm_2: Vec<f32>,
    pub post_norm_1: Vec<f32>,
    pub post_norm_2: Vec<f32>,
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_ff_exp: usize,
}

impl Gemma4Experts {
    /// Layer `il`'s router, norms and experts.
    pub(super) fn load(
        t: &Tensors<'_>,
        il: usize,
        d: usize,
        n_used: usize,
    ) -> Result<Gemma4Experts, ForwardError> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let down_info =
            t.g.tensor(&n("ffn_down_exps.weight"))
                .ok_or_else(|| ForwardError::MissingTensor {
                    name: n("ffn_down_exps.weight"),
                })?;
        let (fe, ne) = match down_info.shape.as_slice() {
            [fe, _, ne] => (*fe as usize, *ne as usize),
            other => {
                return Err(ForwardError::Shape {
                    name: n("ffn_down_exps.weight"),
                    expected: vec![0, d as u64, 0],
                    found: other.to_vec(),
                })
            }
        };
        let gate_up = if t.g.tensor(&n("ffn_gate_up_exps.weight")).is_some() {
            experts(t, &n("ffn_gate_up_exps.weight"), [d, 2 * fe, ne])?.0
        } else {
            let g = experts(t, &n("ffn_gate_exps.weight"), [d, fe, ne])?.0;
            let u = experts(t, &n("ffn_up_exps.weight"), [d, fe, ne])?.0;
            let per = fe * d;
            (0..ne)
                .flat_map(|e| [&g[e * per..(e + 1) * per], &u[e * per..(e + 1) * per]])
                .flatten()
                .copied()
                .collect()
        };
        if n_used == 0 || n_used > ne {
            return Err(ForwardError::Unsupported {
                what: "gemma4.expert_used_count",
                value: format!("{n_used} of {ne}"),
            });
        }
        Ok(Gemma4Experts {
            router: t.get(&n("ffn_gate_inp.weight"), d, ne)?,
            router_scale: t.get(&n("ffn_gate_inp.scale"), d, 1)?,
            gate_up,
            down: experts(t, &n("ffn_down_exps.weight"), [fe, d, ne])?.0,
            down_scale: t
                .opt(&n("ffn_down_exps.scale"), ne, 1)?
                .unwrap_or(vec![1.0; ne]),
            pre_norm_2: t.get(&n("pre_ffw_norm_2.weight"), d, 1)?,
            post_norm_1: t.get(&n("post_ffw_norm_1.weight"), d, 1)?,
            post_norm_2: t.get(&n("post_ffw_norm_2.weight"), d, 1)?,
            n_expert: ne,
            n_expert_used: n_used,
            n_ff_exp: fe,
        })
    }

    /// The route of the residual row `h` `[d]`: `(experts, weights)`, each `[k]`, best first.
    pub fn route(&self, h: &[f32], eps: f32) -> (Vec<usize>, Vec<f32>) {
        let d = h.len();
        let inv = 1.0 / (d as f32).sqrt();
        let r: Vec<f32> = rms_norm(h, d, None, eps)
            .iter()
            .zip(&self.router_scale)
            .map(|(&v, &s)| v * inv * s)
            .collect();
        let logits = linear(&r, &self.router, d); // [n_expert]
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f64> = logits.iter().map(|&l| f64::from(l - max).exp()).collect();
        let sum: f64 = exps.iter().sum();
        let p: Vec<f32> = exps.iter().map(|&e| (e / sum) as f32).collect();
        let mut order: Vec<usize> = (0..self.n_expert).collect();
        order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
        order.truncate(self.n_expert_used);
        let picked: Vec<f32> = order.iter().map(|&e| p[e]).collect();
        let total = picked.iter().sum::<f32>().max(1.0 / 16384.0);
        (order, picked.iter().map(|&w| w / total).collect())
    }

    /// The experts' output `[T, d]` (before `post_ffw_norm_2`) for residual rows `h` `[T, d]`,
    /// and each row's experts `[T, k]`.
    pub fn forward(&self, h: &[f32], d: usize, eps: f32) -> (Vec<f32>, Vec<usize>) {
        let fe = self.n_ff_exp;
        let x_all = rms_norm(h, d, Some(&self.pre_norm_2), eps); // [T, d]
        let (mut out, mut ids) = (Vec::with_capacity(h.len()), Vec::new());
        for (hr, x) in h.chunks_exact(d).zip(x_all.chunks_exact(d)) {
            let (experts, weights) = self.route(hr, eps);
            let mut acc = vec![0f32; d];
            for (&e, &w) in experts.iter().zip(&weights) {
                let gu_rows = &self.gate_up[e * 2 * fe * d..(e + 1) * 2 * fe * d];
                let gu = linear(x, gu_rows, d); // [2·f_e]: gate | up
                let act = geglu(&gu[..fe], &gu[fe..]); // [f_e]
                let y = linear(&act, &self.down[e * d * fe..(e + 1) * d * fe], fe); // [d]
                let s = self.down_scale[e];
                for (a, v) in acc.iter_mut().zip(y) {
                    *a += w * (v * s);
                }
            }
            out.extend(acc);
            ids.extend(experts);
        }
        (out, ids)
    }
}
