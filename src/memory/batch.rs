//! The plan of every run (`flint serve -np N`; `generate`, `chat` and `bench` are `-np 1`):
//! every active request's rows go through one forward per step, so the activation scratch
//! exists once, sized for the row budget (`-ub`, and at least every slot's verify rows), and
//! each slot has only its own K/V caches and, with DSpark, its own drafter (`drafter.*` for slot 0, `slot{s}.drafter.*`).
//!
//! Buffers beside the target's weights:
//! ```text
//! kv.{k,v}.{il}, slot{s}.kv.{k,v}.{il}   [n_ctx rows] per slot s = 1..N (slot 0 unprefixed)
//! act.*, io.tokens, io.positions          [n_ubatch rows] (at least N: a decode row per slot)
//! act.attn_state                          fused attention state [n_ubatch, n_head]
//! act.head_in                             [N·r, d] the rows whose logits a step computes
//! logits [N·r, V], io.argmax [N·r], sample.partials   (r = n_draft + 1 with a drafter, else 1)
//! ```
//! No split-KV decode partials: a batch's attention runs the fused kernel per slot, which is
//! bit-identical per row to the decode path.

use super::layout::{f32s, words};
use super::{target, DeviceLimits, DraftParams, DrafterShape, Kind, Owner, PlannedBuffer};
use super::{Placement, RunParams, TargetShape};

/// Rows of one sequence's verify step: `n_draft + 1` with a drafter, else 1; at least
/// `p.verify_rows` (`flint bench --sps`).
pub fn verify_rows(p: &RunParams) -> u32 {
    p.draft
        .as_ref()
        .map_or(1, |d| d.n_draft + 1)
        .max(p.verify_rows)
}

/// Rows whose logits one step computes at most: every slot's verify rows.
pub fn logit_rows(p: &RunParams) -> u32 {
    p.n_seq.max(1).saturating_mul(verify_rows(p))
}

/// Rows one batched step takes at most: the ubatch, and at least every slot's verify rows.
pub fn max_rows(p: &RunParams) -> u32 {
    p.n_ubatch.max(logit_rows(p)).max(1)
}

/// Every buffer of a batched run of `p.n_seq` slots.
pub fn buffers(
    target: TargetShape<'_>,
    drafter: Option<DrafterShape<'_>>,
    p: &RunParams,
    limits: &DeviceLimits,
) -> Vec<PlannedBuffer> {
    let (hp, tensors) = (target.hp, target.tensors);
    let n_seq = u64::from(p.n_seq.max(1));
    let n_out = u64::from(logit_rows(p));
    let one = RunParams {
        n_seq: 1,
        n_ubatch: max_rows(p),
        verify_rows: 1,
        draft: None,
        ..p.clone()
    };
    let mut out = target::buffers(hp, tensors, &one, limits);
    // act.attn_partials stays (one row's split-KV partials): model::forward::batch_attn.
    let vocab = u64::from(hp.n_vocab);
    let rows32 = u32::try_from(n_out).unwrap_or(u32::MAX);
    for b in &mut out {
        b.bytes = match b.name.as_str() {
            "logits" => f32s(n_out * vocab),
            "sample.partials" => crate::kernels::ops::select::scratch_bytes(rows32, hp.n_vocab, 1),
            "io.argmax" => words(n_out * 4),
            _ => b.bytes,
        };
    }
    out.push(PlannedBuffer {
        owner: Owner::Target,
        kind: Kind::Compute,
        name: "act.head_in".into(),
        bytes: f32s(n_out * u64::from(hp.n_embd)),
        bound_whole: true,
        placement: Placement::Device,
    });
    if let (Some(d), Some(dp)) = (drafter, p.draft.as_ref()) {
        out.extend(drafter_buffers(d, dp, p, limits));
    }
    // Per slot: its caches, its recurrent state and its drafter (the drafter's weights are
    // shared by the slots, as the target's are).
    let caches: Vec<PlannedBuffer> = out
        .iter()
        .filter(|b| {
            matches!(b.kind, Kind::Kv | Kind::Recurrent | Kind::Rollback)
                || (b.owner == Owner::Drafter && b.kind != Kind::Weights)
        })
        .cloned()
        .collect();
    for s in 1..n_seq {
        out.extend(caches.iter().map(|b| PlannedBuffer {
            name: slot_name(s as usize, &b.name),
            ..b.clone()
        }));
    }
    out
}

/// One slot's drafter buffers (unprefixed: what each slot's drafter allocates by name).
pub fn drafter_buffers(
    d: DrafterShape<'_>,
    dp: &DraftParams,
    p: &RunParams,
    limits: &DeviceLimits,
) -> Vec<PlannedBuffer> {
    let one = RunParams {
        n_seq: 1,
        ..p.clone()
    };
    super::drafter::buffers(d.meta, d.tensors, &one, dp, limits)
}

/// The plan name of slot `seq`'s copy of a per-slot buffer `base` (slot 0: `base` itself).
pub fn slot_name(seq: usize, base: &str) -> String {
    if seq == 0 {
        base.to_string()
    } else {
        format!("slot{seq}.{base}")
    }
}
