//! The target model's buffers: weights (per tensor, as uploaded), the KV cache (per layer, K and
//! V), activation scratch for the largest batch (the prefill ubatch or the verify width), decode
//! attention partials, logits, inputs and the logits readback.

use crate::gguf::TensorInfo;
use crate::model::Hparams;

use super::layout::{attn_partials_bytes, f32s, kv_caches, weight_bytes, words};
use super::{DeviceLimits, Kind, Owner, PlannedBuffer, RunParams};

fn buf(kind: Kind, name: impl Into<String>, bytes: u64, bound_whole: bool) -> PlannedBuffer {
    PlannedBuffer {
        owner: Owner::Target,
        kind,
        name: name.into(),
        bytes,
        bound_whole,
    }
}

/// Rows of a sequence's verify batch: `n_draft + 1` with a drafter, at least `verify_rows`.
fn verify_rows(p: &RunParams) -> u64 {
    let draft = p.draft.as_ref().map_or(1, |d| u64::from(d.n_draft) + 1);
    draft.max(u64::from(p.verify_rows))
}

/// Rows of the largest batch the target processes: a prefill ubatch, or every sequence's verify
/// batch ([`verify_rows`]).
pub fn max_rows(p: &RunParams) -> u64 {
    let verify = verify_rows(p);
    u64::from(p.n_ubatch)
        .max(u64::from(p.n_seq) * verify)
        .max(1)
}

/// Rows whose logits are read: every verify row of every sequence (one each without a drafter
/// or `verify_rows`).
pub fn logit_rows(p: &RunParams) -> u64 {
    u64::from(p.n_seq) * verify_rows(p)
}

/// Every target buffer.
pub fn buffers(
    hp: &Hparams,
    tensors: &[TensorInfo],
    p: &RunParams,
    limits: &DeviceLimits,
) -> Vec<PlannedBuffer> {
    let mut out = Vec::new();
    // Weights: split by rows past the binding limit, so never bound whole.
    for t in tensors {
        out.push(buf(
            Kind::Weights,
            t.name.clone(),
            weight_bytes(t, limits.max_buffer_size, limits.max_storage_binding),
            false,
        ));
    }
    // KV cache: n_ctx rows per sequence, per layer.
    let rows = u64::from(p.n_ctx) * u64::from(p.n_seq);
    for (name, bytes) in kv_caches("", hp, (p.type_k, p.type_v), rows) {
        out.push(buf(Kind::Kv, name, bytes, true));
    }
    // Activation scratch for the largest batch of n rows (f32, row-major).
    let n = max_rows(p);
    let (d, q, k, v, f) = (
        u64::from(hp.n_embd),
        u64::from(hp.q_dim()),
        u64::from(hp.k_dim()),
        u64::from(hp.v_dim()),
        u64::from(hp.n_ff),
    );
    for (name, width) in [
        ("act.x", d),    // [n, d] residual stream
        ("act.xn", d),   // [n, d] normed input / sublayer output
        ("act.q", q),    // [n, n_head * head_dim]
        ("act.k", k),    // [n, n_head_kv * head_dim]
        ("act.v", v),    // [n, n_head_kv * head_dim_v]
        ("act.attn", q), // [n, n_head * head_dim_v]
        ("act.gate", f), // [n, n_ff]
        ("act.up", f),   // [n, n_ff]
        ("act.glu", f),  // [n, n_ff] act(gate) * up
    ] {
        out.push(buf(Kind::Compute, name, f32s(n * width), true));
    }
    // Split-KV decode partials: the one compute buffer that grows with n_ctx, by
    // n_head × (head_dim_v + 2) floats per 256 context rows (< 1 % of the KV cache).
    out.push(buf(
        Kind::Compute,
        "act.attn_partials",
        attn_partials_bytes(
            u64::from(p.n_seq),
            u64::from(hp.n_head),
            u64::from(p.n_ctx),
            u64::from(hp.head_dim_v),
        ),
        true,
    ));
    // Fused multi-row attention state: (max, sum, next split, pad) per row and head.
    out.push(buf(
        Kind::Compute,
        "act.attn_state",
        16 * n * u64::from(hp.n_head),
        true,
    ));
    let n_out = logit_rows(p);
    let vocab = u64::from(hp.n_vocab);
    out.push(buf(Kind::Compute, "logits", f32s(n_out * vocab), true));
    // Argmax scratch (one (value, id) pair per list per row) and the argmax ids.
    let rows32 = u32::try_from(n_out).unwrap_or(u32::MAX);
    out.push(buf(
        Kind::Compute,
        "sample.partials",
        crate::kernels::ops::select::scratch_bytes(rows32, hp.n_vocab, 1),
        true,
    ));
    out.push(buf(Kind::Io, "io.argmax", words(n_out * 4), true));
    out.push(buf(Kind::Io, "io.tokens", words(n * 4), true));
    out.push(buf(Kind::Io, "io.positions", words(n * 4), true));
    out
}
