//! A generation under a grammar, step by step: the masks of a step's logit rows and what a
//! committed token forces next. Shared by the plain and the speculative loops, so both follow
//! one rule and a greedy answer is the same with and without a drafter:
//!
//! - every sampled position is masked with the matcher's state after the tokens before it;
//! - after each committed token the grammar's forced tokens (fast-forward) are committed too,
//!   without a sampling step, and run through the model with the next step's rows;
//! - a draft block is cut before its first token the grammar refuses (`validate`), and before
//!   any position whose next tokens are forced (those are not sampled, so not verified); the
//!   verify rows get a mask each (consume, mask, roll back). The drafter is never masked.

use super::{Constraint, GrammarError};

/// How a draft block was cut for verification under a grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftCut {
    /// Drafts kept (a prefix of the block).
    pub kept: usize,
    /// The draft right after the kept ones was refused by the grammar: the target would reject
    /// it for certain, so a sampled verification draws the bonus row from the residual of
    /// that draft's distribution (`accept_sampled_cut`).
    pub refused_next: bool,
    /// The grammar forces tokens after the kept drafts: when all are accepted, those come next
    /// and the last verify row's sample is not used.
    pub forced_after: bool,
}

/// One request's grammar during a generation: the matcher and the mask rows of the next step.
pub struct Guide {
    c: Box<dyn Constraint>,
    /// Mask rows of the next step, `[rows, words]` u32.
    pub masks: Vec<u32>,
    /// Time spent computing masks (seconds), for the figures.
    pub mask_secs: f64,
    /// Masks computed.
    pub n_masks: u64,
    /// Tokens committed without sampling (forced).
    pub forced: u64,
}

impl std::fmt::Debug for Guide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guide")
            .field("n_masks", &self.n_masks)
            .field("forced", &self.forced)
            .finish_non_exhaustive()
    }
}

impl Guide {
    pub fn new(c: Box<dyn Constraint>) -> Guide {
        Guide {
            c,
            masks: Vec::new(),
            mask_secs: 0.0,
            n_masks: 0,
            forced: 0,
        }
    }

    /// Words per mask row.
    pub fn words(&self) -> usize {
        self.c.mask_words()
    }

    fn push_mask(&mut self) -> Result<(), GrammarError> {
        let t = std::time::Instant::now();
        let w = self.c.mask_words();
        let at = self.masks.len();
        self.masks.resize(at + w, 0);
        self.c.fill_mask(&mut self.masks[at..])?;
        self.mask_secs += t.elapsed().as_secs_f64();
        self.n_masks += 1;
        Ok(())
    }

    /// The mask of the next position alone (a plain step): `masks` holds one row.
    pub fn mask_next(&mut self) -> Result<(), GrammarError> {
        self.masks.clear();
        self.push_mask()
    }

    /// Cuts `drafts` (proposed after everything committed) and fills `masks` with one row per
    /// verify row: row 0 after the committed tokens, row i after drafts `..i`. The matcher's
    /// state is unchanged afterwards.
    pub fn cut_and_mask(&mut self, drafts: &[u32]) -> Result<DraftCut, GrammarError> {
        self.cut_and_mask_with(drafts, true)
    }

    /// [`Guide::cut_and_mask`]; without `at_forced` the block is not cut where tokens are
    /// forced (a loop that samples forced positions like any other: the batched one).
    pub fn cut_and_mask_with(
        &mut self,
        drafts: &[u32],
        at_forced: bool,
    ) -> Result<DraftCut, GrammarError> {
        // A complete grammar allows only the end token: nothing to validate against.
        let valid = if self.c.is_stopped() {
            0
        } else {
            self.c.validate(drafts)?
        };
        self.masks.clear();
        self.push_mask()?;
        let mut kept = 0;
        let mut forced_after = false;
        while kept < valid {
            // A complete grammar allows only the end token (its row's mask says so), which is
            // never consumed: the block stops before it and that row samples the end token.
            if self.c.is_stopped() {
                break;
            }
            let d = drafts[kept];
            self.c.consume(&[d])?;
            kept += 1;
            if at_forced && !self.c.peek_forced().is_empty() {
                forced_after = true;
                break;
            }
            self.push_mask()?;
        }
        self.c.rollback(kept)?;
        if forced_after {
            // The row after the last kept draft is not sampled: give it the row before's mask
            // shape (all allowed would do too); it is never read.
            let w = self.c.mask_words();
            self.masks.resize(self.masks.len() + w, u32::MAX);
        }
        Ok(DraftCut {
            kept,
            refused_next: !forced_after && kept < drafts.len() && kept == valid,
            forced_after,
        })
    }

    /// Commits `tokens` (sampled or accepted), then the tokens the grammar forces after them,
    /// which it returns (to emit and run through the model without sampling).
    pub fn commit(&mut self, tokens: &[u32]) -> Result<Vec<u32>, GrammarError> {
        self.c.consume(tokens)?;
        self.forced_now()
    }

    /// Commits `tokens` alone (forced tokens are left to be sampled under their masks).
    pub fn consume(&mut self, tokens: &[u32]) -> Result<(), GrammarError> {
        self.c.consume(tokens)
    }

    /// Commits and returns what the grammar forces now (before the first token, or after a
    /// commit).
    pub fn forced_now(&mut self) -> Result<Vec<u32>, GrammarError> {
        if self.c.is_stopped() {
            return Ok(Vec::new());
        }
        let f = self.c.take_forced()?;
        self.forced += f.len() as u64;
        Ok(f)
    }

    /// Nothing more may be generated.
    pub fn is_stopped(&self) -> bool {
        self.c.is_stopped()
    }

    /// The output is a complete match.
    pub fn is_accepting(&mut self) -> bool {
        self.c.is_accepting()
    }

    /// The matcher itself (tests).
    pub fn constraint(&mut self) -> &mut dyn Constraint {
        self.c.as_mut()
    }
}
