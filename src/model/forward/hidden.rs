//! The final hidden states of a step: the rows of `act.xn` after the output norm, before the LM
//! head (llama.cpp's `result_norm`), read back for `/v1/embeddings`. The output norm runs in
//! every step, with or without logits, so a step of `n_logits = 0` leaves them there.

use super::batch::BatchForward;
use super::Forward;
use crate::gpu::buffers::read_back;
use crate::gpu::GpuContext;
use crate::{Error, Result};

impl Forward {
    /// Rows `row0..row0 + m` of the last step's final-norm output, `[m, n_embd]` f32.
    pub fn hidden(&self, ctx: &GpuContext, row0: u32, m: u32) -> Result<Vec<f32>> {
        let d = u64::from(self.hp.n_embd);
        if m == 0 || row0.checked_add(m).is_none_or(|end| end > self.rows) {
            return Err(Error::Usage(format!(
                "hidden rows {row0}..{row0}+{m} of a step of {} rows",
                self.rows
            )));
        }
        let bytes = read_back(
            ctx,
            &self.buffers.xn,
            u64::from(row0) * d * 4,
            u64::from(m) * d * 4,
        )?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}

impl BatchForward {
    /// [`Forward::hidden`] of the last batched step (a segment's rows start where it was placed:
    /// at 0 for a step of one segment).
    pub fn hidden(&self, ctx: &GpuContext, row0: u32, m: u32) -> Result<Vec<f32>> {
        self.fwd.hidden(ctx, row0, m)
    }
}
