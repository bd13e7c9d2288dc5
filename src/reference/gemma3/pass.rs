//! [`RefGemma3Model::forward`]: embeddings · √d → n_layer × (sliding or global attention block,
//! GeGLU block, each with a post-norm) → final norm → LM head → soft-cap (`T` = tokens in the
//! batch, `L` = positions in the cache after it).

use super::RefGemma3Model;
use crate::reference::attention::{attention, AttnDims, Mask};
use crate::reference::forward::steps::{embed, finish, requested_rows, Head, Recorder};
use crate::reference::forward::{linear, Capture, ForwardError, ForwardOutput, RefKvCache};
use crate::reference::ops::{add, geglu, rms_norm, scale, RopeRef};

impl RefGemma3Model {
    /// Run `tokens` at positions `start_pos..start_pos + T`; the cache first drops every
    /// position from `start_pos` on. Returns the logits of `capture.rows` (soft-capped), the
    /// taps (the residual entering layer `i`, after the √d scale for layer 0) and, when asked,
    /// the named activations (`attn_norm`, `q`, `k`, `v`, `kqv_out`, `attn_out` (after the
    /// post-norm), `ffn_inp`, `ffn_norm`, `ffn_out` (after the post-norm), `l_out`; each `-il`).
    pub fn forward(
        &self,
        cache: &mut RefKvCache,
        tokens: &[u32],
        start_pos: usize,
        capture: &Capture,
    ) -> Result<ForwardOutput, ForwardError> {
        let hp = &self.hp;
        let t = tokens.len(); // T
        let (d, hd) = (hp.n_embd, hp.head_dim);
        let (nh, nkv) = (hp.n_head, hp.n_head_kv);
        let eps = hp.eps;
        let rows = requested_rows(capture, t, hp.n_layer)?;
        let kv_len = start_pos.saturating_add(t); // L
        if i32::try_from(kv_len).is_err() {
            return Err(ForwardError::Unsupported {
                what: "position (past i32)",
                value: kv_len.to_string(),
            });
        }
        let pos_i32: Vec<i32> = (start_pos..kv_len).map(|p| p as i32).collect();
        // x [T, d]: the embedding rows times sqrtf(d).
        let x = embed(tokens, &self.token_embd, d, hp.n_vocab)?;
        let mut x = scale(&x, (d as f32).sqrt());
        cache.truncate_to(start_pos)?;

        // Additive masks [T, L]: causal, and causal within the window.
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
        let causal = mask_of(0);
        let sliding = mask_of(hp.window);
        let rope_global = RopeRef {
            n_rot: hd,
            neox: true,
            freq_base: hp.rope_base,
            freq_scale: hp.rope_scale,
        };
        let rope_swa = RopeRef {
            freq_base: hp.rope_base_swa,
            freq_scale: 1.0,
            ..rope_global
        };

        let mut rec = Recorder::new(capture.named);
        let mut taps = Vec::new();
        for (il, lw) in self.layers.iter().enumerate() {
            if capture.taps.contains(&il) {
                taps.push((il, x.clone()));
            }
            let l = Some(il);
            let is_swa = hp.window > 0 && hp.sliding[il];
            let cur = rms_norm(&x, d, Some(&lw.attn_norm), eps); // [T, d]
            rec.put("attn_norm", l, &[t, d], &cur);
            let q = linear(&cur, &lw.wq, d); // [T, nh·hd]
            let k = linear(&cur, &lw.wk, d); // [T, nkv·hd]
            let v = linear(&cur, &lw.wv, d); // [T, nkv·hd]
            let q = rms_norm(&q, hd, Some(&lw.q_norm), eps);
            let k = rms_norm(&k, hd, Some(&lw.k_norm), eps);
            let rope = if is_swa { &rope_swa } else { &rope_global };
            let q = rope.rotate(&q, &pos_i32, nh, hd, None, None); // [T, nh, hd]
            let k = rope.rotate(&k, &pos_i32, nkv, hd, None, None); // [T, nkv, hd]
            rec.put("q", l, &[t, nh, hd], &q);
            rec.put("k", l, &[t, nkv, hd], &k);
            rec.put("v", l, &[t, nkv, hd], &v);
            cache.append(il, &k, &v)?;
            let (k_all, v_all) = cache.layer(il).unwrap_or_default(); // [L, nkv, hd]
            if k_all.len() != kv_len * nkv * hd || v_all.len() != k_all.len() {
                return Err(ForwardError::Position {
                    start_pos,
                    cache_len: k_all.len() / (nkv * hd).max(1),
                });
            }
            let dims = AttnDims {
                n_q: t,
                n_head: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                kv_len,
            };
            let mask = Mask::Explicit(if is_swa { &sliding } else { &causal });
            let kqv = attention(dims, &q, k_all, v_all, mask, hp.attn_scale); // [T, nh·hd]
            rec.put("kqv_out", l, &[t, nh * hd], &kqv);
            let o = linear(&kqv, &lw.wo, nh * hd); // [T, d]
            let o = rms_norm(&o, d, Some(&lw.post_attn_norm), eps);
            rec.put("attn_out", l, &[t, d], &o);
            let h = add(&x, &o); // [T, d]
            rec.put("ffn_inp", l, &[t, d], &h);
            let u = rms_norm(&h, d, Some(&lw.ffn_norm), eps);
            rec.put("ffn_norm", l, &[t, d], &u);
            let gate = linear(&u, &lw.gate, d); // [T, n_ff]
            let up = linear(&u, &lw.up, d); // [T, n_ff]
            let f = linear(&geglu(&gate, &up), &lw.down, hp.n_ff); // [T, d]
            let f = rms_norm(&f, d, Some(&lw.post_ffw_norm), eps);
            rec.put("ffn_out", l, &[t, d], &f);
            x = add(&h, &f);
            rec.put("l_out", l, &[t, d], &x);
        }
        cache.commit(kv_len);
        let head = Head {
            output_norm: &self.output_norm,
            lm_head: self.lm_head(),
            n_layer: hp.n_layer,
            n_embd: d,
            n_vocab: hp.n_vocab,
            eps,
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

    /// Logits `[n_vocab]` of the last of `tokens` at `start_pos`.
    pub fn forward_last(
        &self,
        cache: &mut RefKvCache,
        tokens: &[u32],
        start_pos: usize,
    ) -> Result<Vec<f32>, ForwardError> {
        Ok(self
            .forward(cache, tokens, start_pos, &Capture::default())?
            .logits)
    }
}
