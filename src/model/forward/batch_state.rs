//! The recurrent state of each sequence of a batched step (hybrid models), and how it follows
//! the sequence's K/V rows back.
//!
//! Every sequence owns, per DeltaNet layer, its conv and delta-rule state and a checkpoint of
//! them (plan names `rs.*` for sequence 0, `slot{s}.rs.*` for the others), and its own conv and
//! delta-rule dispatches bound to them. The kernels take the sequence's rows of the step
//! (`row0 .. row0 + n`, [`DeltaSegment`]) and do the state's bookkeeping inside the same
//! dispatch, so a step records no copy or clear of its own:
//! - a sequence whose rows start at position 0 starts from zeros;
//! - [`BatchForward::checkpoint`] asks the sequence's next step to copy the state into the
//!   checkpoint before its new rows;
//! - [`BatchForward::truncate`] to a position `p` after the checkpoint `c` keeps the K/V rows
//!   below `p` and marks the `p − c` kept rows for replay: the sequence's next step starts from
//!   the checkpoint and runs those rows again (their K/V rewritten with the same bits, no logits,
//!   no taps) before its new ones, inside the shared step. A replay that does not fit in the
//!   step's rows, or comes with no step, runs as steps of its own.
//!
//! The recurrence runs row by row with the same arithmetic in every pass, so after a replay the
//! state is bit for bit the state after those rows (`tests/batch_hybrid.rs`). The log changes
//! only when a step is committed; a step refused before its submit leaves it as it was.

use crate::gpu::GpuContext;
use crate::kernels::launch::Dispatch;
use crate::kernels::ops::delta::{DeltaRule, Segment as DeltaSegment, SsmConv, StateInit};
use crate::memory::alloc::Allocator;
use crate::memory::batch::slot_name;
use crate::model::hybrid::LayerKind;
use crate::model::weights::Mixer;
use crate::{Error, Result};

use super::layer::conv_and_rule;
use super::Forward;

/// Rows a rollback replays at most: past this many rows since the checkpoint it is dropped.
pub(crate) const MAX_REPLAY: usize = 4096;

/// One DeltaNet layer's calls for one sequence.
#[derive(Debug)]
pub(super) struct SeqDelta {
    conv: SsmConv,
    rule: DeltaRule,
}

/// Where a sequence's recurrent state stands relative to its checkpoint.
#[derive(Debug, Default, Clone)]
pub(super) struct SeqLog {
    /// Position of the checkpoint (taken, or taken by the next step when `ckpt_pending`).
    pub ckpt_pos: Option<u32>,
    /// Tokens after the checkpoint the cache holds, in order.
    pub since: Vec<u32>,
    /// Rows to run again before the sequence's next rows (a rollback), at the positions just
    /// below its length.
    pub replay: Vec<u32>,
    /// The next rows start from the checkpoint, not the state.
    pub restore: bool,
    /// The next step copies the state into the checkpoint after the replay, before new rows.
    pub ckpt_pending: bool,
}

/// Sequence `s`'s DeltaNet calls, one per DeltaNet layer in layer order, over its own state
/// (sequence 0: the forward's own buffers).
pub(super) fn seq_delta(
    ctx: &GpuContext,
    fwd: &Forward,
    s: usize,
    alloc: &mut Allocator<'_>,
) -> Result<Vec<SeqDelta>> {
    let (Some(_), Some(hb)) = (&fwd.hp.hybrid, &fwd.buffers.hybrid) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let layers = (0..fwd.hp.n_layer).filter(|&il| fwd.hp.layer_kind(il) == LayerKind::DeltaNet);
    for (k, il) in layers.enumerate() {
        let Some(Mixer::DeltaNet(w)) = fwd.weights.layers.get(il as usize).map(|l| &l.mixer) else {
            return Err(Error::Usage(format!("layer {il}: no DeltaNet weights")));
        };
        let owned;
        let [conv_s, ssm_s, conv_c, ssm_c] = if s == 0 {
            let (Some([a, b]), Some([c, d])) = (hb.states.get(k), hb.checkpoint.get(k)) else {
                return Err(Error::Usage(format!("layer {il}: no recurrent state")));
            };
            [a, b, c, d]
        } else {
            let mut get = |base: String| alloc.storage(&slot_name(s, &base));
            owned = [
                get(format!("rs.conv.{il}"))?,
                get(format!("rs.ssm.{il}"))?,
                get(format!("rs.ckpt.conv.{il}"))?,
                get(format!("rs.ckpt.ssm.{il}"))?,
            ];
            let [a, b, c, d] = &owned;
            [a, b, c, d]
        };
        let bufs = [conv_s, ssm_s, conv_c, ssm_c];
        let (conv, rule) = conv_and_rule(ctx, &fwd.hp, hb, w, bufs, fwd.max_rows())?;
        out.push(SeqDelta { conv, rule });
    }
    Ok(out)
}

/// Sets a sequence's DeltaNet calls for its segment of a step.
pub(super) fn set_delta(ctx: &GpuContext, delta: &mut [SeqDelta], seg: DeltaSegment) -> Result<()> {
    for d in delta {
        d.conv.set_segment(ctx, seg)?;
        d.rule.set_segment(ctx, seg)?;
    }
    Ok(())
}

/// DeltaNet layer `k`'s calls (conv, then rule) for a sequence.
pub(super) fn delta_calls(delta: &[SeqDelta], k: usize) -> impl Iterator<Item = &Dispatch> {
    delta
        .get(k)
        .into_iter()
        .flat_map(|d| [&d.conv.dispatch, &d.rule.dispatch])
}

impl SeqLog {
    /// The segment of a step that runs the first `r` replay rows (all of them when `new > 0`)
    /// and then `new` rows from `row0`, the rows starting at position `start`.
    pub fn segment(&self, row0: u32, start: u32, r: u32, new: u32) -> DeltaSegment {
        let init = if start == 0 {
            StateInit::Zero
        } else if self.restore {
            StateInit::Checkpoint
        } else {
            StateInit::Carry
        };
        let last = r as usize == self.replay.len();
        DeltaSegment {
            row0,
            n_rows: r + new,
            init,
            ckpt_row: (self.ckpt_pending && last).then_some(r),
        }
    }

    /// After a committed step that ran the first `r` replay rows and then `new` from position
    /// `start`.
    pub fn commit(&mut self, start: u32, r: usize, new: &[u32]) {
        let last = r == self.replay.len();
        self.replay.drain(..r.min(self.replay.len()));
        self.restore = false;
        if start == 0 && r == 0 && !self.ckpt_pending {
            self.ckpt_pos = None;
            self.since.clear();
        }
        if last {
            self.ckpt_pending = false;
        }
        if self.ckpt_pos.is_some() && !new.is_empty() {
            if self.since.len() + new.len() > MAX_REPLAY {
                self.ckpt_pos = None;
                self.since.clear();
            } else {
                self.since.extend_from_slice(new);
            }
        }
    }

    /// Asks the next step to checkpoint the state at `len` rows.
    pub fn checkpoint(&mut self, len: u32) {
        self.ckpt_pos = Some(len);
        self.since.clear();
        self.ckpt_pending = true;
    }

    /// Whether the state can go back from `len` rows to `pos`.
    pub fn can_truncate(&self, len: u32, pos: u32) -> bool {
        pos == len
            || pos == 0
            || matches!(self.ckpt_pos, Some(c) if c <= pos && pos <= len && !self.ckpt_pending)
    }

    /// Goes back from `len` rows to `pos`: the rows kept after the checkpoint wait for replay.
    pub fn truncate(&mut self, len: u32, pos: u32) -> Result<()> {
        if pos == len {
            return Ok(());
        }
        if pos == 0 {
            *self = SeqLog::default();
            return Ok(());
        }
        match self.ckpt_pos {
            Some(c) if c <= pos && pos <= len && !self.ckpt_pending => {
                self.since.truncate((pos - c) as usize);
                self.replay = self.since.clone();
                self.restore = true;
                Ok(())
            }
            ckpt => Err(Error::Usage(format!(
                "the recurrent state cannot go back from row {len} to row {pos}: no checkpoint \
                 at or before it since ({ckpt:?})"
            ))),
        }
    }
}
