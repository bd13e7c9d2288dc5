//! A grammar's token mask on the step's logits rows (`kernels::ops::mask`): set before a step,
//! applied inside that step's pass after the LM head and before the argmax, for that step only.
//! The mask buffer (`[max_logit_rows, ceil(V / 32)]` u32, 6 KiB a row at 49k tokens) is
//! created on first use, outside the memory plan: forwards that never see a grammar never
//! allocate it.

use crate::gpu::GpuContext;
use crate::kernels::ops::mask::MaskLogits;
use crate::Result;

use super::Forward;

impl Forward {
    /// Masks the next step's logits rows with `rows` (`[n, ceil(n_vocab / 32)]` u32: row i for
    /// logits row i, `n` at most the step's logit rows; the rows past `n` are not masked).
    pub fn set_mask(&mut self, ctx: &GpuContext, rows: &[u32]) -> Result<()> {
        if self.grammar_mask.is_none() {
            let logits = &self.buffers.logits;
            let op = MaskLogits::new(ctx, logits, self.max_logit_rows, self.hp.n_vocab)?;
            self.grammar_mask = Some(op);
        }
        if let Some(op) = &mut self.grammar_mask {
            op.set(ctx, rows)?;
        }
        self.mask_on = true;
        Ok(())
    }

    /// Drops a mask set for a step that will not run (or ran through another path).
    pub fn clear_mask(&mut self) {
        self.mask_on = false;
    }

    /// Words of one mask row.
    pub fn mask_words(&self) -> usize {
        self.hp.n_vocab.div_ceil(32) as usize
    }
}
