//! [`RefModel::forward`]: embeddings → n_layer × (attention block, feed-forward block) → final
//! norm → LM head, straight-line, with the shape of every buffer in a comment
//! (`T` = tokens in the batch, `L` = positions in the cache after it, `R` = rows with logits).
//!
//! Per layer `il` (llama.cpp's `build_llama` / `build_qwen2` / `build_qwen3`):
//! ```text
//! cur      = rms_norm(x) * attn_norm                        attn_norm-il
//! q, k, v  = cur·Wqᵀ (+bq), cur·Wkᵀ (+bk), cur·Wvᵀ (+bv)     (qwen2 biases)
//! q, k     = rms_norm_per_head(q) * q_norm, … * k_norm       (qwen3)
//! q, k     = rope(q, pos), rope(k, pos)  (YaRN: rope_yarn)   q-il, k-il, v-il
//! cache   += k, v (rounded to the cache type)
//! o        = softmax(q·Kᵀ / √head_dim, causal) · V           kqv_out-il
//! ffn_inp  = x + o·Woᵀ                                       attn_out-il, ffn_inp-il
//! cur      = rms_norm(ffn_inp) * ffn_norm                    ffn_norm-il
//! x        = ffn_inp + (silu(cur·Wgᵀ) ⊙ cur·Wuᵀ)·Wdᵀ          ffn_out-il, l_out-il
//! ```

use super::steps::{embed, ffn_block, finish, moe_block, requested_rows, Ffn, Head, Recorder};
use super::{linear, Capture, ForwardError, ForwardOutput, RefKvCache, RefModel};
use crate::reference::attention::{attention, AttnDims, Mask};
use crate::reference::ops::{add, rms_norm};

impl RefModel {
    /// Run `tokens` at positions `start_pos..start_pos + T`. The cache first drops every
    /// position from `start_pos` on (so `start_pos` must be at most its length), then holds
    /// `start_pos + T` positions. Returns the logits of `capture.rows` and what else
    /// `capture` asks for. Checks every token id, row and tap before computing anything.
    pub fn forward(
        &self,
        cache: &mut RefKvCache,
        tokens: &[u32],
        start_pos: usize,
        capture: &Capture,
    ) -> Result<ForwardOutput, ForwardError> {
        let hp = &self.hp;
        let w = &self.weights;
        let n_tokens = tokens.len(); // T
        let n_embd = hp.n_embd as usize;
        let n_vocab = hp.n_vocab as usize;
        let (n_head, n_head_kv) = (hp.n_head as usize, hp.n_head_kv as usize);
        let head_dim = hp.head_dim as usize;
        let n_layer = w.layers.len();
        let eps = hp.rms_eps;

        // ---- check the request -----------------------------------------------------------
        let rows = requested_rows(capture, n_tokens, n_layer)?;
        let kv_len = start_pos.saturating_add(n_tokens); // L
        if i32::try_from(kv_len).is_err() {
            return Err(ForwardError::Unsupported {
                what: "position (past i32)",
                value: kv_len.to_string(),
            });
        }
        // positions [T]: as i32 for RoPE, as u32 for the causal mask.
        let pos_i32: Vec<i32> = (start_pos..kv_len).map(|p| p as i32).collect();
        let pos_u32: Vec<u32> = (start_pos..kv_len).map(|p| p as u32).collect();

        // ---- embeddings: x [T, n_embd] ---------------------------------------------------
        let mut x = embed(tokens, &w.token_embd, n_embd, n_vocab)?;
        cache.truncate_to(start_pos)?; // the first change to the cache: every check is done

        let mut rec = Recorder::new(capture.named);
        let mut taps: Vec<(usize, Vec<f32>)> = Vec::new();
        let t = n_tokens;
        let freq_factors = w.rope_freqs.as_deref();
        let kq_scale = 1.0 / (head_dim as f32).sqrt();

        for (il, lw) in w.layers.iter().enumerate() {
            if capture.taps.contains(&il) {
                taps.push((il, x.clone())); // the residual stream entering layer il
            }
            let l = Some(il);

            // ---- attention block ---------------------------------------------------------
            let cur = rms_norm(&x, n_embd, Some(&lw.attn_norm), eps); // [T, n_embd]
            rec.put("attn_norm", l, &[t, n_embd], &cur);

            let mut q = linear(&cur, &lw.wq, n_embd); // [T, n_head * head_dim]
            let mut k = linear(&cur, &lw.wk, n_embd); // [T, n_head_kv * head_dim]
            let mut v = linear(&cur, &lw.wv, n_embd); // [T, n_head_kv * head_dim]
            if let Some(b) = &lw.bq {
                q = add(&q, b);
            }
            if let Some(b) = &lw.bk {
                k = add(&k, b);
            }
            if let Some(b) = &lw.bv {
                v = add(&v, b);
            }
            // qwen3: RMSNorm over each head's head_dim values (rows of [T * n_head, head_dim]).
            if let Some(nw) = &lw.q_norm {
                q = rms_norm(&q, head_dim, Some(nw), eps);
            }
            if let Some(nw) = &lw.k_norm {
                k = rms_norm(&k, head_dim, Some(nw), eps);
            }
            // RoPE as ggml_rope_ext, YaRN included where the metadata asks for it.
            let yarn = Some(&hp.rope_yarn);
            let q = self
                .rope
                .rotate(&q, &pos_i32, n_head, head_dim, yarn, freq_factors); // [T, n_head, head_dim]
            let k = self
                .rope
                .rotate(&k, &pos_i32, n_head_kv, head_dim, yarn, freq_factors); // [T, n_head_kv, head_dim]
            rec.put("q", l, &[t, n_head, head_dim], &q);
            rec.put("k", l, &[t, n_head_kv, head_dim], &k);
            rec.put("v", l, &[t, n_head_kv, head_dim], &v);

            cache.append(il, &k, &v)?;
            let (k_all, v_all) = cache.layer(il).unwrap_or_default(); // [L, n_head_kv, head_dim] each
            let dims = AttnDims {
                n_q: t,
                n_head,
                n_kv_heads: n_head_kv,
                head_dim,
                kv_len,
            };
            if k_all.len() != kv_len * n_head_kv * head_dim || v_all.len() != k_all.len() {
                return Err(ForwardError::Position {
                    start_pos,
                    cache_len: k_all.len() / (n_head_kv * head_dim).max(1),
                });
            }
            let kqv = attention(dims, &q, k_all, v_all, Mask::Causal(&pos_u32), kq_scale); // [T, n_head * head_dim]
            rec.put("kqv_out", l, &[t, n_head * head_dim], &kqv);
            let attn_out = linear(&kqv, &lw.wo, n_head * head_dim); // [T, n_embd]
            rec.put("attn_out", l, &[t, n_embd], &attn_out);
            let ffn_inp = add(&x, &attn_out); // [T, n_embd]
            rec.put("ffn_inp", l, &[t, n_embd], &ffn_inp);

            // ---- feed-forward block (qwen3moe: routed experts, `super::moe`) -------------
            x = match &lw.moe {
                Some(moe) => moe_block(&ffn_inp, &lw.ffn_norm, moe, n_embd, eps, &mut rec, il),
                None => {
                    let ffn = Ffn {
                        norm: &lw.ffn_norm,
                        gate: &lw.ffn_gate,
                        up: &lw.ffn_up,
                        down: &lw.ffn_down,
                        n_ff: hp.n_ff as usize,
                    };
                    ffn_block(&ffn_inp, &ffn, n_embd, eps, &mut rec, il)
                }
            };
        }
        cache.commit(kv_len);
        let head = Head {
            output_norm: &w.output_norm,
            lm_head: w.lm_head(),
            n_layer,
            n_embd,
            n_vocab,
            eps,
        };
        Ok(finish(x, taps, capture, rows, &head, rec))
    }
}
