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
use crate::memory::{self, Budget, DeviceLimits, Plan, RunParams};
use crate::model::forward::batch::{BatchForward, Segment};
use crate::model::forward::Allocator;
use crate::model::weights;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

use super::compile_progress::CompileProgress;
use super::cost_cache::CostCache;
use super::decision::Decision;
use super::measure::spec_options;
use super::open::{open, Opened};
use super::verdict;
use super::{draft_params, refuse_unless_fits, EngineOptions};
use crate::memory::batch::slot_name;
use crate::memory::DrafterShape;
use crate::model::forward::BatchSeq;
use crate::speculative::dspark::{DrafterConfig, Dspark};
use crate::speculative::schedule::SpsProfile;
use crate::speculative::{Drafter, SpecStats};
use crate::speculative::{SpecOptions, VerifyPolicy};

/// A loaded model ready to run batched steps.
pub struct Engine {
    pub ctx: Arc<GpuContext>,
    pub fwd: BatchForward,
    pub tok: Tokenizer,
    pub plan: Plan,
    pub model_path: PathBuf,
    /// (plan name, bytes) of every buffer created but the target's weights, in creation order
    /// (slot `s > 0`'s drafter under `slot{s}.`).
    pub allocated: Vec<(String, u64)>,
    /// Bytes of the model file.
    pub model_bytes: u64,
    /// The model file's metadata (pooling, infill tokens), kept when the file is closed.
    pub metadata: crate::gguf::Metadata,
    /// What the plan was made for (sequences, rows, cache types, the drafter's shape).
    params: RunParams,
    /// One drafter per sequence (empty without `-md`), and how to speculate with them. The
    /// DSpark drafters share one copy of the weights; a caller may put another [`Drafter`]
    /// in a slot (the adversarial drafters of the equivalence tests).
    pub drafters: Vec<Box<dyn Drafter + Send>>,
    pub spec: Option<SpecOptions>,
    /// The load-time measurements speculation uses came from an earlier run's
    /// ([`super::cost_cache`]) rather than being measured at this load.
    pub costs_cached: bool,
    /// Where those measurements are kept, with the acceptance requests' drafting shows.
    cost_cache: Option<CostCache>,
    /// Whether each request, and each step, drafts (`None`: always, `--spec-no-bypass`).
    pub decision: Option<Decision>,
    /// The log-probability ops over the logits rows, built by the first step that needs them.
    pub(super) logprobs: Option<super::logprobs::Ops>,
}

impl Engine {
    /// `n_seq` sequences of `opts.n_ctx` rows each; steps of at most [`memory::batch::max_rows`]
    /// rows; with `opts.draft`, a drafter per sequence.
    pub fn load(opts: &EngineOptions, n_seq: u32) -> Result<Engine> {
        Engine::from_opened(open(opts)?, opts, n_seq)
    }

    /// [`Engine::load`] from what [`open`] made (the file the context was fitted with): plan →
    /// refuse with the numbers if it does not fit → upload weights (the GGUF map is dropped
    /// after) → build the forward → the drafters.
    pub fn from_opened(o: Opened, opts: &EngineOptions, n_seq: u32) -> Result<Engine> {
        if n_seq == 0 || opts.n_ctx == 0 || opts.n_ubatch == 0 {
            return Err(Error::Usage("-c, -ub and -np must be at least 1".into()));
        }
        let params = run_params(opts, o.drafter_meta(), n_seq, opts.n_ctx)?;
        let plan = memory::plan(o.target(), o.drafter_shape(), &params, o.budget, o.limits);
        refuse_unless_fits(&plan)?;
        if let Some(line) = memory::placement::auto_line(&plan, &params.placement) {
            eprintln!("flint: {line}");
        }
        let o = o.for_plan(&plan)?;
        let host: Vec<String> = plan
            .buffers
            .iter()
            .filter(|b| b.placement == memory::Placement::Host)
            .map(|b| b.name.clone())
            .collect();
        let Opened {
            ctx,
            model_path,
            file,
            hp,
            tok,
            drafter,
            ..
        } = o;
        let w = weights::load_placed(&ctx, &file, &hp, opts.progress, &host)?;
        let mtp = super::mtp::load_weights(&ctx, opts.draft.as_ref(), &file, &hp, &w)?;
        let (model_bytes, metadata) = (file.file_len(), file.gguf.metadata.clone());
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
        let speculation = match (&opts.draft, &drafter) {
            (Some(d), Some((f, meta))) => {
                let shape = DrafterShape {
                    meta,
                    tensors: &f.tensors,
                };
                let load = DrafterLoad {
                    ctx: &ctx,
                    file: f,
                    shape,
                    opts,
                    d,
                    params: &params,
                    budget: plan.budget,
                    limits: plan.limits,
                    model_path: &model_path,
                };
                load.run(&mut fwd, &mut allocated)?
            }
            _ => Speculation::default(),
        };
        let mut drafters: Vec<Box<dyn Drafter + Send>> = speculation
            .drafters
            .into_iter()
            .map(|d| Box::new(d) as Box<dyn Drafter + Send>)
            .collect();
        let mut spec = speculation.spec;
        if let (Some(mw), Some(d)) = (&mtp, &opts.draft) {
            let (own, s) =
                super::mtp::drafters(&ctx, mw, d, &params, &plan, &mut fwd, &mut allocated)?;
            drafters = own;
            spec = Some(s);
        }
        compiling.finish(&ctx)?;
        Ok(Engine {
            ctx,
            fwd,
            tok,
            plan,
            model_path,
            model_bytes,
            metadata,
            params,
            allocated,
            costs_cached: speculation.costs_cached,
            drafters,
            spec,
            cost_cache: speculation.cache,
            decision: speculation.decision,
            logprobs: None,
        })
    }

    /// Keeps what a request's drafting showed (`spec`, over `generated` tokens ending at cache
    /// row `end`) in the cost cache, where the next load's verdict reads it
    /// ([`CostCache::record_acceptance`]).
    pub fn record_acceptance(&mut self, spec: &SpecStats, generated: usize, end: u32) {
        if let Some(d) = &mut self.decision {
            d.record(spec, generated, end);
        }
        if let Some(c) = &self.cost_cache {
            c.record_acceptance(verdict::RunObserved {
                cycles: spec.cycles,
                committed: spec.accepted + spec.cycles,
                verify_rows: spec.drafted + spec.cycles,
                position: (f64::from(end) - generated as f64 / 2.0).max(0.0),
            });
        }
    }

    /// What the plan was made for.
    pub fn params(&self) -> &RunParams {
        &self.params
    }

    /// One batched step (see [`BatchForward::step`]).
    pub fn step(&mut self, segs: &[Segment<'_>]) -> Result<()> {
        self.fwd.step(&self.ctx, segs)
    }

    /// Runs `tokens` through sequence `seq` at its next positions in steps of at most
    /// [`BatchForward::max_rows`] rows; the last row's logits (and argmax) are ready after.
    pub fn prefill(&mut self, seq: usize, tokens: &[u32]) -> Result<()> {
        let ub = (self.fwd.max_rows() as usize).max(1);
        let n_chunks = tokens.len().div_ceil(ub);
        for (i, chunk) in tokens.chunks(ub).enumerate() {
            let seg = Segment {
                seq,
                tokens: chunk,
                n_logits: u32::from(i + 1 == n_chunks),
            };
            self.fwd.step(&self.ctx, &[seg])?;
        }
        Ok(())
    }

    /// Empties sequence `seq`'s cache and its drafter's.
    pub fn reset(&mut self, seq: usize) -> Result<()> {
        if let Some(d) = self.drafters.get_mut(seq) {
            d.reset();
        }
        self.fwd.reset(seq)
    }

    /// Sequence `seq` of the batched forward, stepped alone.
    pub fn seq(&mut self, seq: usize) -> BatchSeq<'_> {
        BatchSeq {
            fwd: &mut self.fwd,
            seq,
        }
    }
}

/// What a load with a drafter adds: the drafters, how to speculate, the cost cache and the
/// drafter decision.
#[derive(Default)]
struct Speculation {
    drafters: Vec<Dspark>,
    spec: Option<SpecOptions>,
    cache: Option<CostCache>,
    decision: Option<Decision>,
    costs_cached: bool,
}

/// The drafter part of a load.
struct DrafterLoad<'a> {
    ctx: &'a GpuContext,
    file: &'a crate::gguf::GgufFile,
    shape: DrafterShape<'a>,
    opts: &'a EngineOptions,
    d: &'a super::DraftOptions,
    params: &'a RunParams,
    budget: Budget,
    limits: DeviceLimits,
    model_path: &'a std::path::Path,
}

impl DrafterLoad<'_> {
    /// A drafter per sequence of `fwd`, the load-time measurements (or an earlier run's, from
    /// the cost cache) and the decision they make.
    fn run(
        &self,
        fwd: &mut BatchForward,
        allocated: &mut Vec<(String, u64)>,
    ) -> Result<Speculation> {
        let (ctx, d, params) = (self.ctx, self.d, self.params);
        let dp = params
            .draft
            .as_ref()
            .ok_or_else(|| Error::Usage("no drafter parameters".into()))?;
        let one = Plan {
            buffers: memory::batch::drafter_buffers(self.shape, dp, params, &self.limits),
            budget: self.budget,
            limits: self.limits,
        };
        let mut drafters = load_drafters(ctx, self.file, d, dp, params, &one, fwd, allocated)?;
        let n_seq = fwd.n_seq();
        // Several sequences: the batched step curve (seconds of B rows) weighs drafting at
        // each step's occupancy, and the schedule places their verifies over it; one
        // sequence measures its policy as a single request does.
        let curve = if n_seq > 1 && (d.schedule || d.bypass) {
            let rows = memory::batch::logit_rows(params);
            Some(batch_sps(ctx, fwd, rows)?)
        } else {
            None
        };
        let policy = match &curve {
            Some(c) if d.schedule => Some(VerifyPolicy::Schedule(SpsProfile::from_secs(c)?)),
            _ => None,
        };
        // Measurements an earlier run made for this device, model and drafter.
        let cache = CostCache::new(ctx, self.model_path, self.opts, dp.n_draft);
        let stored = cache.as_ref().map(CostCache::load).unwrap_or_default();
        let mut measured = stored.clone();
        let first = drafters
            .first_mut()
            .ok_or_else(|| Error::Usage("no drafter".into()))?;
        let mut seq0 = BatchSeq { fwd, seq: 0 };
        let s = spec_options(ctx, &mut seq0, first, d, dp.n_draft, policy, &mut measured)?;
        let decision = match s.bypass {
            Some(_) => Decision::new(&measured, matches!(s.policy, VerifyPolicy::Fixed), curve),
            None => None,
        };
        // Every measurement taken at this load was already stored: nothing was measured.
        let used = stored.step_secs.is_some() || stored.costs.is_some();
        let cached = cache.is_some() && used && measured == stored;
        if let (Some(c), false) = (&cache, cached) {
            c.store(&measured);
        }
        Ok(Speculation {
            drafters,
            spec: Some(s),
            cache,
            decision,
            costs_cached: cached,
        })
    }
}

/// One drafter per sequence of `fwd`, each with its own K/V cache, staging and passes from
/// plan `one` (the first uploads the weights, the others share them), the target's taps of
/// each sequence pointed at its drafter's staging; their buffers join `allocated` under
/// `slot{s}.`. A confidence threshold without a confidence head is refused.
#[allow(clippy::too_many_arguments)]
fn load_drafters(
    ctx: &GpuContext,
    f: &crate::gguf::GgufFile,
    d: &super::DraftOptions,
    dp: &crate::memory::DraftParams,
    params: &RunParams,
    one: &Plan,
    fwd: &mut BatchForward,
    allocated: &mut Vec<(String, u64)>,
) -> Result<Vec<Dspark>> {
    let mut drafters: Vec<Dspark> = Vec::new();
    for seq in 0..fwd.n_seq() {
        let mut alloc = Allocator::new(ctx, one);
        let cfg = DrafterConfig {
            ctx_rows: dp.window.unwrap_or(params.n_ctx),
            inject_chunk: dp.inject_chunk,
            type_k: dp.type_k,
            type_v: dp.type_v,
        };
        let mut dspark = match drafters.first() {
            None => Dspark::load(ctx, f, fwd.hp(), fwd.weights(), &cfg, &mut alloc)?,
            Some(first) => first.sibling(ctx, &cfg, &mut alloc)?,
        };
        if d.p_min > 0.0 && !dspark.meta.has_confidence {
            return Err(Error::Usage(format!(
                "--spec-draft-p-min {} needs a confidence head, and {} has none: \
                 set --spec-draft-p-min 0",
                d.p_min,
                d.model.display()
            )));
        }
        fwd.set_taps(ctx, seq, &dspark.meta.target_layers, dspark.taps_buffer())?;
        dspark.warm(ctx)?;
        let weights = dspark.allocations.iter().map(|(n, b)| {
            let n = n.strip_prefix("drafter.").unwrap_or(n);
            (format!("drafter.{n}"), *b)
        });
        let records = weights.chain(alloc.records.drain(..));
        allocated.extend(records.map(|(n, b)| (slot_name(seq, &n), b)));
        drafters.push(dspark);
    }
    Ok(drafters)
}

/// The run parameters of `n_seq` sequences of `n_ctx` rows each: what the load plans and
/// allocates, and what `fit` and `flint plan` plan with.
pub(crate) fn run_params(
    opts: &EngineOptions,
    dmeta: Option<&crate::model::DrafterMeta>,
    n_seq: u32,
    n_ctx: u32,
) -> Result<RunParams> {
    let mut params = RunParams {
        n_ctx,
        n_seq,
        n_ubatch: opts.n_ubatch,
        type_k: opts.type_k,
        type_v: opts.type_v,
        verify_rows: opts.verify_rows.max(1),
        placement: opts.placement.clone(),
        ..RunParams::default()
    };
    if let Some(d) = opts.draft.as_ref().filter(|d| d.mtp) {
        params.verify_rows = params.verify_rows.max(super::mtp::verify_rows(d));
    }
    if let (Some(d), Some(meta)) = (&opts.draft, dmeta) {
        params.draft = Some(draft_params(d, meta, n_ctx)?);
        // Each target step's tap rows must fit the injection staging.
        params.n_ubatch = params.n_ubatch.min(d.inject_chunk);
    }
    Ok(params)
}

/// SPS(B) of batched steps, B = 1..=`max_b` rows (every row's logits, as a verify step): timed at
/// B = 1, 2, 4, … and `max_b` on sequence 0 (the quickest of 3 rounds after an untimed one, the
/// cache left empty), linear in between. The schedule over R requests weighs the rows of every
/// request's verify with it.
fn batch_sps(ctx: &GpuContext, fwd: &mut BatchForward, max_b: u32) -> Result<Vec<f64>> {
    let max_b = max_b.min(fwd.max_rows()).max(1);
    // A step of more rows than a sequence holds cannot be timed on one sequence (a short
    // context beside many slots' verify rows): the curve goes on linearly past the last point.
    let top = max_b.min(fwd.capacity()).max(1);
    let mut points: Vec<u32> = std::iter::successors(Some(1u32), |b| b.checked_mul(2))
        .take_while(|&b| b < top)
        .collect();
    points.push(top);
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
                // Between two points, or past the last one on the last two's line (never
                // below the last point's time).
                Some((b0, s0)) if b1 > b0 => {
                    let at = s0 + (s1 - s0) * (f64::from(b) - f64::from(b0)) / f64::from(b1 - b0);
                    if b > b1 {
                        at.max(s1)
                    } else {
                        at
                    }
                }
                _ => s1 * f64::from(b.max(b1)) / f64::from(b1),
            }
        })
        .collect();
    Ok(secs)
}
