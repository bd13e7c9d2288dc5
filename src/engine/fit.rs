//! The context of a run without `-c` ([`crate::memory::context`]), planned as the load plans:
//! the same model, drafter, cache types and ubatch, the adapter's limits and the budget the load
//! will check against, before any device is created. An explicit `-c` that does not fit is
//! refused here with the alternatives the planner computes.

use crate::gguf::GgufFile;
use crate::gpu::adapters::selected_adapter_with_memory;
use crate::memory::context::{default_ctx, CtxChoice};
use crate::memory::suggest::suggestions;
use crate::memory::{self, Budget, DeviceLimits, DrafterShape, Plan, RunParams, TargetShape};
use crate::model::{DrafterMeta, Hparams};
use crate::{Error, Result};

use super::{resolve_model, EngineOptions};

/// The budget the load of `opts` will plan against, and the limits of its adapter (generic GPU
/// limits when no adapter is found: the load reports that itself).
pub fn budget_and_limits(opts: &EngineOptions) -> (Budget, DeviceLimits) {
    match selected_adapter_with_memory(opts.device).ok().flatten() {
        Some((a, m)) => (
            Budget::resolve_for(opts.gpu_mem, a.device_type == "Cpu", m),
            DeviceLimits::from_summary(&a),
        ),
        None => (
            Budget::resolve_for(opts.gpu_mem, false, None),
            DeviceLimits::GENERIC,
        ),
    }
}

/// The context `n_slots` sequences of `opts` take without `-c`, with the budget it was fitted
/// to. `opts.n_ctx` is ignored.
pub fn fit_ctx(opts: &EngineOptions, n_slots: u32) -> Result<(CtxChoice, Budget)> {
    let o = Opened::new(opts)?;
    let (budget, limits) = budget_and_limits(opts);
    let fits = |per_slot: u32| {
        o.plan(opts, n_slots, per_slot, budget, limits)
            .is_some_and(|p| p.fits())
    };
    Ok((default_ctx(o.hp.n_ctx_train, n_slots, fits), budget))
}

/// Refuses `opts.n_ctx` for each of `n_slots` slots (an explicit `-c`) when its plan does not
/// fit, naming what would (`memory::suggest`); the load checks the same plan again.
pub fn refuse_unless_fits(opts: &EngineOptions, n_slots: u32) -> Result<()> {
    let o = Opened::new(opts)?;
    let (budget, limits) = budget_and_limits(opts);
    let Some(plan) = o.plan(opts, n_slots, opts.n_ctx, budget, limits) else {
        // The drafter's options are refused by the load with their own message.
        return Ok(());
    };
    if plan.fits() {
        return Ok(());
    }
    let mut reasons = plan.misfit_summary();
    if let Some(p) = o.params(opts, n_slots, opts.n_ctx) {
        let alts = suggestions(o.target(), o.drafter(), &p, &plan);
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

/// The model and drafter files of `opts`, opened for planning.
struct Opened {
    file: GgufFile,
    hp: Hparams,
    drafter: Option<(GgufFile, DrafterMeta)>,
}

impl Opened {
    fn new(opts: &EngineOptions) -> Result<Opened> {
        let file = GgufFile::open(&resolve_model(&opts.model)?)?;
        let hp = Hparams::from_gguf(&file)?;
        let drafter = match &opts.draft {
            Some(d) => {
                let f = GgufFile::open(&d.model)?;
                let meta = DrafterMeta::from_gguf(&f)?;
                Some((f, meta))
            }
            None => None,
        };
        Ok(Opened { file, hp, drafter })
    }

    fn target(&self) -> TargetShape<'_> {
        TargetShape {
            hp: &self.hp,
            tensors: &self.file.tensors,
        }
    }

    fn drafter(&self) -> Option<DrafterShape<'_>> {
        self.drafter.as_ref().map(|(f, meta)| DrafterShape {
            meta,
            tensors: &f.tensors,
        })
    }

    /// The run parameters of `n_slots` slots of `per_slot` rows, as the load builds them;
    /// `None` when the drafter cannot run at that context.
    fn params(&self, opts: &EngineOptions, n_slots: u32, per_slot: u32) -> Option<RunParams> {
        let meta = self.drafter.as_ref().map(|(_, m)| m);
        super::batch::run_params(opts, meta, n_slots, per_slot).ok()
    }

    fn plan(
        &self,
        opts: &EngineOptions,
        n_slots: u32,
        per_slot: u32,
        budget: Budget,
        limits: DeviceLimits,
    ) -> Option<Plan> {
        let p = self.params(opts, n_slots, per_slot)?;
        // The batched engine's plan, whatever the slots: what the load allocates.
        Some(Plan {
            buffers: memory::batch::buffers(self.target(), self.drafter(), &p, &limits),
            budget,
            limits,
        })
    }
}
