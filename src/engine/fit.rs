//! The context of a run without `-c` ([`crate::memory::context`]), planned as the load plans:
//! the same model, drafter, cache types and ubatch, the adapter's limits and the budget the load
//! will check against, before any device is created.

use crate::gguf::GgufFile;
use crate::gpu::adapters::selected_adapter_with_memory;
use crate::memory::context::{default_ctx, CtxChoice};
use crate::memory::{self, Budget, DeviceLimits, DrafterShape, RunParams, TargetShape};
use crate::model::{DrafterMeta, Hparams};
use crate::Result;

use super::{draft_params, resolve_model, EngineOptions};

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
    let file = GgufFile::open(&resolve_model(&opts.model)?)?;
    let hp = Hparams::from_gguf(&file)?;
    let drafter = match &opts.draft {
        Some(d) => {
            let f = GgufFile::open(&d.model)?;
            let meta = DrafterMeta::from_gguf(&f)?;
            Some((d, f, meta))
        }
        None => None,
    };
    let (budget, limits) = budget_and_limits(opts);
    let target = TargetShape {
        hp: &hp,
        tensors: &file.tensors,
    };
    let fits = |per_slot: u32| {
        let mut p = RunParams {
            n_ctx: per_slot,
            n_seq: n_slots,
            n_ubatch: opts.n_ubatch,
            type_k: opts.type_k,
            type_v: opts.type_v,
            verify_rows: opts.verify_rows.max(1),
            ..RunParams::default()
        };
        let mut shape = None;
        if let Some((d, f, meta)) = &drafter {
            // A drafter that cannot run at this context does not fit it.
            match draft_params(d, meta, per_slot) {
                Ok(dp) => p.draft = Some(dp),
                Err(_) => return false,
            }
            p.n_ubatch = p.n_ubatch.min(d.inject_chunk);
            shape = Some(DrafterShape {
                meta,
                tensors: &f.tensors,
            });
        }
        memory::plan(target, shape, &p, budget, limits).fits()
    };
    Ok((default_ctx(hp.n_ctx_train, n_slots, fits), budget))
}
