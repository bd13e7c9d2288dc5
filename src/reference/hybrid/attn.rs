//! The gated full attention mixer of a `qwen35` layer (llama.cpp `qwen35.cpp`
//! `build_layer_attn`; HF transformers `Qwen3_5Attention`):
//! ```text
//! [q | gate] = x·W_qᵀ          per head: head_dim values of q, then head_dim of the gate
//! q = rms_norm_per_head(q) · q_norm;  k = rms_norm_per_head(x·W_kᵀ) · k_norm;  v = x·W_vᵀ
//! q, k = NEOX RoPE on the first n_rot dims of each head (the rest pass through)
//! o = softmax(q·Kᵀ / √head_dim, causal) · V     (GQA: q head h reads KV head h / group)
//! out = (o ⊙ sigmoid(gate)) · W_oᵀ
//! ```
//! With text positions `(p, p, p, 0)`, llama.cpp's multi-section RoPE is this plain NEOX
//! rotation (`RefHybrid::from_gguf` refuses section sizes where it would not be).

use super::deltanet::sigmoid;
use super::weights::GatedAttnWeights;
use super::{Recorder, RefHybridModel};
use crate::reference::attention::{attention, AttnDims, Mask};
use crate::reference::forward::{linear, ForwardError, RefKvCache};
use crate::reference::ops::rms_norm;

/// The mixer's output `[T, n_embd]` for `cur` `[T, n_embd]` at positions `pos` `[T]`, appending
/// the new K/V rows to layer `il` of `cache` (which then holds `pos[T − 1] + 1` rows). Records
/// `q-il` `[T, n_head, head_dim]` and `k-il` `[T, n_head_kv, head_dim]` (after norm and RoPE),
/// `v-il`, `kqv_out-il` `[T, n_head·head_dim]` (before the gate) and `attn_gated-il` (after).
pub(super) fn gated_attention(
    m: &RefHybridModel,
    w: &GatedAttnWeights,
    cur: &[f32],
    pos: &[u32],
    cache: &mut RefKvCache,
    rec: &mut Recorder,
    il: usize,
) -> Result<Vec<f32>, ForwardError> {
    let hp = &m.hp;
    let n_embd = hp.n_embd as usize;
    let (n_head, n_head_kv) = (hp.n_head as usize, hp.n_head_kv as usize);
    let head_dim = hp.head_dim as usize;
    let eps = hp.rms_eps;
    let t = pos.len();
    let l = Some(il);

    let q_full = linear(cur, &w.wq, n_embd); // [T, n_head, 2, head_dim]
    let mut q = Vec::with_capacity(t * n_head * head_dim); // [T, n_head, head_dim]
    let mut gate = Vec::with_capacity(t * n_head * head_dim); // [T, n_head, head_dim]
    for pair in q_full.chunks_exact(2 * head_dim) {
        q.extend_from_slice(&pair[..head_dim]);
        gate.extend_from_slice(&pair[head_dim..]);
    }
    let q = rms_norm(&q, head_dim, Some(&w.q_norm), eps);
    let k = linear(cur, &w.wk, n_embd); // [T, n_head_kv, head_dim]
    let k = rms_norm(&k, head_dim, Some(&w.k_norm), eps);
    let v = linear(cur, &w.wv, n_embd); // [T, n_head_kv, head_dim]

    let pos_i32: Vec<i32> = pos.iter().map(|&p| p as i32).collect();
    let yarn = Some(&hp.rope_yarn);
    let q = m.rope.rotate(&q, &pos_i32, n_head, head_dim, yarn, None);
    let k = m.rope.rotate(&k, &pos_i32, n_head_kv, head_dim, yarn, None);
    rec.put("q", l, &[t, n_head, head_dim], &q);
    rec.put("k", l, &[t, n_head_kv, head_dim], &k);
    rec.put("v", l, &[t, n_head_kv, head_dim], &v);

    cache.append(il, &k, &v)?;
    let kv_len = pos.last().map_or(0, |&p| p as usize + 1); // L
    let (k_all, v_all) = cache.layer(il).unwrap_or_default(); // [L, n_head_kv, head_dim] each
    if k_all.len() != kv_len * n_head_kv * head_dim || v_all.len() != k_all.len() {
        return Err(ForwardError::Position {
            start_pos: pos.first().map_or(0, |&p| p as usize),
            cache_len: k_all.len() / (n_head_kv * head_dim).max(1),
        });
    }
    let dims = AttnDims {
        n_q: t,
        n_head,
        n_kv_heads: n_head_kv,
        head_dim,
        kv_len,
    };
    let kq_scale = 1.0 / (head_dim as f32).sqrt();
    let kqv = attention(dims, &q, k_all, v_all, Mask::Causal(pos), kq_scale); // [T, n_head * head_dim]
    rec.put("kqv_out", l, &[t, n_head * head_dim], &kqv);
    let gated: Vec<f32> = kqv
        .iter()
        .zip(&gate)
        .map(|(&o, &g)| o * sigmoid(g))
        .collect(); // [T, n_head * head_dim]
    rec.put("attn_gated", l, &[t, n_head * head_dim], &gated);
    Ok(linear(&gated, &w.wo, n_head * head_dim)) // [T, n_embd]
}
