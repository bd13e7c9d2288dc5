//! A batched session: the target model with one K/V cache per sequence and one set of
//! activations for every sequence's rows ([`BatchForward`]), what `flint serve -np N` runs on a
//! dense model without a drafter and what `flint bench --batched` times.
//!
//! Loading follows the single session's order: metadata → plan ([`crate::memory::batch`]) →
//! refuse with the numbers if it does not fit → upload weights → build the forward.

use std::path::PathBuf;
use std::sync::Arc;

use crate::gguf::GgufFile;
use crate::gpu::{DeviceOptions, GpuContext};
use crate::memory::{self, Budget, DeviceLimits, Plan, RunParams, TargetShape};
use crate::model::forward::batch::{BatchForward, Segment};
use crate::model::forward::Allocator;
use crate::model::{weights, Hparams};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

use super::compile_progress::CompileProgress;
use super::{resolve_model, EngineOptions};

/// A loaded model ready to run batched steps.
pub struct BatchEngine {
    pub ctx: Arc<GpuContext>,
    pub fwd: BatchForward,
    pub tok: Tokenizer,
    pub plan: Plan,
    pub model_path: PathBuf,
    /// (plan name, bytes) of every non-weight buffer created, in creation order.
    pub allocated: Vec<(String, u64)>,
}

impl BatchEngine {
    /// `n_seq` sequences of `opts.n_ctx` rows each; steps of at most `max(opts.n_ubatch, n_seq)`
    /// rows. `opts.draft` must be `None` (slots with a drafter take turns).
    pub fn load(opts: &EngineOptions, n_seq: u32) -> Result<BatchEngine> {
        if opts.draft.is_some() {
            return Err(Error::Usage(
                "batched steps run without a drafter (slots with a drafter take turns)".into(),
            ));
        }
        if n_seq == 0 || opts.n_ctx == 0 || opts.n_ubatch == 0 {
            return Err(Error::Usage("-np, -c and -ub must be at least 1".into()));
        }
        let model_path = resolve_model(&opts.model)?;
        let ctx = Arc::new(GpuContext::new(&DeviceOptions {
            index: opts.device,
            ..DeviceOptions::default()
        })?);
        let file = GgufFile::open(&model_path)?;
        let hp = Hparams::from_gguf(&file)?;
        let tok = Tokenizer::from_gguf(&file)?;
        let params = RunParams {
            n_ctx: opts.n_ctx,
            n_seq,
            n_ubatch: opts.n_ubatch,
            type_k: opts.type_k,
            type_v: opts.type_v,
            ..RunParams::default()
        };
        let plan = memory::plan(
            TargetShape {
                hp: &hp,
                tensors: &file.tensors,
            },
            None,
            &params,
            Budget::resolve(opts.gpu_mem, Some(&ctx)),
            DeviceLimits::from_context(&ctx),
        );
        if !plan.fits() {
            return Err(Error::OutOfMemory {
                requested: plan.total(),
                limit: plan.budget.usable(),
                reasons: plan.misfit_summary(),
            });
        }
        let w = weights::load(&ctx, &file, &hp, opts.progress)?;
        drop(file);
        let compiling = CompileProgress::start(&ctx, opts.progress);
        let mut alloc = Allocator::new(&ctx, &plan);
        let mut fwd = BatchForward::new(&ctx, hp, w, &params, &mut alloc)?;
        // Decode rows of one to every sequence, and a full ubatch.
        let n = n_seq.min(fwd.max_rows());
        let mut shapes: Vec<(u32, u32)> = (1..=n).map(|b| (b, b)).collect();
        shapes.push((fwd.max_rows(), 1));
        fwd.warm(&ctx, &shapes)?;
        let allocated = std::mem::take(&mut alloc.records);
        drop(alloc);
        compiling.finish(&ctx)?;
        Ok(BatchEngine {
            ctx,
            fwd,
            tok,
            plan,
            model_path,
            allocated,
        })
    }

    /// One batched step (see [`BatchForward::step`]).
    pub fn step(&mut self, segs: &[Segment<'_>]) -> Result<()> {
        self.fwd.step(&self.ctx, segs)
    }
}
