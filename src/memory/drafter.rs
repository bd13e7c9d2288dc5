//! The DSpark drafter's buffers (docs/DSPARK.md). Only its KV cache depends on the context:
//! - weights (the drafter's own tensors; `token_embd` / `output` are borrowed from the target
//!   when the drafter has none, and cost nothing here);
//! - KV cache per drafter layer, sized by the context or by a position window;
//! - injection: a staging buffer of `U` tap rows × `m·d_t` written by the target's forward, and
//!   the K/V-only pass's scratch for `U` rows (fc output, K, V): context rows get no queries;
//! - the draft pass: γ query rows per sequence (block embeddings, Q/K/V, attention output, FFN,
//!   logits, Markov bias, confidences); the block's K/V are appended to the cache behind the
//!   context rows for the draft and overwritten by the next injection.

use crate::gguf::TensorInfo;
use crate::model::DrafterMeta;

use super::layout::{f32s, kv_caches, weight_bytes, words};
use super::{DeviceLimits, DraftParams, Kind, Owner, Placement, PlannedBuffer, RunParams};

fn buf(kind: Kind, name: impl Into<String>, bytes: u64) -> PlannedBuffer {
    PlannedBuffer {
        owner: Owner::Drafter,
        kind,
        name: name.into(),
        bytes,
        bound_whole: kind != Kind::Weights,
        placement: Placement::Device,
    }
}

/// Every drafter buffer for run parameters `p` with draft parameters `dp`.
pub fn buffers(
    meta: &DrafterMeta,
    tensors: &[TensorInfo],
    p: &RunParams,
    dp: &DraftParams,
    limits: &DeviceLimits,
) -> Vec<PlannedBuffer> {
    let hp = &meta.hp;
    let mut out = Vec::new();
    // The log-SNR MLP (`log_snr_fc1`, `log_snr_fc2`) is evaluated once on the host at load and
    // never uploaded: its γ output rows `[γ, d]` are (`drafter.log_snr`).
    // The confidence head (`conf_proj` / `dspark.confidence_head`, weight and bias) is uploaded
    // as one f32 buffer `[d + R + 1]` (`drafter.conf`), whatever its stored type.
    let conf_head = |n: &str| n.contains("conf_proj") || n.contains("confidence_head");
    for t in tensors
        .iter()
        .filter(|t| !t.name.contains("log_snr_fc") && !conf_head(&t.name))
    {
        out.push(buf(
            Kind::Weights,
            format!("drafter.{}", t.name),
            weight_bytes(t, limits.max_buffer_size, limits.max_storage_binding),
        ));
    }
    if meta.has_confidence {
        let n = u64::from(hp.n_embd) + u64::from(meta.markov_rank) + 1;
        out.push(buf(Kind::Weights, "drafter.conf", f32s(n)));
    }
    if meta.log_snr.is_some() {
        let rows = u64::from(meta.block_size) * u64::from(hp.n_embd);
        out.push(buf(Kind::Compute, "drafter.log_snr", f32s(rows)));
    }
    let n_seq = u64::from(p.n_seq);
    // Context rows (or the window), plus the γ block rows a draft appends and the next
    // injection overwrites.
    let ctx_rows =
        (u64::from(dp.window.unwrap_or(p.n_ctx).min(p.n_ctx)) + u64::from(meta.block_size)) * n_seq;
    for (name, bytes) in kv_caches("drafter.", hp, (dp.type_k, dp.type_v), ctx_rows) {
        out.push(buf(Kind::Kv, name, bytes));
    }
    // A position window needs nothing more: a rebase moves the kept rows inside the caches
    // (K rotated by the move), through the injection's k / v scratch.
    let (d, q, k, v, f, vocab) = (
        u64::from(hp.n_embd),
        u64::from(hp.q_dim()),
        u64::from(hp.k_dim()),
        u64::from(hp.v_dim()),
        u64::from(hp.n_ff),
        u64::from(hp.n_vocab),
    );
    // Injection: U rows of taps in, K/V out; no queries, no attention, no FFN.
    let u = u64::from(dp.inject_chunk.max(1));
    out.push(buf(
        Kind::Staging,
        "drafter.inject.taps",
        f32s(u * meta.tap_width()),
    ));
    out.push(buf(Kind::Compute, "drafter.inject.g", f32s(u * d)));
    out.push(buf(Kind::Compute, "drafter.inject.k", f32s(u * k)));
    out.push(buf(Kind::Compute, "drafter.inject.v", f32s(u * v)));
    out.push(buf(Kind::Io, "drafter.inject.positions", words(u * 4)));
    // Draft pass: γ query rows per sequence.
    let r = u64::from(meta.block_size) * n_seq;
    out.push(buf(Kind::Io, "drafter.draft.tokens", words(r * 4)));
    out.push(buf(Kind::Io, "drafter.draft.positions", words(r * 4)));
    for (name, width) in [
        ("drafter.draft.x", d),
        ("drafter.draft.xn", d),
        ("drafter.draft.q", q),
        ("drafter.draft.k", k),
        ("drafter.draft.v", v),
        ("drafter.draft.attn", q),
        ("drafter.draft.gate", f),
        ("drafter.draft.up", f),
        ("drafter.draft.glu", f),
        ("drafter.draft.logits", vocab),
    ] {
        out.push(buf(Kind::Compute, name, f32s(r * width)));
    }
    // The draft block attends over cache ∪ block with the fused kernel: a fixed state per row
    // and head, no split partials.
    out.push(buf(
        Kind::Compute,
        "drafter.draft.attn_state",
        16 * r * u64::from(hp.n_head),
    ));
    if meta.markov_rank > 0 {
        out.push(buf(
            Kind::Compute,
            "drafter.draft.markov",
            f32s(r * u64::from(meta.markov_rank)),
        ));
    }
    // The Markov bias of the current slot.
    out.push(buf(
        Kind::Compute,
        "drafter.draft.bias",
        f32s(n_seq * vocab),
    ));
    // Per sequence: the anchor and γ draft ids, then γ confidences, read back.
    out.push(buf(
        Kind::Io,
        "drafter.draft.out",
        words((2 * r + n_seq) * 4),
    ));
    out
}
