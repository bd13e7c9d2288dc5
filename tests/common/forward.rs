//! The GPU forward of a model file as the model tests build it: hyperparameters, a memory plan
//! that must fit, the weights uploaded, the planned buffers allocated.

use flint::gguf::GgufFile;
use flint::gpu::GpuContext;
use flint::memory::{self, Budget, DeviceLimits, RunParams, TargetShape};
use flint::model::forward::{Allocator, Forward};
use flint::model::{weights, Hparams};

/// Run parameters of a small test context: `n_ctx` rows, ubatches of `n_ubatch`.
pub fn params(n_ctx: u32, n_ubatch: u32) -> RunParams {
    RunParams {
        n_ctx,
        n_ubatch,
        ..RunParams::default()
    }
}

/// The plan of `file` under `params` on `ctx`; panics (naming the misfit) if it does not fit.
pub fn plan(ctx: &GpuContext, file: &GgufFile, params: &RunParams) -> memory::Plan {
    let hp = Hparams::from_gguf(file).expect("hyperparameters");
    let plan = memory::forward_plan(
        TargetShape {
            hp: &hp,
            tensors: &file.tensors,
        },
        None,
        params,
        Budget::resolve(None, Some(ctx)),
        DeviceLimits::from_context(ctx),
    );
    assert!(plan.fits(), "{:?}", plan.misfit_summary());
    plan
}

/// The GPU forward of `file` under `params`.
pub fn gpu_forward(ctx: &GpuContext, file: &GgufFile, params: &RunParams) -> Forward {
    let plan = plan(ctx, file, params);
    let hp = Hparams::from_gguf(file).expect("hyperparameters");
    let w = weights::load(ctx, file, &hp, false).expect("weights");
    let mut alloc = Allocator::new(ctx, &plan);
    Forward::new(ctx, hp, w, params, &mut alloc).expect("forward")
}
