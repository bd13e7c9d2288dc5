//! The target model's buffers: weights (per tensor, as uploaded), the KV cache (per layer, K and
//! V), activation scratch for the largest batch (the prefill ubatch or the verify width), decode
//! attention partials, logits, inputs and the logits readback.

use crate::gguf::TensorInfo;
use crate::model::hparams::LayerKind;
use crate::model::Hparams;

use super::layout::{attn_partials_bytes, f32s, kv_caches_by_layer, weight_bytes, words};
use super::{DeviceLimits, Kind, Owner, Placement, PlannedBuffer, RunParams};

fn buf(kind: Kind, name: impl Into<String>, bytes: u64, bound_whole: bool) -> PlannedBuffer {
    PlannedBuffer {
        owner: Owner::Target,
        kind,
        name: name.into(),
        bytes,
        bound_whole,
        placement: Placement::Device,
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
    for t in tensors
        .iter()
        .filter(|t| !mtp_tensor(hp, &t.name) && !host_tensor(hp, &t.name))
    {
        out.push(buf(
            Kind::Weights,
            t.name.clone(),
            weight_bytes(t, limits.max_buffer_size, limits.max_storage_binding),
            false,
        ));
    }
    // KV cache: n_ctx rows per sequence, per layer (a Gemma 3 sliding layer of one sequence:
    // a ring of window + max_rows rows, `model::gemma3::ring_rows`).
    let rows = u64::from(p.n_ctx) * u64::from(p.n_seq);
    let max32 = u32::try_from(max_rows(p)).unwrap_or(u32::MAX);
    let rows_of = |il| match crate::model::gemma3::ring_rows(hp, il, p.n_ctx, max32) {
        Some(r) if p.n_seq == 1 => u64::from(r),
        _ => rows,
    };
    for (name, bytes) in kv_caches_by_layer("", hp, (p.type_k, p.type_v), rows_of) {
        out.push(buf(Kind::Kv, name, bytes, true));
    }
    // Activation scratch for the largest batch of n rows (f32, row-major).
    let n = max_rows(p);
    // Gated attention (qwen35): the q projection writes q and its gate per head.
    let q_out = u64::from(hp.q_dim()) * if hp.attn_gated() { 2 } else { 1 };
    let (d, q, k, v, f) = (
        u64::from(hp.n_embd),
        u64::from(hp.q_dim()),
        u64::from(hp.k_dim()),
        u64::from(hp.v_dim()),
        u64::from(hp.n_ff),
    );
    for (name, width) in [
        ("act.x", d),     // [n, d] residual stream
        ("act.xn", d),    // [n, d] normed input / sublayer output
        ("act.q", q_out), // [n, n_head * head_dim] (x2 gated: q | gate per head)
        ("act.k", k),     // [n, n_head_kv * head_dim]
        ("act.v", v),     // [n, n_head_kv * head_dim_v]
        ("act.attn", q),  // [n, n_head * head_dim_v]
        ("act.gate", f),  // [n, n_ff]
        ("act.up", f),    // [n, n_ff]
        ("act.glu", f),   // [n, n_ff] act(gate) * up
    ] {
        out.push(buf(Kind::Compute, name, f32s(n * width), true));
    }
    if let Some(h) = &hp.hybrid {
        recurrent(&mut out, hp, h, n, u64::from(p.n_seq));
    }
    // MoE models: the MoE block's scratch (`model::moe::MoeHparams::scratch_widths`).
    for (name, width) in hp.moe.iter().flat_map(|m| m.scratch_widths(hp.n_embd)) {
        out.push(buf(
            Kind::Compute,
            format!("act.moe.{name}"),
            f32s(n * width),
            true,
        ));
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
    if let Some(g) = hp.gemma4.as_ref().filter(|g| g.n_embd_per_layer > 0) {
        // [n, L·P] per-layer embedding rows gathered on the host (`host_tensor`)
        let width = u64::from(g.n_embd_per_layer) * u64::from(hp.n_layer);
        out.push(buf(Kind::Io, "io.per_layer", f32s(n * width), true));
    }
    out
}

/// A hybrid model's DeltaNet scratch for `n` rows, and per DeltaNet layer its recurrent state
/// for `n_seq` sequences plus one checkpoint copy (what a speculative rollback restores: the
/// same bytes at any draft length).
fn recurrent(
    out: &mut Vec<PlannedBuffer>,
    hp: &Hparams,
    h: &crate::model::hparams::HybridHparams,
    n: u64,
    n_seq: u64,
) {
    let (conv, value, n_v) = (
        u64::from(h.conv_dim()),
        u64::from(h.value_dim()),
        u64::from(h.n_v_heads),
    );
    for (name, width) in [
        ("act.mixed", conv),                  // [n, conv_dim] pre-conv q | k | v
        ("act.conv", conv),                   // [n, conv_dim] conv output, then the gated output
        ("act.z", value),                     // [n, value_dim] output gate
        ("act.delta", value),                 // [n, value_dim] delta-rule output
        ("act.alpha", n_v),                   // [n, n_v]
        ("act.beta", n_v),                    // [n, n_v]
        ("act.agate", u64::from(hp.q_dim())), // [n, n_head * head_dim] attention gate
    ] {
        out.push(buf(Kind::Compute, name, f32s(n * width), true));
    }
    let layers = (0..hp.n_layer).filter(|&il| hp.layer_kind(il) == LayerKind::DeltaNet);
    for il in layers {
        let conv_state = f32s(n_seq * h.conv_state_len());
        let ssm_state = f32s(n_seq * h.ssm_state_len());
        out.push(buf(
            Kind::Recurrent,
            format!("rs.conv.{il}"),
            conv_state,
            true,
        ));
        out.push(buf(
            Kind::Recurrent,
            format!("rs.ssm.{il}"),
            ssm_state,
            true,
        ));
        out.push(buf(
            Kind::Rollback,
            format!("rs.ckpt.conv.{il}"),
            conv_state,
            true,
        ));
        out.push(buf(
            Kind::Rollback,
            format!("rs.ckpt.ssm.{il}"),
            ssm_state,
            true,
        ));
    }
}

/// A hybrid model's MTP block tensors (`blk.{il}.*` past the main-pass layers): never loaded.
/// Gemma 4's `per_layer_token_embd` (`[L·P, V]`, 2.15 GiB in E4B Q4_K_M) stays in the mapped
/// file, as llama.cpp keeps it (`TENSOR_READ_LAZY`): each step gathers its tokens' rows on the
/// host and uploads `L·P` floats per token (`io.per_layer`).
pub fn host_tensor(hp: &Hparams, name: &str) -> bool {
    hp.gemma4.is_some() && name == "per_layer_token_embd.weight"
}

fn mtp_tensor(hp: &Hparams, name: &str) -> bool {
    if hp.hybrid.is_none() {
        return false;
    }
    let layer = name
        .strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|n| n.parse::<u32>().ok());
    matches!(layer, Some(il) if il >= hp.n_layer)
}
