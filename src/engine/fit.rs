//! The context of a run without `-c` ([`crate::memory::context`]), planned as the load plans:
//! the same opened model and drafter ([`super::open`]), cache types and ubatch, the device's
//! limits and the budget the load checks against. An explicit `-c` that does not fit is refused
//! here with the alternatives the planner computes.

use crate::memory::context::{default_ctx, CtxChoice};
use crate::memory::suggest::suggestions;
use crate::memory::{self, Plan, RunParams};
use crate::{Error, Result};

use super::open::Opened;
use super::EngineOptions;

/// The context `n_slots` sequences of `opts` take without `-c`. `opts.n_ctx` is ignored.
pub fn fit_ctx(o: &Opened, opts: &EngineOptions, n_slots: u32) -> CtxChoice {
    // The context that fits with every weight on the device; automatic placement then fits
    // the weights at the floor context when none does.
    let mut all_device = opts.clone();
    all_device.placement.auto = false;
    let fits = |per_slot: u32| plan(o, &all_device, n_slots, per_slot).is_some_and(|p| p.fits());
    default_ctx(o.hp.n_ctx_train, n_slots, fits)
}

/// Refuses `opts.n_ctx` for each of `n_slots` slots (an explicit `-c`) when its plan does not
/// fit, naming what would (`memory::suggest`); the load allocates this plan.
pub fn refuse_unless_fits(o: &Opened, opts: &EngineOptions, n_slots: u32) -> Result<()> {
    let Some(plan) = plan(o, opts, n_slots, opts.n_ctx) else {
        // The drafter's options are refused by the load with their own message.
        return Ok(());
    };
    if plan.fits() {
        return Ok(());
    }
    let mut reasons = plan.misfit_summary();
    if let Some(p) = params(o, opts, n_slots, opts.n_ctx) {
        let alts = suggestions(o.target(), o.drafter_shape(), &p, &plan);
        if !alts.is_empty() {
            reasons.push(format!("alternatives: {}", alts.join(", ")));
        }
    }
    Err(Error::OutOfMemory {
        requested: plan.total(),
        limit: plan.budget.usable(),
        reasons,
    })
}

/// The run parameters of `n_slots` slots of `per_slot` rows, as the load builds them; `None`
/// when the drafter cannot run at that context.
fn params(o: &Opened, opts: &EngineOptions, n_slots: u32, per_slot: u32) -> Option<RunParams> {
    super::batch::run_params(opts, o.drafter_meta(), n_slots, per_slot).ok()
}

/// What the load allocates for `n_slots` slots of `per_slot` rows ([`memory::plan`]).
fn plan(o: &Opened, opts: &EngineOptions, n_slots: u32, per_slot: u32) -> Option<Plan> {
    let p = params(o, opts, n_slots, per_slot)?;
    Some(memory::plan(
        o.target(),
        o.drafter_shape(),
        &p,
        o.budget,
        o.limits,
    ))
}
