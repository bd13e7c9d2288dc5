//! One drafted block (docs/DSPARK.md), straight-line, shapes in comments (`γ` block size,
//! `C` cached context rows before the anchor, `d` hidden size, `V` vocabulary, `R` rank):
//!
//! ```text
//! tokens   = [anchor, mask × (γ−1)] at positions p0..p0+γ−1
//! x        = token_embd[tokens]                                   [γ, d]
//! x       += log-SNR rows (conditioned drafters, `snr::rows`)     [γ, d]
//! per layer (pre-norm Qwen3 block):
//!   a      = rms_norm(x) * attn_norm
//!   q, k   = rope(q_norm(a·Wqᵀ)), rope(k_norm(a·Wkᵀ)); v = a·Wvᵀ
//!   k, v   = rounded through the cache type (as a GPU writes them at p0..p0+γ−1)
//!   o      = softmax(q·[K_ctx; k]ᵀ / √hd) · [V_ctx; v]            non-causal, GQA
//!   x      = x + o·Woᵀ;  x = x + FFN_swiglu(rms_norm(x) * ffn_norm)
//! h        = rms_norm(x) * output_norm                            [γ, d]
//! U        = h · LM headᵀ                                         [γ, V]
//! prev = anchor; for j in 0..γ:
//!   e      = W1[prev]                                             [R]
//!   L_j    = U_j + W2·e                                           [V]
//!   d_j    = pick(j, L_j)           (argmax, ties to the lowest id, in `draft`)
//!   c_j    = σ(conf_w · [h_j; e] + b)
//!   prev   = d_j
//! ```
//!
//! The context is every cached position `< p0`; rows cached at `p0` or later (not yet truncated
//! after a verify) are not seen. Without a Markov head `L = U`; without a confidence head
//! `c = 1`.

use super::{block_attention, DsparkRefError, RefDraft, RefDrafter};
use crate::reference::forward::{linear, store_kv_rows};
use crate::reference::ops::{add, argmax, rms_norm, rope, swiglu};

impl RefDrafter {
    /// Draft one block after `anchor` at position `p0`, greedily (argmax of the corrected
    /// logits, ties to the lowest id).
    pub fn draft(&self, anchor: u32, p0: u32) -> Result<RefDraft, DsparkRefError> {
        let n_vocab = self.n_vocab as usize;
        self.draft_with(anchor, p0, |_, logits| {
            argmax(logits, n_vocab).first().copied().unwrap_or(0)
        })
    }

    /// As [`Self::draft`], with `pick(slot, corrected logits [V])` choosing each slot's token;
    /// the Markov chain conditions the next slot on the token picked.
    pub fn draft_with(
        &self,
        anchor: u32,
        p0: u32,
        mut pick: impl FnMut(usize, &[f32]) -> u32,
    ) -> Result<RefDraft, DsparkRefError> {
        let hp = &self.meta.hp;
        let w = &self.weights;
        let gamma = self.block_size(); // γ
        let (d, n_vocab) = (hp.n_embd as usize, self.n_vocab as usize);
        let (n_head, n_kv) = (hp.n_head as usize, hp.n_head_kv as usize);
        let head_dim = hp.head_dim as usize;
        let eps = hp.rms_eps;
        let out_of_range = |id: u32| DsparkRefError::TokenOutOfRange {
            id,
            n_vocab: self.n_vocab,
        };
        if anchor >= self.n_vocab {
            return Err(out_of_range(anchor));
        }
        let last = u64::from(p0) + gamma as u64 - 1;
        if i32::try_from(last).is_err() {
            return Err(DsparkRefError::Position { pos: last });
        }
        let pos: Vec<i32> = (0..gamma).map(|j| p0 as i32 + j as i32).collect(); // [γ]

        // ---- embeddings: x [γ, d] ----------------------------------------------------------
        let mut x = Vec::with_capacity(gamma * d);
        for j in 0..gamma {
            let id = if j == 0 { anchor } else { self.mask_token };
            let row = w
                .token_embd
                .get(id as usize * d..(id as usize + 1) * d)
                .ok_or_else(|| out_of_range(id))?;
            x.extend_from_slice(row);
        }
        if let Some(rows) = &w.log_snr {
            x = add(&x, rows); // [γ, d]
        }
        let ctx: Vec<_> = self.cache.range(..p0).map(|(_, row)| row).collect(); // C rows

        for (il, lw) in w.layers.iter().enumerate() {
            let a = rms_norm(&x, d, Some(&lw.attn_norm), eps); // [γ, d]
            let mut q = linear(&a, &lw.wq, d); // [γ, n_head · head_dim]
            let mut k = linear(&a, &lw.wk, d); // [γ, n_kv · head_dim]
            let v = linear(&a, &lw.wv, d); // [γ, n_kv · head_dim]
            if let Some(nw) = &lw.q_norm {
                q = rms_norm(&q, head_dim, Some(nw), eps);
            }
            if let Some(nw) = &lw.k_norm {
                k = rms_norm(&k, head_dim, Some(nw), eps);
            }
            let q = rope(&q, &pos, n_head, head_dim, &self.rope, None);
            let k = rope(&k, &pos, n_kv, head_dim, &self.rope, None);
            let k = store_kv_rows(self.kv_type, &k)?;
            let v = store_kv_rows(self.kv_type, &v)?;
            let o = block_attention(hp, il, &q, &ctx, &k, &v); // [γ, n_head · head_dim]
            x = add(&x, &linear(&o, &lw.wo, n_head * head_dim)); // [γ, d]
            let b = rms_norm(&x, d, Some(&lw.ffn_norm), eps); // [γ, d]
            let gate = linear(&b, &lw.ffn_gate, d); // [γ, n_ff]
            let up = linear(&b, &lw.ffn_up, d); // [γ, n_ff]
            x = add(
                &x,
                &linear(&swiglu(&gate, &up), &lw.ffn_down, hp.n_ff as usize),
            );
        }
        let hidden = rms_norm(&x, d, Some(&w.output_norm), eps); // [γ, d]
        let base_logits = linear(&hidden, w.lm_head(), d); // [γ, V]

        // ---- Markov chain and confidence, left to right ------------------------------------
        let mut logits = Vec::with_capacity(gamma * n_vocab); // [γ, V]
        let mut tokens = Vec::with_capacity(gamma);
        let mut conf = Vec::with_capacity(gamma);
        let mut prev = anchor;
        for (j, (u, h)) in base_logits
            .chunks_exact(n_vocab)
            .zip(hidden.chunks_exact(d))
            .enumerate()
        {
            let (l_j, e) = match &w.markov {
                Some((w1, w2)) => {
                    let r = w1.len() / n_vocab.max(1);
                    let p = prev as usize;
                    let e = w1
                        .get(p * r..(p + 1) * r)
                        .ok_or_else(|| out_of_range(prev))?; // [R]
                    (add(u, &linear(e, w2, r)), e) // [V]
                }
                None => (u.to_vec(), &[][..]),
            };
            conf.push(match &w.conf {
                Some((cw, cb)) => {
                    let z: Vec<f32> = h.iter().chain(e).copied().collect(); // [d + R]
                    let s = linear(&z, cw, z.len()).first().copied().unwrap_or(0.0) + cb;
                    (1.0 / (1.0 + (-f64::from(s)).exp())) as f32
                }
                None => 1.0,
            });
            let t = pick(j, &l_j);
            if t >= self.n_vocab {
                return Err(out_of_range(t));
            }
            logits.extend_from_slice(&l_j);
            tokens.push(t);
            prev = t;
        }
        Ok(RefDraft {
            tokens,
            conf,
            logits,
            base_logits,
            hidden,
        })
    }
}
