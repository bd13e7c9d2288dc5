//! The recurrent state of a hybrid model's forward, and how it follows the KV cache back.
//!
//! A DeltaNet layer's state (conv window and S matrix) holds every row it has seen; unlike K/V
//! rows it cannot be cut at a position. A rollback therefore restores a checkpoint and replays
//! the rows to keep: [`Forward::checkpoint`] copies every state once (before a verify batch),
//! [`Forward::truncate`] to a position `p` between the checkpoint and now restores the copy and
//! reruns the `p − checkpoint` kept rows through the model (their K/V are rewritten with the same
//! bits, the recurrence runs row by row in both passes, so the state is exactly the state after
//! those rows). The memory is one state copy, whatever the verify length: llama.cpp keeps
//! `1 + n_rs_seq` copies (one per draft position) instead. A step starting at position 0 zeroes
//! the state first. The copies and clears are recorded at the head of the next step's own
//! command buffer ([`Forward::step`]; no submit of their own): a caller that records a step's
//! dispatches itself (`prepare` + `record`) runs without them.
//!
//! The log changes only with a committed step: the pending operations are done, the step's
//! rows join the replay list (or, past [`MAX_REPLAY`] rows since the checkpoint, the checkpoint
//! is dropped). A step refused or failed before its submit leaves the log as it was, the
//! pending operations included, so the next step still runs them and a later rollback replays
//! only rows the cache holds.

use crate::gpu::GpuContext;
use crate::kernels::launch::{PreOp, Prelude};
use crate::{Error, Result};

use super::Forward;

/// Rows a rollback replays at most: past this many rows since the checkpoint it is dropped.
pub(crate) const MAX_REPLAY: usize = 4096;

/// A state operation waiting for the next step's command buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateOp {
    /// Zero every state.
    Zero,
    /// Copy every state into the checkpoint.
    Checkpoint,
    /// Copy the checkpoint back into every state.
    Restore,
}

/// What a step does to the log once it is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogStep {
    /// Nothing beyond the pending operations (a dense model, or no checkpoint to replay from).
    Keep,
    /// A step from row 0: the sequence starts over, the state zeroed at the step's head.
    StartOver,
    /// The step's rows join those a rollback replays.
    Extend,
    /// Past [`MAX_REPLAY`] rows since the checkpoint: the checkpoint is dropped.
    Drop,
}

/// Where the state stands relative to a checkpoint.
#[derive(Debug, Default, Clone)]
pub(crate) struct StateLog {
    /// Position (rows seen) when the checkpoint was taken.
    pub ckpt_pos: Option<u32>,
    /// Tokens run since the checkpoint, in order (what a rollback replays).
    pub since: Vec<u32>,
    /// Operations for the next step's prelude, in order.
    pub pending: Vec<StateOp>,
}

impl Forward {
    /// Whether the model carries a recurrent state.
    pub fn is_recurrent(&self) -> bool {
        self.buffers.hybrid.is_some()
    }

    /// Zeroes every recurrent state (a sequence starting over) with the next step.
    pub(crate) fn zero_state(&mut self) {
        let mut pending = std::mem::take(&mut self.state_log.pending);
        pending.push(StateOp::Zero);
        self.state_log = StateLog {
            pending,
            ..StateLog::default()
        };
    }

    /// What a step of `m` rows from row `start` does to the log (applied by
    /// [`Forward::commit_log`] once the step is committed).
    pub(crate) fn log_step(&self, start: u32, m: usize) -> LogStep {
        let log = &self.state_log;
        if !self.is_recurrent() {
            LogStep::Keep
        } else if start == 0 {
            LogStep::StartOver
        } else if log.ckpt_pos.is_none() {
            LogStep::Keep
        } else if log.since.len().saturating_add(m) > MAX_REPLAY {
            LogStep::Drop
        } else {
            LogStep::Extend
        }
    }

    /// The recorded form of the pending state operations, then the zeroing of a step that
    /// starts over (for the submit of a step that does `step`).
    pub(crate) fn prelude(&self, step: LogStep) -> Prelude<'_> {
        let mut ops = Vec::new();
        let Some(hb) = &self.buffers.hybrid else {
            return Prelude { ops };
        };
        let pairs = hb
            .states
            .iter()
            .flatten()
            .zip(hb.checkpoint.iter().flatten());
        let zero = (step == LogStep::StartOver).then_some(StateOp::Zero);
        for op in self.state_log.pending.iter().copied().chain(zero) {
            match op {
                StateOp::Zero => ops.extend(hb.states.iter().flatten().map(PreOp::Clear)),
                StateOp::Checkpoint => ops.extend(pairs.clone().map(|(s, c)| PreOp::Copy(s, c))),
                StateOp::Restore => ops.extend(pairs.clone().map(|(s, c)| PreOp::Copy(c, s))),
            }
        }
        Prelude { ops }
    }

    /// After a committed step of `tokens` that did `step`: its prelude ran, and the log follows
    /// the rows.
    pub(crate) fn commit_log(&mut self, step: LogStep, tokens: &[u32]) {
        let log = &mut self.state_log;
        log.pending.clear();
        match step {
            LogStep::Keep => {}
            LogStep::StartOver | LogStep::Drop => *log = StateLog::default(),
            LogStep::Extend => log.since.extend_from_slice(tokens),
        }
    }

    /// Copies the recurrent state aside (with the next step) so that [`Forward::truncate`] can
    /// go back to here. Nothing for dense models.
    pub fn checkpoint(&mut self) -> Result<()> {
        if !self.is_recurrent() {
            return Ok(());
        }
        let mut pending = std::mem::take(&mut self.state_log.pending);
        pending.push(StateOp::Checkpoint);
        self.state_log = StateLog {
            ckpt_pos: Some(self.kv.len(0)?),
            since: Vec::new(),
            pending,
        };
        Ok(())
    }

    /// Whether [`Forward::truncate`] can go back to `pos`.
    pub fn can_truncate(&self, pos: u32) -> bool {
        let Ok(len) = self.kv.len(0) else {
            return false;
        };
        if self.ring() && !crate::model::gemma3::ring_can_truncate(len, pos, self.max_rows) {
            return false;
        }
        if !self.is_recurrent() || pos == len || pos == 0 {
            return pos <= len;
        }
        matches!(self.state_log.ckpt_pos, Some(c) if c <= pos && pos <= len)
    }

    /// Drops the rows from `pos` on: the KV cache's, and for a hybrid model the recurrent
    /// state's (restoring the checkpoint and replaying the kept rows; see the module header).
    /// An error names the positions where no checkpoint covers `pos`.
    pub fn truncate(&mut self, ctx: &GpuContext, pos: u32) -> Result<()> {
        let len = self.kv.len(0)?;
        if self.ring() && !crate::model::gemma3::ring_can_truncate(len, pos, self.max_rows) {
            return Err(Error::Usage(format!(
                "the sliding layers' ring caches cannot go back from row {len} to row {pos} \
                 (at most {} rows, or to 0)",
                self.max_rows
            )));
        }
        if !self.is_recurrent() || pos == len {
            self.kv.truncate_to(0, pos)?;
            return Ok(());
        }
        if pos == 0 {
            self.kv.truncate_to(0, 0)?;
            self.zero_state();
            return Ok(());
        }
        let ckpt = match self.state_log.ckpt_pos {
            Some(c) if c <= pos && pos <= len => c,
            _ => {
                return Err(Error::Usage(format!(
                    "the recurrent state cannot go back from row {len} to row {pos}: no \
                     checkpoint at or before it since ({:?})",
                    self.state_log.ckpt_pos
                )))
            }
        };
        let keep: Vec<u32> = self.state_log.since[..(pos - ckpt) as usize].to_vec();
        self.kv.truncate_to(0, ckpt)?;
        self.state_log.pending.push(StateOp::Restore);
        self.state_log.since.clear();
        // Replay the kept rows without logits or taps; the last step's logits stay readable.
        let n_logits = self.n_logits;
        for chunk in keep.chunks(self.max_rows as usize) {
            self.run_inner(ctx, chunk, 0, false, false)?;
        }
        self.n_logits = n_logits;
        Ok(())
    }
}
