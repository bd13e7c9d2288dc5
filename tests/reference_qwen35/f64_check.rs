//! A float64 cross-check of the hybrid oracle's two mixers, written again here from the
//! formulas (HF transformers `torch_recurrent_gated_delta_rule` and `Qwen3_5Attention`, the
//! state as a `head_k × head_v` matrix `S[i][j]`, everything in f64): fed the oracle's captured
//! `attn_norm-il` of a 24-token batch, each mixer must give the oracle's `attn_out-il` to within
//! f32 rounding.

use flint::gguf::GgmlType;
use flint::reference::forward::{Capture, Rows};
use flint::reference::hybrid::{DeltaNetWeights, GatedAttnWeights, Mixer, RefHybridModel};

/// `x [T, k] · w [n, k]ᵀ → [T, n]` in f64.
fn mat(x: &[f64], w: &[f32], k: usize) -> Vec<f64> {
    let n = w.len() / k;
    let mut y = Vec::with_capacity(x.len() / k * n);
    for row in x.chunks_exact(k) {
        for wr in w.chunks_exact(k) {
            y.push(row.iter().zip(wr).map(|(a, &b)| a * f64::from(b)).sum());
        }
    }
    y
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// RMSNorm of each `n`-row of `x` times `w`.
fn rms(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let n = w.len();
    x.chunks_exact(n)
        .flat_map(|r| {
            let s = 1.0 / (r.iter().map(|v| v * v).sum::<f64>() / n as f64 + eps).sqrt();
            r.iter().zip(w).map(move |(v, &g)| v * s * f64::from(g))
        })
        .collect()
}

fn deltanet_f64(m: &RefHybridModel, w: &DeltaNetWeights, x: &[f64]) -> Vec<f64> {
    let hy = &m.hy;
    let d = m.hp.n_embd as usize;
    let eps = f64::from(m.hp.rms_eps);
    let (nk, nv) = (hy.n_k_heads as usize, hy.n_v_heads as usize);
    let (dk, dv, kc) = (
        hy.head_k_dim as usize,
        hy.head_v_dim as usize,
        hy.d_conv as usize,
    );
    let (cd, kd) = (hy.conv_dim(), hy.key_dim());
    let t = x.len() / d;
    let (mixed, z) = (mat(x, &w.qkv, d), mat(x, &w.gate, d));
    let (b, a) = (mat(x, &w.beta, d), mat(x, &w.alpha, d));
    // S[h][i][j], i over keys, j over values.
    let mut s = vec![vec![vec![0f64; dv]; dk]; nv];
    let mut out = Vec::new();
    for ti in 0..t {
        // Causal conv over the zero-padded input column of each channel.
        let y: Vec<f64> = (0..cd)
            .map(|c| {
                let acc: f64 = (0..kc)
                    .filter(|&i| ti + i + 1 >= kc)
                    .map(|i| mixed[(ti + i + 1 - kc) * cd + c] * f64::from(w.conv[c * kc + i]))
                    .sum();
                silu(acc)
            })
            .collect();
        let l2 = |v: &[f64]| {
            let n = v.iter().map(|e| e * e).sum::<f64>().sqrt().max(eps);
            v.iter().map(|e| e / n).collect::<Vec<f64>>()
        };
        let mut o = vec![0f64; nv * dv];
        for h in 0..nv {
            let kh = h % nk;
            let q = l2(&y[kh * dk..(kh + 1) * dk]);
            let k = l2(&y[kd + kh * dk..kd + (kh + 1) * dk]);
            let v = &y[2 * kd + h * dv..2 * kd + (h + 1) * dv];
            let u = a[ti * nv + h] + f64::from(w.dt_bias[h]);
            let sp = if u > 20.0 { u } else { u.exp().ln_1p() };
            let g = (sp * f64::from(w.a[h])).exp();
            let beta = sigmoid(b[ti * nv + h]);
            let sh = &mut s[h];
            for row in sh.iter_mut() {
                row.iter_mut().for_each(|e| *e *= g);
            }
            for j in 0..dv {
                let kv: f64 = (0..dk).map(|i| sh[i][j] * k[i]).sum();
                let delta = beta * (v[j] - kv);
                (0..dk).for_each(|i| sh[i][j] += k[i] * delta);
            }
            for j in 0..dv {
                o[h * dv + j] = (0..dk).map(|i| sh[i][j] * q[i]).sum::<f64>() / (dk as f64).sqrt();
            }
        }
        let normed = rms(&o, &w.norm, eps);
        let zt = &z[ti * nv * dv..(ti + 1) * nv * dv];
        out.extend(normed.iter().zip(zt).map(|(n, &g)| n * silu(g)));
    }
    mat(&out, &w.out, nv * dv)
}

fn attention_f64(m: &RefHybridModel, w: &GatedAttnWeights, x: &[f64]) -> Vec<f64> {
    let hp = &m.hp;
    let d = hp.n_embd as usize;
    let eps = f64::from(hp.rms_eps);
    let (nh, nkv, hd, nrot) = (
        hp.n_head as usize,
        hp.n_head_kv as usize,
        hp.head_dim as usize,
        hp.n_rot as usize,
    );
    let t = x.len() / d;
    let qg = mat(x, &w.wq, d);
    let q: Vec<f64> = qg
        .chunks_exact(2 * hd)
        .flat_map(|p| p[..hd].to_vec())
        .collect();
    let gate: Vec<f64> = qg
        .chunks_exact(2 * hd)
        .flat_map(|p| p[hd..].to_vec())
        .collect();
    let (mut q, mut k) = (
        rms(&q, &w.q_norm, eps),
        rms(&mat(x, &w.wk, d), &w.k_norm, eps),
    );
    let v = mat(x, &w.wv, d);
    let rope = |buf: &mut [f64], heads: usize| {
        for ti in 0..t {
            for h in 0..heads {
                let base = (ti * heads + h) * hd;
                for i in 0..nrot / 2 {
                    let freq = f64::from(hp.rope_base).powf(-2.0 * i as f64 / nrot as f64);
                    let (sn, cs) = (ti as f64 * freq).sin_cos();
                    let (a, b) = (buf[base + i], buf[base + i + nrot / 2]);
                    buf[base + i] = a * cs - b * sn;
                    buf[base + i + nrot / 2] = a * sn + b * cs;
                }
            }
        }
    };
    rope(&mut q, nh);
    rope(&mut k, nkv);
    let mut o = vec![0f64; t * nh * hd];
    for ti in 0..t {
        for h in 0..nh {
            let kvh = h / (nh / nkv);
            let qr = &q[(ti * nh + h) * hd..][..hd];
            let sc: Vec<f64> = (0..=ti)
                .map(|j| {
                    let kr = &k[(j * nkv + kvh) * hd..][..hd];
                    qr.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                })
                .collect();
            let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = sc.iter().map(|s| (s - mx).exp()).collect();
            let sum: f64 = e.iter().sum();
            for (j, p) in e.iter().enumerate() {
                let vr = &v[(j * nkv + kvh) * hd..][..hd];
                for c in 0..hd {
                    o[(ti * nh + h) * hd + c] += p / sum * vr[c];
                }
            }
        }
    }
    let gated: Vec<f64> = o.iter().zip(&gate).map(|(a, &g)| a * sigmoid(g)).collect();
    mat(&gated, &w.wo, nh * hd)
}

#[test]
fn both_mixers_match_a_float64_rewrite() {
    let m = super::tiny("qwen35-tiny-f32", 5);
    let tokens: Vec<u32> = super::prompt().into_iter().take(24).collect();
    let mut st = m.new_state(GgmlType::F32).unwrap();
    let cap = Capture {
        rows: Rows::None,
        named: true,
        ..Capture::default()
    };
    let out = m.forward(&mut st, &tokens, 0, &cap).unwrap();
    for (il, layer) in m.weights.layers.iter().enumerate() {
        let x: Vec<f64> = out
            .get(&format!("attn_norm-{il}"))
            .unwrap()
            .data
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let want = match &layer.mixer {
            Mixer::DeltaNet(w) => deltanet_f64(&m, w, &x),
            Mixer::Attention(w) => attention_f64(&m, w, &x),
        };
        let got = &out.get(&format!("attn_out-{il}")).unwrap().data;
        let scale = want.iter().fold(0f64, |a, v| a.max(v.abs()));
        let err = got
            .iter()
            .zip(&want)
            .fold(0f64, |a, (&g, w)| a.max((f64::from(g) - w).abs()));
        eprintln!("layer {il}: max |f32 oracle − f64| {err:.2e} (max |out| {scale:.3})");
        // Measured at most 4.2e-7 of the largest output (layer 4: 1.1e-6 of 2.64); bound 1e-5.
        assert!(err <= 1e-5 * scale.max(1.0), "layer {il}: {err}");
    }
}
