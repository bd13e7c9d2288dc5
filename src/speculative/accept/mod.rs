//! Verification of one speculative cycle (docs/DSPARK.md): how many of the ℓ drafts
//! the target accepts, and the token it emits after them.
//!
//! Shapes, for ℓ drafts `d_1..d_ℓ` and a vocabulary of `n_vocab` ids:
//! - target rows `[ℓ + 1, n_vocab]` row-major (or their argmaxes `[ℓ + 1]`): row `i` is the
//!   target's prediction after the `i`-th verified token (row 0 after the anchor `x0`), so row
//!   `i` judges draft `d_{i+1}` and row `ℓ` gives the bonus token when every draft is accepted;
//! - draft distributions `[ℓ, n_vocab]` row-major: row `i` is the distribution `d_{i+1}` was
//!   drawn from ([`draft_distribution`]).
//!
//! The cycle commits `accepted + 1` tokens: `d_1..d_accepted`, then [`Verdict::next`].
//!
//! - Greedy ([`accept_greedy`]): the longest prefix of drafts equal to the target's argmaxes.
//! - Stochastic ([`accept_sampled`]): rejection sampling (Leviathan et al. 2023, Chen et al.
//!   2023; DeepSpec `verify_draft_tokens`). Whatever the drafter proposes, every emitted token
//!   is distributed exactly as the target sampler's own draw would be, provided each draft was
//!   drawn from the distribution passed in for it ([`draft_sample`] on [`draft_distribution`]).
//!
//! Stop tokens are not handled here: the caller truncates at the first EOS it commits.

use crate::sampling::{softmax, Sampler, Xoshiro256StarStar};

/// Below this total mass the residual `max(0, p_t − p_d)` is rounding noise (the two
/// distributions agree) and the rejected row draws from `p_t` instead.
const RESIDUAL_EPS: f64 = 1e-6;

/// The outcome of verifying one block of drafts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// `a`: how many drafts, counted from the first, the target accepted (`0..=ℓ`).
    pub accepted: usize,
    /// `y`: the token the target emits after the accepted drafts (the new anchor).
    pub next: u32,
}

/// Inputs whose shapes disagree. Every variant names the values involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcceptError {
    #[error("{rows} target argmax rows for {drafts} drafts: verification needs drafts + 1")]
    TargetRows { drafts: usize, rows: usize },
    #[error("n_vocab = 0: verification needs at least one token")]
    ZeroVocab,
    #[error("n_vocab = {n_vocab} but the sampler was built for {sampler} tokens")]
    VocabMismatch { n_vocab: usize, sampler: u32 },
    #[error(
        "target logits hold {len} values: {drafts} drafts need (drafts + 1) × n_vocab ({n_vocab})"
    )]
    TargetLogits {
        len: usize,
        drafts: usize,
        n_vocab: usize,
    },
    #[error(
        "draft distributions hold {len} values: {drafts} drafts need drafts × n_vocab ({n_vocab})"
    )]
    DraftProbs {
        len: usize,
        drafts: usize,
        n_vocab: usize,
    },
}

/// Greedy verification. `target_argmax` (`[ℓ + 1]`) holds the target's argmax of each verify
/// row. `accepted` is the length of the longest prefix with `target_argmax[i] == drafts[i]`,
/// `next = target_argmax[accepted]`. Fails unless `target_argmax.len() == drafts.len() + 1`.
pub fn accept_greedy(drafts: &[u32], target_argmax: &[u32]) -> Result<Verdict, AcceptError> {
    let shape_error = || AcceptError::TargetRows {
        drafts: drafts.len(),
        rows: target_argmax.len(),
    };
    if target_argmax.len() != drafts.len() + 1 {
        return Err(shape_error());
    }
    let accepted = drafts
        .iter()
        .zip(target_argmax)
        .take_while(|(d, t)| d == t)
        .count();
    let next = *target_argmax.get(accepted).ok_or_else(shape_error)?;
    Ok(Verdict { accepted, next })
}

/// Stochastic verification by rejection sampling.
///
/// - `drafts`: `[ℓ]`; `draft_probs`: `[ℓ, n_vocab]` row-major, row `i` the distribution
///   `drafts[i]` was drawn from (negative and non-finite entries count as 0);
/// - `target_logits`: `[ℓ + 1, n_vocab]` row-major, raw logits of the verify rows.
///
/// For each draft `i`, `p_t` is `sampler.candidates(row i)` (the target's processed
/// distribution: penalties, filters, temperature); the draft is accepted with probability
/// `min(1, p_t(d_i) / p_d(d_i))` (tested as `u · p_d < p_t` with `u = sampler.uniform()`, so a
/// token the target cannot emit is never accepted). At the first rejection `next` is drawn from
/// `normalize(max(0, p_t − p_d))` (from `p_t` when that mass is below 1e-6) and the cycle
/// stops; when all ℓ are accepted, `next = sampler.sample(row ℓ)`.
///
/// Every committed token (`d_1..d_a`, then `next`) is passed to `sampler.accept` in order, as it
/// is committed, so each row's penalties see the tokens before it: the caller must not accept
/// them again. Random numbers come from the sampler's generator: a seed reproduces the run.
pub fn accept_sampled(
    sampler: &mut Sampler,
    drafts: &[u32],
    draft_probs: &[f32],
    target_logits: &[f32],
    n_vocab: usize,
) -> Result<Verdict, AcceptError> {
    accept_sampled_cut(
        sampler,
        drafts,
        draft_probs,
        target_logits,
        n_vocab,
        Bonus::Sample,
    )
}

/// What the last verify row gives when every draft is accepted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bonus<'a> {
    /// A token sampled from the target (plain verification).
    Sample,
    /// The block was cut before a draft the target cannot emit (a grammar refused it), drawn
    /// from this distribution (`[n_vocab]`). Verifying it would reject it for certain
    /// (`p_t = 0` there), so the bonus token is drawn as that rejection draws it, from
    /// `normalize(max(0, p_t − p_d))`: the output keeps the target's distribution.
    Residual(&'a [f32]),
    /// Nothing (what follows is forced by a grammar): `next` is `u32::MAX`, no random number
    /// is drawn and the sampler's history is left alone.
    Skip,
}

/// [`accept_sampled`] with the bonus row's use chosen by `bonus` (a block under a grammar).
pub fn accept_sampled_cut(
    sampler: &mut Sampler,
    drafts: &[u32],
    draft_probs: &[f32],
    target_logits: &[f32],
    n_vocab: usize,
    bonus: Bonus<'_>,
) -> Result<Verdict, AcceptError> {
    check_shapes(sampler, drafts, draft_probs, target_logits, n_vocab)?;
    let mut rows = target_logits.chunks_exact(n_vocab);
    for (accepted, (&draft, pd_row)) in drafts
        .iter()
        .zip(draft_probs.chunks_exact(n_vocab))
        .enumerate()
    {
        let Some(row) = rows.next() else { break };
        let p_t = sampler.candidates(row);
        let pt_draft = prob_of(&p_t, draft);
        let pd_draft = dense_prob(pd_row, draft);
        if sampler.uniform() * f64::from(pd_draft) < f64::from(pt_draft) {
            sampler.accept(draft);
            continue;
        }
        let next = residual_draw(sampler, &p_t, pd_row);
        sampler.accept(next);
        return Ok(Verdict { accepted, next });
    }
    // Every draft accepted: the bonus token from the last row. The shapes were checked, so the
    // row is there; an empty row would still sample (token 0).
    let last = rows.next().unwrap_or(&[]);
    let next = match bonus {
        Bonus::Skip => u32::MAX,
        Bonus::Residual(pd_row) if pd_row.len() == n_vocab => {
            let p_t = sampler.candidates(last);
            residual_draw(sampler, &p_t, pd_row)
        }
        _ => sampler.sample(last),
    };
    if next != u32::MAX {
        sampler.accept(next);
    }
    Ok(Verdict {
        accepted: drafts.len(),
        next,
    })
}

/// The drafter's distribution for one slot: `softmax(logits / temperature)` as a dense
/// `[logits.len()]` vector summing to 1 (docs/DSPARK.md: `p_d = softmax(L_j / T)` of the
/// Markov-corrected logits). `temperature <= 0` gives the one-hot vector of the argmax (greedy
/// drafting; still lossless under [`accept_sampled`]). NaN logits count as -inf.
///
/// Any distribution keeps verification lossless; the closer it is to the target's, the more
/// drafts are accepted.
pub fn draft_distribution(logits: &[f32], temperature: f32) -> Vec<f32> {
    softmax(logits, temperature)
}

/// Draws a draft token from `dist` (`[n_vocab]`, weights need not sum to 1; negative and
/// non-finite weights count as 0) with `rng`, walking ids in order. Always draws one `f64`;
/// returns 0 when no weight is positive. The same `dist` must go to [`accept_sampled`].
pub fn draft_sample(dist: &[f32], rng: &mut Xoshiro256StarStar) -> u32 {
    let z: f64 = dist.iter().map(|&p| f64::from(clean(p))).sum();
    let target = rng.next_f64() * z;
    let mut cum = 0.0;
    let mut last = 0;
    for (id, &p) in (0u32..).zip(dist) {
        let w = f64::from(clean(p));
        if w > 0.0 {
            cum += w;
            last = id;
            if cum > target {
                return id;
            }
        }
    }
    last
}

/// The shape checks of [`accept_sampled`].
fn check_shapes(
    sampler: &Sampler,
    drafts: &[u32],
    draft_probs: &[f32],
    target_logits: &[f32],
    n_vocab: usize,
) -> Result<(), AcceptError> {
    if n_vocab == 0 {
        return Err(AcceptError::ZeroVocab);
    }
    if u32::try_from(n_vocab).ok() != Some(sampler.n_vocab()) {
        return Err(AcceptError::VocabMismatch {
            n_vocab,
            sampler: sampler.n_vocab(),
        });
    }
    let drafts_len = drafts.len();
    let want_target = (drafts_len + 1).checked_mul(n_vocab);
    if want_target != Some(target_logits.len()) {
        return Err(AcceptError::TargetLogits {
            len: target_logits.len(),
            drafts: drafts_len,
            n_vocab,
        });
    }
    if drafts_len.checked_mul(n_vocab) != Some(draft_probs.len()) {
        return Err(AcceptError::DraftProbs {
            len: draft_probs.len(),
            drafts: drafts_len,
            n_vocab,
        });
    }
    Ok(())
}

/// Draws the replacement token of a rejected row from `normalize(max(0, p_t − p_d))`, or from
/// `p_t` when that residual has (almost) no mass.
fn residual_draw(sampler: &mut Sampler, p_t: &[(u32, f32)], pd_row: &[f32]) -> u32 {
    let residual: Vec<(u32, f32)> = p_t
        .iter()
        .map(|&(id, p)| (id, (p - dense_prob(pd_row, id)).max(0.0)))
        .collect();
    let mass: f64 = residual.iter().map(|&(_, r)| f64::from(r)).sum();
    let dist = if mass > RESIDUAL_EPS { &residual } else { p_t };
    let fallback = p_t.first().map_or(0, |&(id, _)| id);
    sampler.draw(dist).unwrap_or(fallback)
}

/// `p(id)` in a sparse distribution (0 when absent).
fn prob_of(dist: &[(u32, f32)], id: u32) -> f32 {
    dist.iter()
        .find(|&&(i, _)| i == id)
        .map_or(0.0, |&(_, p)| clean(p))
}

/// `row[id]` of a dense distribution, cleaned (0 when out of range).
fn dense_prob(row: &[f32], id: u32) -> f32 {
    usize::try_from(id)
        .ok()
        .and_then(|i| row.get(i))
        .map_or(0.0, |&p| clean(p))
}

/// Negative, NaN and infinite probabilities count as 0.
fn clean(p: f32) -> f32 {
    if p.is_finite() && p > 0.0 {
        p
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests;
