//! [`Engine::generate_plain`] under a grammar ([`crate::grammar::steps`]): the forced tokens
//! before the first sampled one ride with the prompt's prefill; every step's logits row is
//! masked on the device (`Forward::set_mask`) before the argmax or the read-back for sampling;
//! the tokens a committed token forces are emitted and run through the model with it in one
//! step (one logits row), with no sampling step each.

use std::time::Instant;

use crate::grammar::{allowed, GrammarError};
use crate::sampling::Sampler;
use crate::{Error, Result};

use super::{Engine, GenStats};

impl Engine {
    /// Sets the grammar's next mask on the target's next logits row.
    fn mask_next_row(&mut self) -> Result<()> {
        if let Some(g) = &mut self.grammar {
            g.mask_next()?;
            self.fwd.set_mask(&self.ctx, &g.masks)?;
        }
        Ok(())
    }

    /// The next token under the mask set before the step; a token outside it is an error.
    fn pick_masked(&mut self, sampler: Option<&mut Sampler>) -> Result<u32> {
        let t = self.pick(sampler)?;
        if let Some(g) = &self.grammar {
            if !allowed(&g.masks, t) {
                return Err(GrammarError::Rejected {
                    token: t,
                    message: "picked outside the mask".into(),
                }
                .into());
            }
        }
        Ok(t)
    }

    pub(super) fn generate_constrained(
        &mut self,
        prompt: &[u32],
        n_predict: usize,
        mut sampler: Option<&mut Sampler>,
        mut on_token: impl FnMut(u32) -> Result<bool>,
    ) -> Result<GenStats> {
        let mut stats = GenStats {
            prompt_tokens: prompt.len(),
            ..GenStats::default()
        };
        if prompt.is_empty() {
            return Err(Error::EmptyStep {
                what: "the prompt has no tokens".into(),
            });
        }
        let forced0 = match &mut self.grammar {
            Some(g) => g.forced_now()?,
            None => Vec::new(),
        };
        let t0 = Instant::now();
        let mut first: Vec<u32> = prompt.to_vec();
        first.extend(&forced0);
        self.mask_next_row()?;
        self.prefill(&first)?;
        let mut token = self.pick_masked(sampler.as_deref_mut())?;
        stats.prefill_secs = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        // Emits `t`; false when the generation ends.
        let mut emit = |stats: &mut GenStats, t: u32| -> Result<bool> {
            stats.generated_tokens += 1;
            stats.generated_token_ids.push(t);
            Ok(on_token(t)? && stats.generated_tokens < n_predict)
        };
        for &f in &forced0 {
            if let Some(s) = sampler.as_deref_mut() {
                s.accept(f);
            }
            if stats.generated_tokens >= n_predict || !emit(&mut stats, f)? {
                stats.decode_secs = t1.elapsed().as_secs_f64();
                return Ok(stats);
            }
        }
        while stats.generated_tokens < n_predict {
            if !self.ignore_eos && self.tok.is_eog(token) {
                break;
            }
            let forced = match &mut self.grammar {
                Some(g) => g.commit(&[token])?,
                None => Vec::new(),
            };
            if !emit(&mut stats, token)? {
                break;
            }
            let mut rows = vec![token];
            let mut go = true;
            for &f in &forced {
                if let Some(s) = sampler.as_deref_mut() {
                    s.accept(f);
                }
                rows.push(f);
                if !emit(&mut stats, f)? {
                    go = false;
                    break;
                }
            }
            if !go || self.grammar.as_ref().is_some_and(|g| g.is_stopped()) {
                break;
            }
            let room = self.fwd.kv.capacity() - self.fwd.kv.len(0)?;
            if rows.len() as u32 > room {
                eprintln!("context full ({} tokens): stopping", self.fwd.kv.capacity());
                break;
            }
            self.mask_next_row()?;
            self.prefill(&rows)?;
            token = self.pick_masked(sampler.as_deref_mut())?;
        }
        stats.decode_secs = t1.elapsed().as_secs_f64();
        Ok(stats)
    }
}
