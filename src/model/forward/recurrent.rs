//! The recurrent state of a hybrid model in the single-sequence forward (the drafter's pass and
//! the oracle comparisons of `tests/`): zeroed when a sequence starts over, at the head of the
//! step from row 0 (a clear recorded into that step's own command buffer). It cannot be cut
//! back anywhere else: rolling a state back (checkpoint, restore, replay of the kept rows)
//! is the batched forward's, inside its kernels (`batch_state.rs`), and every command runs
//! the batched engine.

use crate::kernels::launch::{PreOp, Prelude};
use crate::{Error, Result};

use super::Forward;

impl Forward {
    /// Whether the model carries a recurrent state.
    pub fn is_recurrent(&self) -> bool {
        self.buffers.hybrid.is_some()
    }

    /// The clears a step from row `start` leads with: every state when a hybrid's sequence
    /// starts over, nothing otherwise.
    pub(crate) fn prelude(&self, start: u32) -> Prelude<'_> {
        let ops = match &self.buffers.hybrid {
            Some(hb) if start == 0 => hb.states.iter().flatten().map(PreOp::Clear).collect(),
            _ => Vec::new(),
        };
        Prelude { ops }
    }

    /// Whether [`Forward::truncate`] can go back to `pos`: anywhere up to the length for a
    /// dense model (Gemma 3's rings: at most a step's rows, or to 0), only to the length or to
    /// 0 for a recurrent one.
    pub fn can_truncate(&self, pos: u32) -> bool {
        let Ok(len) = self.kv.len(0) else {
            return false;
        };
        if self.ring() && !crate::model::gemma3::ring_can_truncate(len, pos, self.max_rows) {
            return false;
        }
        if self.is_recurrent() {
            return pos == len || pos == 0;
        }
        pos <= len
    }

    /// Drops the rows from `pos` on ([`Forward::can_truncate`]; an error names the rows where
    /// it cannot). Back to 0, a hybrid's next step zeroes its state.
    pub fn truncate(&mut self, pos: u32) -> Result<()> {
        let len = self.kv.len(0)?;
        if !self.can_truncate(pos) {
            let why = if self.is_recurrent() {
                "a recurrent state goes back only to row 0 here (the batched engine rolls back)"
            } else {
                "the sliding layers' ring caches go back at most one step's rows, or to 0"
            };
            return Err(Error::Usage(format!(
                "cannot go back from row {len} to row {pos}: {why}"
            )));
        }
        Ok(self.kv.truncate_to(0, pos)?)
    }
}
