//! Drafters with known behaviour for the equivalence tests and for
//! measuring the scheduler's overhead: an oracle that replays a known continuation (100 %
//! acceptance under greedy decoding), an always-wrong drafter (0 %) and a partial one (every
//! acceptance length in turn). They take no taps.

use crate::gpu::GpuContext;
use crate::Result;

use super::drafter::{Draft, Drafter, Pick};

/// How an [`Adversary`] drafts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdversaryKind {
    /// The known token at each position.
    Oracle,
    /// A token different from the known one at each position.
    AlwaysWrong,
    /// The known tokens for the first `p0 mod (block + 1)` slots, then wrong ones: every
    /// acceptance length from 0 to the block, so verify batches are cut at every point.
    Partial,
}

/// A drafter that knows the sequence (prompt then greedy continuation) token by position.
#[derive(Debug, Clone)]
pub struct Adversary {
    pub kind: AdversaryKind,
    /// Token at each position.
    pub sequence: Vec<u32>,
    pub block: u32,
    pub n_vocab: u32,
    next: u32,
}

impl Adversary {
    pub fn new(kind: AdversaryKind, sequence: Vec<u32>, block: u32, n_vocab: u32) -> Self {
        Adversary {
            kind,
            sequence,
            block,
            n_vocab,
            next: 0,
        }
    }
}

impl Drafter for Adversary {
    fn max_drafts(&self) -> u32 {
        self.block
    }
    fn has_confidence(&self) -> bool {
        false
    }
    fn next_position(&self) -> u32 {
        self.next
    }
    fn inject(&mut self, _ctx: &GpuContext, n: u32, start: u32, _tokens: &[u32]) -> Result<()> {
        if start != self.next {
            return Err(crate::Error::Usage(format!(
                "adversary: injection at {start}, expected {}",
                self.next
            )));
        }
        self.next += n;
        Ok(())
    }
    fn draft(
        &mut self,
        _ctx: &GpuContext,
        _anchor: u32,
        p0: u32,
        _pick: Option<Pick<'_>>,
    ) -> Result<Draft> {
        let mut tokens = Vec::with_capacity(self.block as usize);
        for i in 0..self.block as usize {
            // The token at position p0 + 1 + i (past the known sequence: anything).
            let known = self.sequence.get(p0 as usize + 1 + i).copied().unwrap_or(0);
            tokens.push(match self.kind {
                AdversaryKind::Oracle => known,
                AdversaryKind::AlwaysWrong => (known + 1) % self.n_vocab.max(2),
                AdversaryKind::Partial if (i as u32) < p0 % (self.block + 1) => known,
                AdversaryKind::Partial => (known + 1) % self.n_vocab.max(2),
            });
        }
        let conf = vec![1.0; tokens.len()];
        Ok(Draft { tokens, conf })
    }
    fn reset(&mut self) {
        self.next = 0;
    }
    fn truncate(&mut self, pos: u32) {
        self.next = self.next.min(pos);
    }
}
