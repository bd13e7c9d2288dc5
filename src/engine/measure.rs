//! What speculation measures at load on this device: the verify length policy (the schedule's
//! SPS(B) profile, a confidence threshold or the fixed block) and a speculative cycle's costs
//! for the bypass. `cost_cache` keeps both between runs.

use std::time::Instant;

use crate::gpu::GpuContext;
use crate::model::forward::SeqSteps;
use crate::speculative::bypass::{BypassConfig, CycleCosts};
use crate::speculative::Drafter;
use crate::speculative::{SpecOptions, VerifyPolicy};
use crate::Result;

use super::cost_cache::Measured;
use super::{verdict, DraftOptions};

/// How a loaded drafter speculates on this device: its verify-length policy and, with the
/// bypass (`d.bypass`), the cycle costs it is charged at the verify length the policy runs and
/// at the depth earlier cycles drafted at. Measurements `measured` holds from an earlier run
/// ([`super::cost_cache`]) are used as they are; the others are taken now on `fwd` (its
/// sequence empty, and left empty) and `dspark` (reset after), and left in `measured`.
/// `policy`: the policy when the caller has already chosen it (the batched schedule).
pub(crate) fn spec_options(
    ctx: &GpuContext,
    fwd: &mut dyn SeqSteps,
    dspark: &mut dyn Drafter,
    d: &DraftOptions,
    n_draft: u32,
    policy: Option<VerifyPolicy>,
    measured: &mut Measured,
) -> Result<SpecOptions> {
    let policy = match policy {
        Some(p) => p,
        None => verify_policy(ctx, fwd, d, n_draft, &mut measured.step_secs)?,
    };
    let bypass = if d.bypass {
        let c = match measured.costs {
            Some(c) if c.verify_rows == n_draft + 1 => c,
            _ => {
                measured.deep = deep_costs(ctx, fwd, n_draft)?;
                cycle_costs(ctx, fwd, dspark, n_draft)?
            }
        };
        measured.costs = Some(c);
        let profile = verdict::Profile {
            costs: c,
            step_secs: measured.step_secs.as_deref(),
            deep: measured.deep,
            fixed: matches!(policy, VerifyPolicy::Fixed),
        };
        let c = profile.charged(measured.history.observed.as_ref());
        Some(BypassConfig {
            costs: c.is_valid().then_some(c),
            ..BypassConfig::default()
        })
    } else {
        None
    };
    Ok(SpecOptions {
        n_max: n_draft,
        policy,
        bypass,
    })
}

/// How a drafter's verify length is chosen: the schedule over an SPS(B) profile measured now,
/// a confidence threshold, or always the block.
/// The schedule's step times come from `secs` where an earlier run stored them for B up to
/// `n_draft + 1`, else they are measured now and left in `secs`.
pub(crate) fn verify_policy(
    ctx: &GpuContext,
    fwd: &mut dyn SeqSteps,
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
pub(crate) fn cycle_costs(
    ctx: &GpuContext,
    fwd: &mut dyn SeqSteps,
    dspark: &mut dyn Drafter,
    n_draft: u32,
) -> Result<CycleCosts> {
    use crate::speculative::stats::median;
    const ROUNDS: usize = 5;
    let verify_rows = n_draft + 1;
    fwd.set_tap_row(0)?;
    let steps =
        crate::speculative::profile::verify_step_rounds(ctx, fwd, &[1, verify_rows], ROUNDS)?;
    // The last verify step left its tap rows staged: inject two of them and draft after them.
    let rows = 2.min(verify_rows);
    let (mut inject, mut draft) = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        dspark.reset();
        let t = Instant::now();
        dspark.inject(ctx, rows, 0, &[])?;
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
pub(crate) fn deep_costs(
    ctx: &GpuContext,
    fwd: &mut dyn SeqSteps,
    n_draft: u32,
) -> Result<Option<super::verdict::DeepCosts>> {
    use crate::speculative::stats::median;
    let verify_rows = n_draft + 1;
    let pos = DEEP_POS
        .min(fwd.max_rows())
        .min(fwd.capacity().saturating_sub(verify_rows) / 2);
    if pos < 16 || fwd.rows()? != 0 {
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
