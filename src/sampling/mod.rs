//! Token sampling on the host over one row of f32 logits `[n_vocab]`, with llama.cpp's
//! samplers, parameters and order:
//!
//! ```text
//! logit bias → penalties (repeat, presence, frequency over the last repeat_last_n accepted tokens)
//!   → top-k → top-p → min-p → temperature → draw from the softmax (xoshiro256**)
//! ```
//!
//! `temp == 0` is greedy: penalties, then the argmax (ties to the lowest id); no random number
//! is drawn. [`Sampler::candidates`] returns the exact distribution [`Sampler::sample`] draws
//! from (DSpark's rejection sampling needs it); [`Sampler::draw`] draws from any distribution
//! with the same generator.
//!
//! Efficiency: the row is copied once; top-k uses partial selection and sorts only the kept
//! `k`; min-p is a linear filter; top-p sorts only the prefix it needs (256 first, doubling),
//! and only among the min-p survivors (the two cuts are best-first prefixes, so this is exact).
//! Nothing sorts the whole vocabulary unless [`Sampler::candidates`] is asked for an unfiltered
//! one.
//!
//! Defined behaviour on any logits (never a panic):
//! - NaN counts as -inf, +inf as `f32::MAX` (before and after the penalties);
//! - a row shorter than `n_vocab` is padded with -inf, entries past `n_vocab` are ignored;
//! - a row whose every logit is -inf (including an empty one) yields token 0 with
//!   probability 1.
//!
//! Probabilities are computed in f64 (the top-p mass, the final softmax); llama.cpp uses f32,
//! so a token lying within rounding of a top-p / min-p boundary may be kept by one and not the
//! other.

mod filters;
mod params;
mod penalties;
mod rng;

pub use filters::softmax;
pub use params::{SamplerError, SamplerParams};
pub use rng::Xoshiro256StarStar;

use filters::{argmax, sanitize, Candidates};
use penalties::History;

/// What the chain left: one certain token, or the candidates with their softmax weights.
enum Outcome {
    Single(u32),
    Kept { z: f64 },
}

/// A seeded sampler for one sequence: its parameters, the random generator and the history
/// the penalties look at. `sample` reuses its buffers (no allocation after the first call).
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplerParams,
    n_vocab: usize,
    rng: Xoshiro256StarStar,
    history: History,
    /// Sanitized, penalized logits `[n_vocab]`.
    row: Vec<f32>,
    cands: Candidates,
    /// Unnormalised softmax weights, parallel to `cands.items`.
    weights: Vec<f64>,
    /// `(id, bias)` added to the row before anything else (OpenAI's and llama.cpp's
    /// `logit_bias`; `-inf` bans a token). Ids `>= n_vocab` are ignored.
    bias: Vec<(u32, f32)>,
}

impl Sampler {
    /// A sampler for rows of `n_vocab` logits; fails if a parameter is out of range or
    /// `n_vocab` is 0.
    pub fn new(params: SamplerParams, n_vocab: u32) -> Result<Self, SamplerError> {
        params.validate()?;
        if n_vocab == 0 {
            return Err(SamplerError::EmptyVocab);
        }
        let n_vocab = n_vocab as usize;
        Ok(Self {
            params,
            n_vocab,
            rng: Xoshiro256StarStar::new(params.seed),
            history: History::default(),
            row: Vec::with_capacity(n_vocab),
            cands: Candidates::default(),
            weights: Vec::new(),
            bias: Vec::new(),
        })
    }

    /// The same sampler with `bias` added to every row's logits before the chain (and before
    /// the greedy argmax), as llama.cpp's logit-bias sampler does first in its chain. A bias of
    /// `f32::NEG_INFINITY` bans the token; NaN counts as -inf.
    pub fn with_bias(mut self, bias: Vec<(u32, f32)>) -> Self {
        self.bias = bias;
        self
    }

    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    pub fn n_vocab(&self) -> u32 {
        // Built from a u32 in `new`.
        u32::try_from(self.n_vocab).unwrap_or(u32::MAX)
    }

    /// Picks the next token from `logits` (`[n_vocab]`). Does not record it: call
    /// [`Sampler::accept`] with the token the sequence actually continues with.
    ///
    /// Draws one `f64` from the generator unless the outcome is certain (greedy, a single
    /// candidate left, or every logit -inf). The draw walks the candidates in the chain's
    /// internal order, which may differ from [`Sampler::candidates`]' sorted order: the
    /// distribution is the same, the token for a given seed need not be.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        match self.run_chain(logits) {
            Outcome::Single(id) => id,
            Outcome::Kept { z } => {
                if self.cands.items.len() == 1 {
                    return self.cands.items.first().map_or(0, |c| c.id);
                }
                let target = self.rng.next_f64() * z;
                let mut cum = 0.0;
                let mut last = 0;
                for (c, &w) in self.cands.items.iter().zip(&self.weights) {
                    if w > 0.0 {
                        cum += w;
                        last = c.id;
                        if cum > target {
                            return c.id;
                        }
                    }
                }
                last
            }
        }
    }

    /// The distribution [`Sampler::sample`] draws from for `logits`: the ids the chain keeps,
    /// with their probabilities after temperature (summing to 1), sorted by probability
    /// descending, ties by id ascending. Ids whose weight is exactly 0 (a -inf logit, or one so
    /// far below the top that `exp` underflows in f64) cannot be drawn and are left out. Greedy
    /// and all -inf rows give one id with probability 1. Draws no random number.
    pub fn candidates(&mut self, logits: &[f32]) -> Vec<(u32, f32)> {
        match self.run_chain(logits) {
            Outcome::Single(id) => vec![(id, 1.0)],
            Outcome::Kept { .. } => {
                self.cands.sort_all();
                let z = self.cands.weights(self.params.temp, &mut self.weights);
                self.cands
                    .items
                    .iter()
                    .zip(&self.weights)
                    .filter(|(_, &w)| w > 0.0)
                    .map(|(c, &w)| (c.id, (w / z) as f32))
                    .collect()
            }
        }
    }

    /// Records `token` in the penalty window (the last `repeat_last_n` tokens). Ids
    /// `>= n_vocab` are ignored.
    pub fn accept(&mut self, token: u32) {
        if usize::try_from(token).is_ok_and(|t| t < self.n_vocab) {
            self.history.push(token, self.params.repeat_last_n);
        }
    }

    /// Forgets the history and restarts the generator from the seed (like llama.cpp's
    /// `llama_sampler_reset`): after `reset` the sampler repeats its first run exactly.
    pub fn reset(&mut self) {
        self.history.clear();
        self.rng = Xoshiro256StarStar::new(self.params.seed);
    }

    /// A uniform `f64` in `[0, 1)` from this sampler's generator (the acceptance test of
    /// speculative decoding).
    pub fn uniform(&mut self) -> f64 {
        self.rng.next_f64()
    }

    /// Draws an id from `probs` (weights need not sum to 1; negative, NaN and infinite weights
    /// count as 0) with this sampler's generator, walking the slice in order. `None` when no
    /// weight is positive. Always draws one `f64`.
    pub fn draw(&mut self, probs: &[(u32, f32)]) -> Option<u32> {
        let weight = |p: f32| {
            if p.is_finite() && p > 0.0 {
                f64::from(p)
            } else {
                0.0
            }
        };
        let z: f64 = probs.iter().map(|&(_, p)| weight(p)).sum();
        let target = self.rng.next_f64() * z;
        let mut cum = 0.0;
        let mut last = None;
        for &(id, p) in probs {
            let w = weight(p);
            if w > 0.0 {
                cum += w;
                last = Some(id);
                if cum > target {
                    return Some(id);
                }
            }
        }
        last
    }

    /// Penalties → (greedy | top-k → top-p → min-p → softmax weights).
    fn run_chain(&mut self, logits: &[f32]) -> Outcome {
        self.row.clear();
        self.row
            .extend(logits.iter().take(self.n_vocab).map(|&x| sanitize(x)));
        self.row.resize(self.n_vocab, f32::NEG_INFINITY);
        for &(id, b) in &self.bias {
            if let Some(x) = self.row.get_mut(id as usize) {
                *x = sanitize(*x + b);
            }
        }
        self.history.apply(&self.params, &mut self.row);

        let best = argmax(&self.row);
        let best_logit = self.row.get(best).copied().unwrap_or(f32::NEG_INFINITY);
        // `best < n_vocab`, which came from a u32.
        let best_id = u32::try_from(best).unwrap_or(0);
        if self.params.temp <= 0.0 || best_logit == f32::NEG_INFINITY {
            return Outcome::Single(best_id);
        }

        self.cands.fill(&self.row);
        self.cands.top_k(self.params.top_k);
        self.cands.top_p_min_p(self.params.top_p, self.params.min_p);
        let z = self.cands.weights(self.params.temp, &mut self.weights);
        Outcome::Kept { z }
    }
}
