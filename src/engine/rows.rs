//! What commands read and set of an [`Engine`]'s sequences without reaching through to its
//! forward: the model's shape, the sequences' capacity and committed rows, cutting a sequence
//! back, the greedy ids of the last step, an embedding's hidden rows, and the profiling hooks of
//! `flint bench --profile`. Each is a view of [`crate::model::forward::batch::BatchForward`].

use crate::kernels::launch::Dispatch;
use crate::model::forward::batch::Segment;
use crate::model::Hparams;
use crate::Result;

use super::Engine;

impl Engine {
    /// The target's hyperparameters.
    pub fn hp(&self) -> &Hparams {
        self.fwd.hp()
    }

    /// The vocabulary size (the width of a logits row).
    pub fn n_vocab(&self) -> u32 {
        self.fwd.hp().n_vocab
    }

    /// Sequences (server slots) the engine holds.
    pub fn n_seq(&self) -> usize {
        self.fwd.n_seq()
    }

    /// Rows each sequence's cache holds.
    pub fn capacity(&self) -> u32 {
        self.fwd.capacity()
    }

    /// Rows one step takes at most.
    pub fn max_rows(&self) -> u32 {
        self.fwd.max_rows()
    }

    /// Rows sequence `seq` has committed.
    pub fn rows(&self, seq: usize) -> Result<u32> {
        Ok(self.fwd.kv().len(seq)?)
    }

    /// Whether sequence `seq` can be cut back to `pos` rows (a hybrid only to its checkpoint).
    pub fn can_truncate(&self, seq: usize, pos: u32) -> bool {
        self.fwd.can_truncate(seq, pos)
    }

    /// Cuts sequence `seq` back to `pos` rows.
    pub fn truncate(&mut self, seq: usize, pos: u32) -> Result<()> {
        self.fwd.truncate(seq, pos)
    }

    /// Checkpoints sequence `seq`'s recurrent state before rows that may be cut back.
    pub fn checkpoint(&mut self, seq: usize) -> Result<()> {
        self.fwd.checkpoint(seq)
    }

    /// Marks `rows` rows of sequence `seq` committed without running them (a benchmark's depth).
    pub fn assume_rows(&mut self, seq: usize, rows: u32) -> Result<()> {
        self.fwd.assume_rows(seq, rows)
    }

    /// Drops the grammar masks the last step applied.
    pub fn clear_mask(&mut self) {
        self.fwd.clear_mask();
    }

    /// The greedy id of every logits row of the last step.
    pub fn argmax(&self) -> Result<Vec<u32>> {
        self.fwd.argmax(&self.ctx)
    }

    /// The final hidden states `[m, n_embd]` of rows `row0..row0 + m` of the last step
    /// (an embedding's pooled rows).
    pub fn hidden(&self, row0: u32, m: u32) -> Result<Vec<f32>> {
        self.fwd.hidden(&self.ctx, row0, m)
    }

    /// Rows sequence `seq`'s tap staging takes per step.
    pub fn tap_capacity(&self, seq: usize) -> u32 {
        self.fwd.tap_capacity(seq)
    }

    /// Points sequence `seq`'s taps at staging row `row`.
    pub fn set_tap_row(&mut self, seq: usize, row: u32) -> Result<()> {
        self.fwd.set_tap_row(seq, row)
    }

    /// Sets `segs` up as a step would and lists its dispatches, submitting nothing
    /// (`flint bench --profile`).
    pub fn record_step(&mut self, segs: &[Segment<'_>]) -> Result<Vec<&Dispatch>> {
        self.fwd.record_step(&self.ctx, segs)
    }
}
