//! Grammars in a batched step (`batch_run`): one matcher and one mask per request and logits
//! row. A drafting request's block is cut before the first draft its grammar refuses and
//! gets a mask per verify row (consume, mask, roll back); every other logits row gets its
//! request's next mask; requests without a grammar get rows of ones. The step's masks go to
//! the device in segment order (the order of the logits rows) and are applied there after
//! the LM head. Accepted tokens are committed to the matcher, and the tokens it forces after
//! them are emitted without a sampling step and run as rows of the request's next step (one
//! logits row, after the last of them), as in the single-request loops; a block is cut before
//! a position whose next tokens are forced. Tokens forced before the first sampled one are
//! emitted once the prompt has run (its last chunk then has no logits row).

use super::batch::Engine;
use super::batch_run::{BatchRequest, Planned, SeqState};
use crate::grammar::{allowed, GrammarError};
use crate::{Error, Result};

/// Cuts `pl`'s drafts under `a`'s grammar and keeps the verify rows' masks (no grammar: as
/// they are).
pub(super) fn cut(a: &mut SeqState, pl: &mut Planned, n_vocab: usize) -> Result<()> {
    let Some(g) = &mut a.guide else {
        return Ok(());
    };
    let c = g.cut_and_mask(&pl.drafts)?;
    pl.forced_after = c.forced_after;
    if c.refused_next && a.sampler.is_some() {
        let at = c.kept * n_vocab;
        pl.refused = pl.dists.get(at..at + n_vocab).map(<[f32]>::to_vec);
    }
    pl.drafts.truncate(c.kept);
    pl.dists.truncate(c.kept * n_vocab);
    pl.masks = std::mem::take(&mut g.masks);
    Ok(())
}

/// Fills every guided plan's masks and sets the step's mask rows on the device (nothing when
/// no request has a grammar). Plans whose matcher fails are dropped and returned.
pub(super) fn set_masks<R: BatchRequest>(
    eng: &mut Engine,
    active: &mut [R],
    plans: &mut Vec<Planned>,
) -> Result<Vec<(usize, Error)>> {
    if !plans.iter().any(|pl| active[pl.i].state().guide.is_some()) {
        return Ok(Vec::new());
    }
    let words = eng.fwd.mask_words();
    let mut failed = Vec::new();
    plans.retain_mut(|pl| {
        let Some(g) = &mut active[pl.i].state_mut().guide else {
            return true;
        };
        if pl.n_logits == 0 || !pl.masks.is_empty() {
            return true;
        }
        match g.mask_next() {
            Ok(()) => {
                pl.masks = std::mem::take(&mut g.masks);
                true
            }
            Err(e) => {
                failed.push((pl.i, e.into()));
                false
            }
        }
    });
    let mut rows = Vec::new();
    for pl in plans.iter() {
        let n = pl.n_logits as usize * words;
        if pl.masks.len() == n {
            rows.extend_from_slice(&pl.masks);
        } else {
            rows.resize(rows.len() + n, u32::MAX);
        }
    }
    if !rows.is_empty() {
        eng.fwd.set_mask(&eng.ctx, &rows)?;
    }
    Ok(failed)
}

/// The tokens `a`'s grammar forces before its first sampled one, taken when the chunk that
/// ends its prompt is planned (`last`); none otherwise.
pub(super) fn forced0(a: &mut SeqState, last: bool) -> Result<Vec<u32>> {
    match &mut a.guide {
        Some(g) if last && a.generated.is_empty() => Ok(g.forced_now()?),
        _ => Ok(Vec::new()),
    }
}

/// `forced` (taken by [`forced0`]) once the prompt has run: the sampler's history takes them,
/// the next step runs them; returned to be emitted.
pub(super) fn emit_forced0(a: &mut SeqState, forced: &[u32]) -> Vec<u32> {
    if let Some(s) = &mut a.sampler {
        forced.iter().for_each(|&t| s.accept(t));
    }
    a.rows_next = forced.to_vec();
    forced.to_vec()
}

/// Checks `next` (none: every kept draft accepted and what follows is forced) against its
/// row's mask and commits the accepted drafts and `next` to the request's matcher. Returns the
/// tokens to emit: those, each followed by what the grammar forces after it (which the
/// sampler's history takes); and per token whether it is an accepted draft.
pub(super) fn commit(
    a: &mut SeqState,
    pl: &Planned,
    accepted: usize,
    next: Option<u32>,
) -> Result<(Vec<u32>, Vec<bool>)> {
    let mut tokens = pl.drafts[..accepted].to_vec();
    tokens.extend(next);
    let Some(g) = &mut a.guide else {
        let drafted = (0..tokens.len()).map(|k| k < accepted).collect();
        return Ok((tokens, drafted));
    };
    let w = g.words();
    if let Some(next) = next {
        let row = pl
            .masks
            .get(accepted * w..(accepted + 1) * w)
            .unwrap_or_default();
        if !allowed(row, next) {
            return Err(GrammarError::Rejected {
                token: next,
                message: format!("picked outside mask row {accepted}"),
            }
            .into());
        }
    }
    let mut out = Vec::with_capacity(tokens.len());
    let mut drafted = Vec::with_capacity(tokens.len());
    for (k, t) in tokens.into_iter().enumerate() {
        out.push(t);
        drafted.push(k < accepted);
        // A complete grammar allows only the end token, which ends the request unconsumed.
        if g.is_stopped() {
            break;
        }
        let forced = g.commit(&[t])?;
        if let Some(s) = &mut a.sampler {
            forced.iter().for_each(|&f| s.accept(f));
        }
        drafted.extend(forced.iter().map(|_| false));
        out.extend(forced);
    }
    Ok((out, drafted))
}
