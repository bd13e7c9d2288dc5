//! The Gated DeltaNet mixer of a `qwen35` layer (llama.cpp `qwen35.cpp`
//! `build_layer_attn_linear` and `delta-net-base.cpp`; HF transformers `Qwen3_5GatedDeltaNet`
//! with `torch_recurrent_gated_delta_rule`), one token after the other:
//! ```text
//! mixed = x·W_qkvᵀ              [conv_dim] = [q (key_dim) | k (key_dim) | v (value_dim)]
//! z     = x·W_gateᵀ             [value_dim]
//! beta  = sigmoid(x·W_betaᵀ)    [n_v]
//! g     = softplus(x·W_alphaᵀ + dt_bias) · a        [n_v]   (a = −exp(A_log))
//! y[c]  = silu(Σ_i win[c][i] · conv[c][i]),  win[c] = [conv state of c (oldest first), mixed[c]]
//! q_j, k_j = l2norm(y[j·head_k ..]), l2norm(y[key_dim + j·head_k ..])   per q/k head j
//! v_h   = y[2·key_dim + h·head_v ..]                                      per v head h
//! for v head h, kh = h mod n_k (the GGUF tiles v heads over the q/k heads):
//!   S_h ← exp(g_h) · S_h;  kv = S_hᵀ k_kh;  d = beta_h · (v_h − kv);  S_h ← S_h + k_kh dᵀ
//!   o_h = S_hᵀ q_kh / √head_k
//! out   = (rms_norm(o_h) · ssm_norm ⊙ silu(z_h) for every h) · W_outᵀ     [n_embd]
//! ```
//! l2norm is `x / max(‖x‖₂, eps)` (ggml_l2_norm) with the model's RMS eps; softplus is ggml's
//! (`u > 20 ? u : ln(1 + eᵘ)`). Dot products are summed in f64 and rounded once; the state stays
//! f32 (see `state.rs` for the layouts). Tokens run strictly in order, so a token's result is
//! the same whether it came in a batch or alone.

use super::state::DeltaNetState;
use super::weights::DeltaNetWeights;
use super::{Recorder, RefHybridModel};
use crate::reference::forward::linear;
use crate::reference::ops::{rms_norm, silu};

/// `1 / (1 + e^-x)`
pub(super) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// ggml's softplus: `u` above 20, else `ln(1 + eᵘ)`.
fn softplus(u: f32) -> f32 {
    if u > 20.0 {
        u
    } else {
        (1.0 + u.exp()).ln()
    }
}

/// `x / max(‖x‖₂, eps)`, the sum of squares in f64 (ggml_l2_norm).
fn l2_norm(x: &[f32], eps: f32) -> Vec<f32> {
    let sum: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let scale = 1.0 / (sum as f32).sqrt().max(eps);
    x.iter().map(|&v| v * scale).collect()
}

/// The causal depthwise conv1d then SiLU over `mixed` `[T, conv_dim]` with taps `conv`
/// `[conv_dim, d_conv]`, continuing `state` `[conv_dim, d_conv − 1]` (updated). Returns
/// `[T, conv_dim]`.
fn conv_silu(mixed: &[f32], conv: &[f32], state: &mut [f32], conv_dim: usize) -> Vec<f32> {
    let d_conv = conv.len() / conv_dim;
    let ks = d_conv - 1;
    let mut y = vec![0f32; mixed.len()];
    for c in 0..conv_dim {
        let taps = &conv[c * d_conv..][..d_conv];
        let st = &mut state[c * ks..][..ks];
        for (t, row) in mixed.chunks_exact(conv_dim).enumerate() {
            // win = [st[0], …, st[ks − 1], row[c]]
            let mut sum = f64::from(row[c]) * f64::from(taps[ks]);
            for (&s, &w) in st.iter().zip(taps) {
                sum += f64::from(s) * f64::from(w);
            }
            y[t * conv_dim + c] = silu(sum as f32);
            if ks > 0 {
                st.rotate_left(1);
                st[ks - 1] = row[c];
            }
        }
    }
    y
}

/// The delta rule for one token and one v head: `s` `[head_v, head_k]` (column j of `S_h` at
/// `j·head_k`), `q`, `k` `[head_k]` (L2-normed), `v` `[head_v]`; returns `o_h` `[head_v]`.
fn delta_step(s: &mut [f32], q: &[f32], k: &[f32], v: &[f32], decay: f32, beta: f32) -> Vec<f32> {
    let head_k = k.len();
    let scale = 1.0 / (head_k as f64).sqrt();
    let mut o = Vec::with_capacity(v.len());
    for (col, &v_j) in s.chunks_exact_mut(head_k).zip(v) {
        for x in col.iter_mut() {
            *x *= decay;
        }
        let kv: f64 = col
            .iter()
            .zip(k)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        let d = beta * (v_j - kv as f32);
        for (x, &k_i) in col.iter_mut().zip(k) {
            *x = (f64::from(*x) + f64::from(k_i) * f64::from(d)) as f32;
        }
        let sq: f64 = col
            .iter()
            .zip(q)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        o.push((sq * scale) as f32);
    }
    o
}

/// The mixer's output `[T, n_embd]` for `cur` `[T, n_embd]` (the normed residual), continuing
/// `st`. Records `conv_out-il` `[T, conv_dim]` (after SiLU), `beta-il` and `g-il` `[T, n_v]`,
/// `delta_out-il` `[T, n_v, head_v]` (o before the gated norm) and `final_output-il`
/// `[T, value_dim]` (after it).
pub(super) fn deltanet(
    m: &RefHybridModel,
    w: &DeltaNetWeights,
    cur: &[f32],
    st: &mut DeltaNetState,
    rec: &mut Recorder,
    il: usize,
) -> Vec<f32> {
    let (hy, eps) = (&m.hy, m.hp.rms_eps);
    let n_embd = m.hp.n_embd as usize;
    let t = cur.len() / n_embd;
    let (conv_dim, key_dim, value_dim) = (hy.conv_dim(), hy.key_dim(), hy.value_dim());
    let (n_k, n_v) = (hy.n_k_heads as usize, hy.n_v_heads as usize);
    let (head_k, head_v) = (hy.head_k_dim as usize, hy.head_v_dim as usize);
    let l = Some(il);

    let mixed = linear(cur, &w.qkv, n_embd); // [T, conv_dim]
    let z = linear(cur, &w.gate, n_embd); // [T, value_dim]
    let beta: Vec<f32> = linear(cur, &w.beta, n_embd)
        .into_iter()
        .map(sigmoid)
        .collect(); // [T, n_v]
    let g: Vec<f32> = linear(cur, &w.alpha, n_embd)
        .iter()
        .enumerate()
        .map(|(i, &u)| softplus(u + w.dt_bias[i % n_v]) * w.a[i % n_v])
        .collect(); // [T, n_v]
    rec.put("beta", l, &[t, n_v], &beta);
    rec.put("g", l, &[t, n_v], &g);

    let y = conv_silu(&mixed, &w.conv, &mut st.conv, conv_dim); // [T, conv_dim]
    rec.put("conv_out", l, &[t, conv_dim], &y);

    let mut o = Vec::with_capacity(t * value_dim); // [T, n_v, head_v]
    for (ti, row) in y.chunks_exact(conv_dim).enumerate() {
        // q, k: [n_k, head_k] each, L2-normed per head.
        let q: Vec<Vec<f32>> = row[..key_dim]
            .chunks_exact(head_k)
            .map(|h| l2_norm(h, eps))
            .collect();
        let k: Vec<Vec<f32>> = row[key_dim..2 * key_dim]
            .chunks_exact(head_k)
            .map(|h| l2_norm(h, eps))
            .collect();
        let v = &row[2 * key_dim..]; // [n_v, head_v]
        for (h, s) in st.ssm.chunks_exact_mut(head_v * head_k).enumerate() {
            let kh = h % n_k;
            let decay = g[ti * n_v + h].exp();
            let v_h = &v[h * head_v..][..head_v];
            o.extend(delta_step(
                s,
                &q[kh],
                &k[kh],
                v_h,
                decay,
                beta[ti * n_v + h],
            ));
        }
    }
    rec.put("delta_out", l, &[t, n_v, head_v], &o);

    // Gated RMSNorm per head: rms_norm(o_h) · ssm_norm ⊙ silu(z_h).
    let normed = rms_norm(&o, head_v, Some(&w.norm), eps); // [T, n_v, head_v]
    let gated: Vec<f32> = normed
        .iter()
        .zip(&z)
        .map(|(&a, &zg)| a * silu(zg))
        .collect(); // [T, value_dim]
    rec.put("final_output", l, &[t, value_dim], &gated);
    linear(&gated, &w.out, value_dim) // [T, n_embd]
}
