//! The repetition, presence and frequency penalties over a window of the last `repeat_last_n`
//! accepted tokens, exactly as llama.cpp's `llama_sampler_penalties_apply`:
//!
//! ```text
//! for each distinct token t in the window, seen count(t) times:
//!     logit[t] = logit[t] <= 0 ? logit[t] * repeat_penalty : logit[t] / repeat_penalty
//!     logit[t] -= count(t) * frequency_penalty + presence_penalty
//! ```

use std::collections::{HashMap, VecDeque};

use super::filters::sanitize;
use super::SamplerParams;

/// The most recent accepted tokens (at most `repeat_last_n`) and how often each occurs.
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    window: VecDeque<u32>,
    counts: HashMap<u32, u32>,
}

impl History {
    /// Records `token`, dropping the oldest one once the window holds `capacity` tokens.
    pub(crate) fn push(&mut self, token: u32, capacity: usize) {
        if capacity == 0 {
            return;
        }
        while self.window.len() >= capacity {
            let Some(old) = self.window.pop_front() else {
                break;
            };
            if let Some(count) = self.counts.get_mut(&old) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    self.counts.remove(&old);
                }
            }
        }
        self.window.push_back(token);
        *self.counts.entry(token).or_insert(0) += 1;
    }

    pub(crate) fn clear(&mut self) {
        self.window.clear();
        self.counts.clear();
    }

    /// Applies the three penalties to `row` (`[n_vocab]`, already sanitized). Ids outside the
    /// row are skipped. The result is sanitized again (a negative presence penalty could push a
    /// logit to +inf).
    pub(crate) fn apply(&self, params: &SamplerParams, row: &mut [f32]) {
        if !params.penalties_active() {
            return;
        }
        for (&token, &count) in &self.counts {
            let Some(logit) = usize::try_from(token).ok().and_then(|i| row.get_mut(i)) else {
                continue;
            };
            let mut x = *logit;
            if x <= 0.0 {
                x *= params.repeat_penalty;
            } else {
                x /= params.repeat_penalty;
            }
            x -= count as f32 * params.frequency_penalty + params.presence_penalty;
            *logit = sanitize(x);
        }
    }
}
