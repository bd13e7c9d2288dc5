//! What speculation measures at load on this device: the verify length policy (the schedule's
//! SPS(B) profile, a confidence threshold or the fixed block) and a speculative cycle's costs
//! for the bypass. `cost_cache` keeps both between runs.

use std::time::Instant;

use crate::gpu::GpuContext;
use crate::model::forward::Forward;
use crate::speculative::bypass::CycleCosts;
use crate::speculative::dspark::Dspark;
use crate::speculative::VerifyPolicy;
use crate::Result;

use super::DraftOptions;

/// How a drafter's verify length is chosen: the schedule over an SPS(B) profile measured now,
/// a confidence threshold, or always the block.
/// The schedule's step times come from `secs` where an earlier run stored them for B up to
/// `n_draft + 1`, else they are measured now and left in `secs`.
pub(super) fn verify_policy(
    ctx: &GpuContext,
    fwd: &mut Forward,
    d: &DraftOptions,
    n_draft: u32,
    secs: &mut Option<Vec<f64>>,
) -> Result<VerifyPolicy> {
    Ok(if d.schedule {
        let steps = match secs {
            Some(s) if s.len() == (n_draft + 1) as usize => s.clone(),
            _ => {
                let s = crate::speculative::profile::step_seconds(ctx, fwd, n_draft + 1, 3)?;
                *secs = Some(s.clone());
                s
            }
        };
        VerifyPolicy::Schedule(crate::speculative::schedule::SpsProfile::from_secs(&steps)?)
    } else if d.p_min > 0.0 {
        VerifyPolicy::Threshold(d.p_min)
    } else {
        VerifyPolicy::Fixed
    })
}

/// What one speculative cycle costs on this device, measured at load with an empty cache (left
/// empty, the drafter reset): a plain decode step and a verify step of `n_draft + 1` rows
/// (interleaved rounds, [`crate::speculative::profile::verify_step_rounds`]), then the injection of a
/// cycle's commit (2 rows: one accepted draft and the bonus) and a draft block after it. The
/// medians of 5 rounds after an untimed one.
pub(super) fn cycle_costs(
    ctx: &GpuContext,
    fwd: &mut Forward,
    dspark: &mut Dspark,
    n_draft: u32,
) -> Result<CycleCosts> {
    use crate::speculative::stats::median;
    const ROUNDS: usize = 5;
    let verify_rows = n_draft + 1;
    fwd.set_tap_row(0);
    let steps =
        crate::speculative::profile::verify_step_rounds(ctx, fwd, &[1, verify_rows], ROUNDS)?;
    // The last verify step left its tap rows staged: inject two of them and draft after them.
    let rows = 2.min(verify_rows);
    let (mut inject, mut draft) = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        dspark.reset();
        let t = Instant::now();
        dspark.inject(ctx, rows, 0)?;
        let ti = t.elapsed().as_secs_f64();
        let t = Instant::now();
        dspark.draft(ctx, 0, rows, None)?;
        let td = t.elapsed().as_secs_f64();
        if round > 0 {
            inject.push(ti);
            draft.push(td);
        }
    }
    dspark.reset();
    Ok(CycleCosts {
        step: median(&steps[0]),
        draft: median(&draft),
        inject: median(&inject),
        verify: median(&steps[1]),
        verify_rows,
    })
}

/// Rows of filler the deeper measurement is taken after (less where the ubatch or half the
/// cache is less). On lavapipe it adds about 1.5 s to a load that measures (mostly building the
/// filler's and the deeper attention's pipelines; 512 rows cost 8 s), once per cost-cache key.
const DEEP_POS: u32 = 128;

/// A plain step and a verify of `n_draft + 1` rows timed again at a deeper position (the cache
/// filled with [`DEEP_POS`] rows of token 0; emptied afterwards; medians of 3 rounds after an
/// untimed one), so that a cycle can be charged at the depth a run drafts at
/// ([`super::verdict::DeepCosts`]). `None` where the cache is too short to go deeper.
pub(super) fn deep_costs(
    ctx: &GpuContext,
    fwd: &mut Forward,
    n_draft: u32,
) -> Result<Option<super::verdict::DeepCosts>> {
    use crate::speculative::stats::median;
    let verify_rows = n_draft + 1;
    let pos = DEEP_POS
        .min(fwd.max_rows())
        .min(fwd.kv.capacity().saturating_sub(verify_rows) / 2);
    if pos < 16 || fwd.kv.len(0)? != 0 {
        return Ok(None);
    }
    fwd.step(ctx, &vec![0u32; pos as usize], 1)?;
    let steps = crate::speculative::profile::verify_step_rounds(ctx, fwd, &[1, verify_rows], 3);
    fwd.truncate(ctx, 0)?;
    let steps = steps?;
    Ok(Some(super::verdict::DeepCosts {
        pos,
        step: median(&steps[0]),
        verify: median(&steps[1]),
    }))
}
