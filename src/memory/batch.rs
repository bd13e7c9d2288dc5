//! The plan of a batched server (`flint serve -np N` on a dense model without a drafter): every
//! active request's rows go through one forward per step, so the activation scratch exists once,
//! sized for the row budget (`-ub`), and each slot has only its own K/V caches.
//!
//! Buffers beside the target's weights:
//! ```text
//! kv.{k,v}.{il}, slot{s}.kv.{k,v}.{il}   [n_ctx rows] per slot s = 1..N (slot 0 unprefixed)
//! act.*, io.tokens, io.positions          [n_ubatch rows] (at least N: a decode row per slot)
//! act.attn_state                          fused attention state [n_ubatch, n_head]
//! act.head_in                             [N, d] the rows whose logits a step computes
//! logits [N, V], io.argmax [N], sample.partials
//! ```
//! No split-KV decode partials: a batch's attention runs the fused kernel per slot, which is
//! bit-identical per row to the decode path.

use crate::gguf::TensorInfo;
use crate::model::Hparams;

use super::layout::{f32s, words};
use super::{target, DeviceLimits, Kind, Owner, PlannedBuffer, RunParams};

/// Whether `-np n_seq` runs batched steps: several slots, a dense model (a hybrid's recurrent
/// state is per slot and not batched yet) and no drafter (slots with a drafter take turns).
pub fn batched(hp: &Hparams, drafter: bool, n_seq: u32) -> bool {
    n_seq > 1 && hp.hybrid.is_none() && !drafter
}

/// Rows one batched step takes at most: the ubatch, and at least a decode row per slot.
pub fn max_rows(p: &RunParams) -> u32 {
    p.n_ubatch.max(p.n_seq).max(1)
}

/// Every buffer of a batched run of `p.n_seq` slots.
pub fn buffers(
    hp: &Hparams,
    tensors: &[TensorInfo],
    p: &RunParams,
    limits: &DeviceLimits,
) -> Vec<PlannedBuffer> {
    let n_seq = u64::from(p.n_seq.max(1));
    let one = RunParams {
        n_seq: 1,
        n_ubatch: max_rows(p),
        verify_rows: 1,
        draft: None,
        ..p.clone()
    };
    let mut out = target::buffers(hp, tensors, &one, limits);
    out.retain(|b| b.name != "act.attn_partials");
    let vocab = u64::from(hp.n_vocab);
    let rows32 = u32::try_from(n_seq).unwrap_or(u32::MAX);
    for b in &mut out {
        b.bytes = match b.name.as_str() {
            "logits" => f32s(n_seq * vocab),
            "sample.partials" => crate::kernels::ops::select::scratch_bytes(rows32, hp.n_vocab, 1),
            "io.argmax" => words(n_seq * 4),
            _ => b.bytes,
        };
    }
    out.push(PlannedBuffer {
        owner: Owner::Target,
        kind: Kind::Compute,
        name: "act.head_in".into(),
        bytes: f32s(n_seq * u64::from(hp.n_embd)),
        bound_whole: true,
    });
    let caches: Vec<PlannedBuffer> = out.iter().filter(|b| b.kind == Kind::Kv).cloned().collect();
    for s in 1..n_seq {
        out.extend(caches.iter().map(|b| PlannedBuffer {
            name: slot_name(s as usize, &b.name),
            ..b.clone()
        }));
    }
    out
}

/// The plan name of slot `seq`'s copy of a per-slot buffer `base` (slot 0: `base` itself).
pub fn slot_name(seq: usize, base: &str) -> String {
    if seq == 0 {
        base.to_string()
    } else {
        format!("slot{seq}.{base}")
    }
}
