//! The drafting half of a batched step (`engine::batch_run`): each drafting request's drafter
//! given its waiting committed rows, every greedy request's draft pass recorded into one
//! submission (sampled drafting picks each slot's token on the host, one request at a time),
//! and the verify lengths chosen over all of them together.

use super::batch::Engine;
use super::batch_run::{BatchRequest, Failures, Pending, Planned, SeqState};
use super::decision::Admit;
use crate::speculative::accept::{draft_distribution, draft_sample};
use crate::speculative::bypass::Bypass;
use crate::speculative::dspark::Draft;
use crate::speculative::schedule::{confidence_schedule, threshold_len};
use crate::speculative::stats::SpecStats;
use crate::speculative::SpecOptions;
use crate::speculative::VerifyPolicy;
use crate::{Error, Result};
use std::time::Instant;

/// Injects request `i`'s waiting rows.
pub(super) fn flush(eng: &mut Engine, a: &mut SeqState) -> Result<()> {
    if let Some(p) = &mut a.pending {
        if p.n > 0 {
            let t = Instant::now();
            let d = eng.drafters.get_mut(a.seq).ok_or_else(no_drafter)?;
            d.inject(&eng.ctx, p.n, p.at, &p.tokens)?;
            p.n = 0;
            p.tokens.clear();
            p.spec.inject_secs += t.elapsed().as_secs_f64();
            p.spec.injections += 1;
        }
    }
    Ok(())
}

fn no_drafter() -> Error {
    Error::Usage("a drafting request's slot has no drafter".into())
}

/// Room for `rows` more rows at position `p` in request `a`'s staging (flushing the waiting
/// rows first when they would not fit), and its taps pointed there.
pub(super) fn make_room(eng: &mut Engine, a: &mut SeqState, p: u32, rows: u32) -> Result<()> {
    let Some(pend) = &a.pending else {
        return Ok(());
    };
    let room = eng.fwd.tap_capacity(a.seq);
    if pend.n > 0 && pend.n.saturating_add(rows) > room {
        flush(eng, a)?;
    }
    if let Some(pend) = &mut a.pending {
        if pend.n == 0 {
            pend.at = p;
        }
        eng.fwd.set_tap_row(a.seq, pend.n)?;
    }
    Ok(())
}

/// Drafts for every decoding request that can, then their verify lengths. A request whose
/// drafter fails is recorded in `failed` (its plan stays, without drafts; the caller drops it).
pub(super) fn draft_all<R: BatchRequest>(
    eng: &mut Engine,
    active: &mut [R],
    plans: &mut [Planned],
    failed: &mut Failures,
) {
    let Some(spec) = eng.spec.clone() else {
        return;
    };
    let capacity = eng.fwd.capacity();
    let n_vocab = eng.fwd.hp().n_vocab as usize;
    let mut confs: Vec<Vec<f32>> = Vec::new();
    let mut who: Vec<usize> = Vec::new();
    // Greedy drafters set up here run in one submission below: (plan, sequence, length).
    let mut greedy: Vec<(usize, usize, usize)> = Vec::new();
    // At this occupancy, do the verify rows of every decoding request pay?
    let decoding = plans.iter().filter(|pl| pl.prompt_rows == 0).count();
    let step_pays = eng
        .decision
        .as_ref()
        .is_none_or(|d| d.step_pays(decoding, spec.n_max));
    for (k, pl) in plans.iter_mut().enumerate() {
        let a = active[pl.i].state_mut();
        let Some(p) = a.pending.as_mut().filter(|_| pl.prompt_rows == 0) else {
            continue;
        };
        // A step that runs forced rows drafts nothing.
        let skip = pl.tokens.len() != 1 || !step_pays;
        match decide(eng, p, &spec, skip) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                failed.push((pl.i, e));
                continue;
            }
        }
        let remaining = a.max_tokens.saturating_sub(a.generated.len());
        let max_len = (spec.n_max as usize)
            .min(remaining.saturating_sub(1))
            .min(capacity.saturating_sub(pl.p0 + 1) as usize);
        let Some(&anchor) = pl.tokens.first() else {
            continue;
        };
        if max_len == 0 {
            continue;
        }
        let together = eng
            .drafters
            .get(a.seq)
            .is_some_and(|d| d.dspark().is_some());
        if a.sampler.is_none() && together {
            match prepare_greedy(eng, a, anchor, pl.p0) {
                Ok(()) => greedy.push((k, a.seq, max_len)),
                Err(e) => failed.push((pl.i, e)),
            }
            continue;
        }
        match draft_one(eng, a, anchor, pl) {
            Ok(draft) => {
                pl.proposed = Some(draft.tokens.len());
                let len = max_len.min(draft.tokens.len());
                pl.drafts = draft.tokens[..len].to_vec();
                confs.push(draft.conf[..len.min(draft.conf.len())].to_vec());
                who.push(k);
            }
            Err(e) => {
                pl.dists.clear();
                failed.push((pl.i, e));
            }
        }
    }
    let seqs: Vec<usize> = greedy.iter().map(|g| g.1).collect();
    let drafted = draft_together(eng, &seqs);
    for ((k, _, max_len), draft) in greedy.into_iter().zip(drafted) {
        let pl = &mut plans[k];
        match draft {
            Ok(draft) => {
                pl.proposed = Some(draft.tokens.len());
                let len = max_len.min(draft.tokens.len());
                pl.drafts = draft.tokens[..len].to_vec();
                confs.push(draft.conf[..len.min(draft.conf.len())].to_vec());
                who.push(k);
            }
            Err(e) => failed.push((pl.i, e)),
        }
    }
    for (&k, len) in who.iter().zip(verify_lens(&spec.policy, &confs)) {
        let pl = &mut plans[k];
        pl.drafts.truncate(len);
        pl.dists.truncate(len * n_vocab);
        if let Err(e) = super::batch_grammar::cut(active[pl.i].state_mut(), pl, n_vocab) {
            failed.push((pl.i, e));
            continue;
        }
        pl.tokens.extend_from_slice(&pl.drafts);
        pl.n_logits = pl.tokens.len() as u32;
    }
}

/// The verify length of each drafting request from its drafts' confidences: all of them
/// (fixed), up to the first below the threshold, or Algorithm 1 over every request together.
fn verify_lens(policy: &VerifyPolicy, confs: &[Vec<f32>]) -> Vec<usize> {
    match policy {
        VerifyPolicy::Fixed => confs.iter().map(Vec::len).collect(),
        VerifyPolicy::Threshold(p) => confs.iter().map(|c| threshold_len(c, *p)).collect(),
        VerifyPolicy::Schedule(sps) => {
            let refs: Vec<&[f32]> = confs.iter().map(Vec::as_slice).collect();
            confidence_schedule(&refs, sps).lens
        }
    }
}

/// Whether request `p` drafts this step: never when the engine's verdict left its drafter
/// out, on a step the caller skips (forced rows, an occupancy where drafting does not pay),
/// nor (with a bypass) on its first decode step, which measures a plain step; else as its
/// bypass says. Steps not drafted count as bypassed. The first call sets the request up (its
/// counters, the engine's verdict, its bypass from the costs charged).
fn decide(eng: &mut Engine, p: &mut Pending, spec: &SpecOptions, skip: bool) -> Result<bool> {
    let first = !std::mem::replace(&mut p.started, true);
    if first {
        p.spec = SpecStats::new(spec.n_max);
        let admit = match &mut eng.decision {
            Some(d) => d.admit(),
            None => Admit::Draft(spec.bypass),
        };
        match admit {
            Admit::Off => p.off = true,
            Admit::Draft(Some(cfg)) => {
                p.bypass = Some(Bypass::new(cfg).map_err(|e| Error::Usage(e.to_string()))?);
            }
            Admit::Draft(None) => {}
        }
    }
    let plain_first = first && p.bypass.is_some();
    let draft =
        !p.off && !plain_first && !skip && p.bypass.as_mut().is_none_or(Bypass::should_draft);
    if !draft {
        p.spec.bypassed += 1;
    }
    Ok(draft)
}

/// Request `a`'s drafter, given its waiting rows, is set up to draft greedily after `anchor`
/// at `p0` ([`draft_together`] runs it).
fn prepare_greedy(eng: &mut Engine, a: &mut SeqState, anchor: u32, p0: u32) -> Result<()> {
    flush(eng, a)?;
    let d = eng.drafters.get_mut(a.seq).ok_or_else(no_drafter)?;
    if p0 != d.next_position() {
        return Err(Error::Usage(format!(
            "draft at position {p0}, but the drafter holds rows up to {}",
            d.next_position()
        )));
    }
    d.as_dspark()
        .ok_or_else(no_drafter)?
        .prepare_draft(&eng.ctx, anchor)
}

/// The greedy draft passes of the drafters of `seqs`, set up by [`prepare_greedy`], in one
/// submission; each one's drafts, in order. A pass that cannot be recorded, or a submission
/// that fails, fails those requests (the first gets the error itself).
fn draft_together(eng: &Engine, seqs: &[usize]) -> Vec<Result<Draft>> {
    if seqs.is_empty() {
        return Vec::new();
    }
    let recorded = || -> Result<()> {
        let mut list = Vec::new();
        for &seq in seqs {
            let d = eng.drafters.get(seq).and_then(|d| d.dspark());
            list.extend(d.ok_or_else(no_drafter)?.draft_dispatches()?);
        }
        Ok(crate::kernels::launch::submit(
            &eng.ctx,
            "dspark drafts",
            &list,
        )?)
    };
    if let Err(e) = recorded() {
        let why = e.to_string();
        let mut out = vec![Err(e)];
        out.extend(seqs[1..].iter().map(|_| {
            Err(Error::Usage(format!(
                "the slots' draft passes failed: {why}"
            )))
        }));
        return out;
    }
    seqs.iter()
        .map(|&seq| {
            let d = eng.drafters.get(seq).and_then(|d| d.dspark());
            d.ok_or_else(no_drafter)?.read_draft(&eng.ctx)
        })
        .collect()
}

/// Request `a`'s drafter, given its waiting rows, drafts a block after `anchor` (sampled drafts
/// leave their distributions in `pl.dists`).
fn draft_one(eng: &mut Engine, a: &mut SeqState, anchor: u32, pl: &mut Planned) -> Result<Draft> {
    flush(eng, a)?;
    let d = eng.drafters.get_mut(a.seq).ok_or_else(no_drafter)?;
    match &a.sampler {
        None => d.draft(&eng.ctx, anchor, pl.p0, None),
        Some(s) => {
            let temp = s.params().temp;
            let (rng, dists) = (&mut a.draft_rng, &mut pl.dists);
            let mut pick = |_: usize, logits: &[f32]| {
                let dist = draft_distribution(logits, temp);
                let t = draft_sample(&dist, rng);
                dists.extend_from_slice(&dist);
                t
            };
            d.draft(&eng.ctx, anchor, pl.p0, Some(&mut pick))
        }
    }
}
