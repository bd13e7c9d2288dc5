//! A batched session: the target model with one K/V cache per sequence and one set of
//! activations for every sequence's rows ([`BatchForward`]), and with `-md` a DSpark drafter per
//! sequence fed by that sequence's taps: what `flint serve -np N` runs on a dense model and what
//! `flint bench -npl` times.
//!
//! Loading follows the single session's order: metadata → plan ([`crate::memory::batch`]) →
//! refuse with the numbers if it does not fit → upload weights → build the forward.

use std::path::PathBuf;
use std::sync::Arc;

use crate::gpu::GpuContext;
use crate::memory::{self, Budget, DeviceLimits, Plan, RunParams, TargetShape};
use crate::model::forward::batch::{BatchForward, Segment};
use crate::model::forward::Allocator;
use crate::model::weights;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

use super::compile_progress::CompileProgress;
use super::{draft_params, refuse_unless_fits, resolve_model, EngineOptions, Opened};
use crate::memory::batch::slot_name;
use crate::memory::DrafterShape;
use crate::speculative::dspark::{DrafterConfig, Dspark};
use crate::speculative::schedule::SpsProfile;
use crate::speculative::{SpecOptions, VerifyPolicy};

/// A loaded model ready to run batched steps.
pub struct BatchEngine {
    pub ctx: Arc<GpuContext>,
    pub fwd: BatchForward,
    pub tok: Tokenizer,
    pub plan: Plan,
    pub model_path: PathBuf,
    /// (plan name, bytes) of every buffer created but the target's weights, in creation order
    /// (slot `s > 0`'s drafter under `slot{s}.`).
    pub allocated: Vec<(String, u64)>,
    /// One drafter per sequence (empty without `-md`), and how to speculate with them.
    pub drafters: Vec<Dspark>,
    pub spec: Option<SpecOptions>,
}

impl BatchEngine {
    /// `n_seq` sequences of `opts.n_ctx` rows each; steps of at most [`memory::batch::max_rows`]
    /// rows; with `opts.draft`, a drafter per sequence.
    pub fn load(opts: &EngineOptions, n_seq: u32) -> Result<BatchEngine> {
        if n_seq == 0 {
            return Err(Error::Usage("-np must be at least 1".into()));
        }
        let model_path = resolve_model(&opts.model)?;
        let Opened {
            ctx,
            file,
            hp,
            tok,
            dfile,
            dmeta,
        } = Opened::new(opts, &model_path)?;
        let mut params = RunParams {
            n_ctx: opts.n_ctx,
            n_seq,
            n_ubatch: opts.n_ubatch,
            type_k: opts.type_k,
            type_v: opts.type_v,
            ..RunParams::default()
        };
        if let (Some(d), Some(meta)) = (&opts.draft, &dmeta) {
            params.draft = Some(draft_params(d, meta, opts.n_ctx)?);
        }
        let dshape = dmeta
            .as_ref()
            .zip(dfile.as_ref())
            .map(|(meta, f)| DrafterShape {
                meta,
                tensors: &f.tensors,
            });
        // The batched plan whatever the sequences (`memory::plan` gives it for `-np` > 1).
        let target = TargetShape {
            hp: &hp,
            tensors: &file.tensors,
        };
        let limits = DeviceLimits::from_context(&ctx);
        let plan = Plan {
            buffers: memory::batch::buffers(target, dshape, &params, &limits),
            budget: Budget::resolve(opts.gpu_mem, Some(&ctx)),
            limits,
        };
        refuse_unless_fits(&plan)?;
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
        let mut allocated = std::mem::take(&mut alloc.records);
        drop(alloc);
        let (mut drafters, mut spec): (Vec<Dspark>, _) = (Vec::new(), None);
        if let (Some(d), Some(f), Some(dp), Some(shape)) =
            (&opts.draft, &dfile, &params.draft, dshape)
        {
            let one = Plan {
                buffers: memory::batch::drafter_buffers(shape, dp, &params, &plan.limits),
                ..plan.clone()
            };
            for seq in 0..n_seq as usize {
                let mut alloc = Allocator::new(&ctx, &one);
                let cfg = DrafterConfig {
                    ctx_rows: dp.window.unwrap_or(params.n_ctx),
                    inject_chunk: dp.inject_chunk,
                    type_k: dp.type_k,
                    type_v: dp.type_v,
                };
                // The first slot's drafter uploads the weights; the others share them.
                let mut dspark = match drafters.first() {
                    None => Dspark::load(&ctx, f, fwd.hp(), fwd.weights(), &cfg, &mut alloc)?,
                    Some(first) => first.sibling(&ctx, &cfg, &mut alloc)?,
                };
                fwd.set_taps(&ctx, seq, &dspark.meta.target_layers, dspark.taps_buffer())?;
                dspark.warm(&ctx)?;
                let weights = dspark.allocations.iter().map(|(n, b)| {
                    let n = n.strip_prefix("drafter.").unwrap_or(n);
                    (format!("drafter.{n}"), *b)
                });
                let records = weights.chain(alloc.records.drain(..));
                allocated.extend(records.map(|(n, b)| (slot_name(seq, &n), b)));
                drafters.push(dspark);
            }
            let policy = if d.schedule {
                let rows = memory::batch::logit_rows(&params);
                VerifyPolicy::Schedule(batch_sps(&ctx, &mut fwd, rows)?)
            } else if d.p_min > 0.0 {
                VerifyPolicy::Threshold(d.p_min)
            } else {
                VerifyPolicy::Fixed
            };
            spec = Some(SpecOptions {
                n_max: dp.n_draft,
                policy,
                bypass: None,
            });
        }
        compiling.finish(&ctx)?;
        Ok(BatchEngine {
            ctx,
            fwd,
            tok,
            plan,
            model_path,
            allocated,
            drafters,
            spec,
        })
    }

    /// One batched step (see [`BatchForward::step`]).
    pub fn step(&mut self, segs: &[Segment<'_>]) -> Result<()> {
        self.fwd.step(&self.ctx, segs)
    }
}

/// SPS(B) of batched steps, B = 1..=`max_b` rows (every row's logits, as a verify step): timed at
/// B = 1, 2, 4, … and `max_b` on sequence 0 (the quickest of 3 rounds after an untimed one, the
/// cache left empty), linear in between. The schedule over R requests weighs the rows of every
/// request's verify with it.
fn batch_sps(ctx: &GpuContext, fwd: &mut BatchForward, max_b: u32) -> Result<SpsProfile> {
    let max_b = max_b.min(fwd.max_rows()).max(1);
    let mut points: Vec<u32> = std::iter::successors(Some(1u32), |b| b.checked_mul(2))
        .take_while(|&b| b < max_b)
        .collect();
    points.push(max_b);
    let mut timed = Vec::with_capacity(points.len());
    for &b in &points {
        let tokens = vec![0u32; b as usize];
        let mut best = f64::INFINITY;
        for round in 0..4 {
            fwd.reset(0)?;
            let t = std::time::Instant::now();
            let seg = Segment {
                seq: 0,
                tokens: &tokens,
                n_logits: b,
            };
            fwd.step(ctx, &[seg])?;
            fwd.argmax(ctx)?;
            if round > 0 {
                best = best.min(t.elapsed().as_secs_f64());
            }
        }
        timed.push((b, best));
    }
    fwd.reset(0)?;
    let secs: Vec<f64> = (1..=max_b)
        .map(|b| {
            let hi = timed
                .iter()
                .position(|&(p, _)| p >= b)
                .unwrap_or(timed.len() - 1);
            let (b1, s1) = timed[hi];
            match hi.checked_sub(1).map(|lo| timed[lo]) {
                Some((b0, s0)) if b1 > b0 => {
                    s0 + (s1 - s0) * f64::from(b - b0) / f64::from(b1 - b0)
                }
                _ => s1,
            }
        })
        .collect();
    Ok(SpsProfile::from_secs(&secs)?)
}
