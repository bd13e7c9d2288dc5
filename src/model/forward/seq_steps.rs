//! One sequence's view of the target's forward: what load-time measurements (the SPS(B)
//! profile, a speculative cycle's costs) step through, sequence `seq` of the [`BatchForward`].

use super::batch::{BatchForward, Segment};
use crate::gpu::GpuContext;
use crate::Result;

/// Steps of one sequence: run rows at its next positions, read their argmax, and come back.
pub trait SeqSteps {
    /// Rows the sequence's cache holds.
    fn rows(&self) -> Result<u32>;
    /// Rows its cache can hold.
    fn capacity(&self) -> u32;
    /// Rows one step takes at most.
    fn max_rows(&self) -> u32;
    /// Runs `tokens` (`[m]`) at the next positions; logits for the last `n_logits` rows.
    fn step(&mut self, ctx: &GpuContext, tokens: &[u32], n_logits: u32) -> Result<()>;
    /// The argmax of each logits row of the last step.
    fn argmax(&self, ctx: &GpuContext) -> Result<Vec<u32>>;
    /// The next step's rows can be rolled back (a recurrent state's checkpoint).
    fn checkpoint(&mut self) -> Result<()>;
    /// Keeps the first `pos` rows.
    fn truncate(&mut self, ctx: &GpuContext, pos: u32) -> Result<()>;
    /// The next step's taps land from staging row `row` on.
    fn set_tap_row(&mut self, row: u32) -> Result<()>;
}

/// Sequence `seq` of a batched forward, stepped alone.
pub struct BatchSeq<'a> {
    pub fwd: &'a mut BatchForward,
    pub seq: usize,
}

impl SeqSteps for BatchSeq<'_> {
    fn rows(&self) -> Result<u32> {
        Ok(self.fwd.kv().len(self.seq)?)
    }
    fn capacity(&self) -> u32 {
        self.fwd.capacity()
    }
    fn max_rows(&self) -> u32 {
        self.fwd.max_rows()
    }
    fn step(&mut self, ctx: &GpuContext, tokens: &[u32], n_logits: u32) -> Result<()> {
        let seg = Segment {
            seq: self.seq,
            tokens,
            n_logits,
        };
        self.fwd.step(ctx, &[seg])
    }
    fn argmax(&self, ctx: &GpuContext) -> Result<Vec<u32>> {
        self.fwd.argmax(ctx)
    }
    fn checkpoint(&mut self) -> Result<()> {
        self.fwd.checkpoint(self.seq)
    }
    fn truncate(&mut self, _ctx: &GpuContext, pos: u32) -> Result<()> {
        self.fwd.truncate(self.seq, pos)
    }
    fn set_tap_row(&mut self, row: u32) -> Result<()> {
        self.fwd.set_tap_row(self.seq, row)
    }
}
