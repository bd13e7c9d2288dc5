//! [`RefGemma4Model::forward`]: embeddings · √d (and the per-layer inputs) → n_layer ×
//! (attention block over the layer's own or a shared cache, GeGLU block with experts where the
//! layer has them, per-layer embedding, output scale) → final norm → LM head → soft-cap
//! (`T` = tokens in the batch, `L` = positions in the cache after it).

use super::{Gemma4Cache, Gemma4Layer, RefGemma4Model};
use crate::reference::attention::{attention, AttnDims, Mask};
use crate::reference::forward::steps::{embed, finish, requested_rows, Head, Recorder};
use crate::reference::forward::{linear, Capture, ForwardError, ForwardOutput};
use crate::reference::ops::{add, geglu, gelu, rms_norm, scale, RopeRef};

/// One pass's positions and masks.
struct Pass {
    t: usize,
    start_pos: usize,
    kv_len: usize,
    pos: Vec<i32>,
    /// Additive masks `[T, L]`: causal, and causal within the window.
    causal: Vec<f32>,
    sliding: Vec<f32>,
}

impl Pass {
    fn new(t: usize, start_pos: usize, window: usize) -> Result<Pass, ForwardError> {
        let kv_len = start_pos.saturating_add(t);
        if i32::try_from(kv_len).is_err() {
            return Err(ForwardError::Unsupported {
                what: "position (past i32)",
                value: kv_len.to_string(),
            });
        }
        let mask_of = |window: usize| -> Vec<f32> {
            let mut m = vec![0f32; t * kv_len];
            for (i, row) in m.chunks_exact_mut(kv_len.max(1)).enumerate() {
                let p = start_pos + i;
                for (j, v) in row.iter_mut().enumerate() {
                    if j > p || (window > 0 && p - j.min(p) >= window) {
                        *v = f32::NEG_INFINITY;
                    }
                }
            }
            m
        };
        Ok(Pass {
            t,
            start_pos,
            kv_len,
            pos: (start_pos..kv_len).map(|p| p as i32).collect(),
            causal: mask_of(0),
            sliding: mask_of(window),
        })
    }
}

impl RefGemma4Model {
    /// Run `tokens` at positions `start_pos..start_pos + T`; the cache first drops every
    /// position from `start_pos` on. Returns the logits of `capture.rows` (soft-capped), the
    /// taps (the residual entering layer `i`) and, when asked, the named activations
    /// (`q`, `k`, `v`, `kqv_out`, `attn_out` (h), `ffn_out`, `pe_in`, `l_out`; each `-il`).
    pub fn forward(
        &self,
        cache: &mut Gemma4Cache,
        tokens: &[u32],
        start_pos: usize,
        capture: &Capture,
    ) -> Result<ForwardOutput, ForwardError> {
        let hp = &self.hp;
        let d = hp.n_embd;
        let rows = requested_rows(capture, tokens.len(), hp.n_layer)?;
        let pass = Pass::new(tokens.len(), start_pos, hp.window)?;
        let x = embed(tokens, &self.token_embd, d, hp.n_vocab)?; // [T, d]
        let mut x = scale(&x, (d as f32).sqrt());
        let pl = self.per_layer_inputs(tokens, &x)?; // [T, L, P]
        cache.truncate_to(start_pos)?;
        let mut rec = Recorder::new(capture.named);
        let mut taps = Vec::new();
        for (il, lw) in self.layers.iter().enumerate() {
            if capture.taps.contains(&il) {
                taps.push((il, x.clone()));
            }
            let h = self.attention_block(cache, lw, il, &x, &pass, &mut rec)?; // [T, d]
            rec.put("attn_out", Some(il), &[pass.t, d], &h);
            let f = self.ffn_block(lw, &h); // [T, d]
            rec.put("ffn_out", Some(il), &[pass.t, d], &f);
            let mut cur = add(&h, &f);
            rec.put("pe_in", Some(il), &[pass.t, d], &cur);
            if let (Some(w), Some(pl)) = (&lw.ple, &pl) {
                cur = self.ple_block(w, pl, il, &cur);
            }
            if let Some(s) = lw.out_scale {
                cur = scale(&cur, s);
            }
            rec.put("l_out", Some(il), &[pass.t, d], &cur);
            x = cur;
        }
        cache.len = pass.kv_len;
        let head = Head {
            output_norm: &self.output_norm,
            lm_head: self.lm_head(),
            n_layer: hp.n_layer,
            n_embd: d,
            n_vocab: hp.n_vocab,
            eps: hp.eps,
        };
        let mut out = finish(x, taps, capture, rows, &head, rec);
        if hp.softcap > 0.0 {
            let c = hp.softcap;
            for v in &mut out.logits {
                *v = c * (*v * (1.0 / c)).tanh();
            }
        }
        Ok(out)
    }

    /// The per-layer inputs `[T, L, P]` (`None` without per-layer embeddings):
    /// `(rms_norm((x·Wmpᵀ)/√d per layer)·proj_norm + ple_embd[tok]·√P) / √2`.
    fn per_layer_inputs(
        &self,
        tokens: &[u32],
        x: &[f32],
    ) -> Result<Option<Vec<f32>>, ForwardError> {
        let Some([embd, proj, norm]) = &self.ple else {
            return Ok(None);
        };
        let hp = &self.hp;
        let (d, p) = (hp.n_embd, hp.n_per_layer);
        let all = p * hp.n_layer;
        let sel = embed(tokens, embd, all, hp.n_vocab)?; // [T, L·P]
        let sel = scale(&sel, (p as f32).sqrt());
        let pr = scale(&linear(x, proj, d), 1.0 / (d as f32).sqrt()); // [T, L·P]
        let pr = rms_norm(&pr, p, Some(norm), hp.eps);
        Ok(Some(scale(&add(&pr, &sel), 1.0 / 2f32.sqrt())))
    }

    /// `x + rms_norm(attn(x)·Woᵀ)·post_attention_norm` `[T, d]`, appending layer `il`'s K/V
    /// to its cache when it keeps its own.
    fn attention_block(
        &self,
        cache: &mut Gemma4Cache,
        lw: &Gemma4Layer,
        il: usize,
        x: &[f32],
        ps: &Pass,
        rec: &mut Recorder,
    ) -> Result<Vec<f32>, ForwardError> {
        let hp = &self.hp;
        let (d, t, nh, eps) = (hp.n_embd, ps.t, hp.n_head, hp.eps);
        let (hd, swa) = (hp.head_dim(il), hp.sliding[il]);
        let rope = RopeRef {
            n_rot: if swa { hp.rot_swa } else { hp.rot_full },
            neox: true,
            freq_base: if swa { hp.rope_base_swa } else { hp.rope_base },
            freq_scale: 1.0,
        };
        let ff = if swa {
            None
        } else {
            self.rope_freqs.as_deref()
        };
        let cur = rms_norm(x, d, Some(&lw.attn_norm), eps); // [T, d]
        let q = rms_norm(&linear(&cur, &lw.wq, d), hd, Some(&lw.q_norm), eps);
        let q = rope.rotate(&q, &ps.pos, nh, hd, None, ff); // [T, nh, hd]
        rec.put("q", Some(il), &[t, nh, hd], &q);
        let src = hp.kv_source(il);
        let nkv = hp.n_head_kv[src];
        if let (Some(wk), Some(k_norm)) = (&lw.wk, &lw.k_norm) {
            let kr = linear(&cur, wk, d); // [T, nkv·hd]
            let vr = lw
                .wv
                .as_ref()
                .map_or_else(|| kr.clone(), |wv| linear(&cur, wv, d));
            let k = rms_norm(&kr, hd, Some(k_norm), eps);
            let k = rope.rotate(&k, &ps.pos, nkv, hd, None, ff); // [T, nkv, hd]
            let v = rms_norm(&vr, hd, None, eps); // [T, nkv, hd]
            rec.put("k", Some(il), &[t, nkv, hd], &k);
            rec.put("v", Some(il), &[t, nkv, hd], &v);
            cache.k[il].extend_from_slice(&k);
            cache.v[il].extend_from_slice(&v);
        }
        let (k_all, v_all) = cache.layer(src); // [L, nkv, hd]
        if k_all.len() != ps.kv_len * nkv * hd || v_all.len() != k_all.len() {
            return Err(ForwardError::Position {
                start_pos: ps.start_pos,
                cache_len: k_all.len() / (nkv * hd).max(1),
            });
        }
        let dims = AttnDims {
            n_q: t,
            n_head: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            kv_len: ps.kv_len,
        };
        let mask = Mask::Explicit(if swa { &ps.sliding } else { &ps.causal });
        let kqv = attention(dims, &q, k_all, v_all, mask, 1.0); // [T, nh·hd]
        rec.put("kqv_out", Some(il), &[t, nh * hd], &kqv);
        let o = rms_norm(
            &linear(&kqv, &lw.wo, nh * hd),
            d,
            Some(&lw.post_attn_norm),
            eps,
        );
        Ok(add(x, &o))
    }

    /// `rms_norm(f)·post_ffw_norm` `[T, d]` for the attention block's output `h`: the dense
    /// GeGLU, plus the experts on a MoE layer.
    fn ffn_block(&self, lw: &Gemma4Layer, h: &[f32]) -> Vec<f32> {
        let (d, eps) = (self.hp.n_embd, self.hp.eps);
        let n_ff = lw.gate.len() / d;
        let u = rms_norm(h, d, Some(&lw.ffn_norm), eps);
        let g = linear(&u, &lw.gate, d);
        let up = linear(&u, &lw.up, d);
        let mut f = linear(&geglu(&g, &up), &lw.down, n_ff); // [T, d]
        if let Some(ex) = &lw.experts {
            let dense = rms_norm(&f, d, Some(&ex.post_norm_1), eps);
            let (m, _) = ex.forward(h, d, eps);
            f = add(&dense, &rms_norm(&m, d, Some(&ex.post_norm_2), eps));
        }
        rms_norm(&f, d, Some(&lw.post_ffw_norm), eps)
    }

    /// `cur + rms_norm((gelu(cur·Wigᵀ) ⊙ pl[il])·Wprojᵀ)·post_norm` `[T, d]`.
    fn ple_block(&self, w: &[Vec<f32>; 3], pl: &[f32], il: usize, cur: &[f32]) -> Vec<f32> {
        let hp = &self.hp;
        let (d, p) = (hp.n_embd, hp.n_per_layer);
        let [gate, proj, norm] = w;
        let g = linear(cur, gate, d); // [T, P]
        let mixed: Vec<f32> = g
            .chunks_exact(p)
            .enumerate()
            .flat_map(|(row, gr)| {
                let inp = &pl[(row * hp.n_layer + il) * p..][..p];
                gr.iter()
                    .zip(inp)
                    .map(|(&a, &b)| gelu(a) * b)
                    .collect::<Vec<_>>()
            })
            .collect();
        let y = rms_norm(&linear(&mixed, proj, p), d, Some(norm), hp.eps);
        add(cur, &y)
    }

    /// Logits `[n_vocab]` of the last of `tokens` at `start_pos`.
    pub fn forward_last(
        &self,
        cache: &mut Gemma4Cache,
        tokens: &[u32],
        start_pos: usize,
    ) -> Result<Vec<f32>, ForwardError> {
        Ok(self
            .forward(cache, tokens, start_pos, &Capture::default())?
            .logits)
    }
}
