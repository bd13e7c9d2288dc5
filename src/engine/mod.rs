//! A session: the target model on the device with its tokenizer, KV cache and memory plan, and
//! the generation loop (prefill in ubatches, then one token per step) with timing.
//!
//! Loading follows design principle 1: GGUF metadata → memory plan → refuse with the numbers if
//! it does not fit → upload weights (the GGUF map is dropped after upload) → build the forward.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::gguf::{GgmlType, GgufFile};
use crate::gpu::{DeviceOptions, GpuContext, PipelineCache};
use crate::memory::{self, Budget, DeviceLimits, DrafterShape, Plan, RunParams, TargetShape};
use crate::model::forward::{Allocator, Forward};
use crate::model::{shapes, weights, DrafterMeta, Hparams};

pub mod batch;
mod batch_draft;
mod batch_grammar;
pub mod batch_run;
pub mod batching;
mod compile_progress;
mod constrained;
pub mod cost_cache;
pub mod decision;
mod draft;
pub mod fit;
mod measure;
pub mod solo;
pub mod speculate;
pub mod verdict;
use crate::sampling::Sampler;
use crate::speculative::dspark::{DrafterConfig, Dspark};
use crate::speculative::SpecOptions;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};
use compile_progress::CompileProgress;
use cost_cache::CostCache;
pub use draft::{draft_params, DraftOptions};
use measure::spec_options;

/// The default model: this path when it exists relative to the current directory (the
/// repository, after `models/fetch.sh`), else [`DEFAULT_MODEL_NAME`] in the model store
/// ([`crate::store`]), fetched on first use.
pub const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
/// The DSpark drafter trained for [`DEFAULT_MODEL`] (train/dspark/, shipped in the repository and
/// embedded in the binary): `generate` and `chat` speculate with it when neither `-m` nor `-md`
/// is given. This path when it exists, else [`DEFAULT_DRAFTER_NAME`] written to the store.
pub const DEFAULT_DRAFTER: &str = "models/SmolLM2-135M-Instruct.dspark-Q8_0.gguf";
/// The manifest name of [`DEFAULT_MODEL`] (`flint pull`).
pub const DEFAULT_MODEL_NAME: &str = "smollm2-135m-instruct-q4_1";
/// The manifest name of [`DEFAULT_DRAFTER`].
pub const DEFAULT_DRAFTER_NAME: &str = "dspark-smollm2-135m-q8_0";

/// How to load a session.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub model: PathBuf,
    pub n_ctx: u32,
    pub n_ubatch: u32,
    pub type_k: GgmlType,
    pub type_v: GgmlType,
    pub device: Option<usize>,
    pub gpu_mem: Option<u64>,
    /// Show a progress bar while uploading weights.
    pub progress: bool,
    /// A DSpark drafter to speculate with.
    pub draft: Option<DraftOptions>,
    /// Rows whose logits one step may compute without a drafter (1; `flint bench --sps`).
    pub verify_rows: u32,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            model: PathBuf::from(DEFAULT_MODEL),
            n_ctx: 4096,
            n_ubatch: 512,
            type_k: GgmlType::F16,
            type_v: GgmlType::F16,
            device: None,
            gpu_mem: None,
            progress: false,
            draft: None,
            verify_rows: 1,
        }
    }
}

/// A loaded model ready to generate.
pub struct Engine {
    /// The device (shared by the slots of a server).
    pub ctx: Arc<GpuContext>,
    pub fwd: Forward,
    pub tok: Tokenizer,
    pub plan: Plan,
    pub model_path: PathBuf,
    /// Bytes of the model file.
    pub model_bytes: u64,
    /// The DSpark drafter and how to speculate with it (`None`: plain decoding).
    pub drafter: Option<(Dspark, SpecOptions)>,
    /// (plan name, bytes) of every non-weight buffer created, in creation order.
    pub allocated: Vec<(String, u64)>,
    /// The load-time measurements speculation uses (verify step times, a cycle's costs) came
    /// from an earlier run's ([`cost_cache`]) rather than being measured at this load.
    pub costs_cached: bool,
    /// Keep generating past end-of-generation tokens (`--ignore-eos`): only `n_predict`, the
    /// callback or the end of the context stop a generation.
    pub ignore_eos: bool,
    /// Where those measurements are kept, and the acceptance each generation's drafting shows
    /// ([`CostCache::record_acceptance`]): what decides, before a later load, whether the
    /// drafter can pay at all ([`cost_cache::unpaying_drafter`]).
    cost_cache: Option<CostCache>,
    /// The grammar the next generation's output must match (`None`: free). Set by the caller
    /// before [`Engine::generate`] and left in place (with its counters) afterwards.
    pub grammar: Option<crate::grammar::steps::Guide>,
}

/// Counters of one generation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenStats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// Prompt and decode wall time, less [`GenStats::compile_secs`] (through
    /// [`Engine::generate`]).
    pub prefill_secs: f64,
    pub decode_secs: f64,
    /// Time the generation spent on GPU pipelines the load had not built (one-time
    /// compilation: a prompt length's first matmul shapes), left out of the two above.
    pub compile_secs: f64,
    pub generated_token_ids: Vec<u32>,
    /// Speculative decoding counters (when a drafter ran).
    pub spec: Option<crate::speculative::SpecStats>,
}

impl GenStats {
    pub fn prefill_tps(&self) -> f64 {
        rate(self.prompt_tokens, self.prefill_secs)
    }
    pub fn decode_tps(&self) -> f64 {
        // The first generated token comes from the prefill's logits.
        rate(self.generated_tokens.saturating_sub(1), self.decode_secs)
    }

    /// Takes pipeline compilation out of the prompt and the decode times, into
    /// [`GenStats::compile_secs`].
    pub fn exclude_compile(&mut self, prefill: Duration, decode: Duration) {
        let (p, d) = (prefill.as_secs_f64(), decode.as_secs_f64());
        self.prefill_secs = (self.prefill_secs - p).max(0.0);
        self.decode_secs = (self.decode_secs - d).max(0.0);
        self.compile_secs += p + d;
    }
}

fn rate(n: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

/// The file a `-m` path names: any path but [`DEFAULT_MODEL`] as is; [`DEFAULT_MODEL`] when it
/// exists relative to the current directory, else the store's copy, fetched when missing.
pub fn resolve_model(path: &Path) -> Result<PathBuf> {
    if path != Path::new(DEFAULT_MODEL) || path.exists() {
        return Ok(path.to_path_buf());
    }
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    Ok(crate::store::ensure(DEFAULT_MODEL_NAME, progress)?)
}

/// The shipped drafter: [`DEFAULT_DRAFTER`] when it exists relative to the current directory,
/// else the store's copy, written from the binary on first use.
pub fn default_drafter_path() -> Result<PathBuf> {
    let path = PathBuf::from(DEFAULT_DRAFTER);
    if path.exists() {
        return Ok(path);
    }
    Ok(crate::store::ensure(DEFAULT_DRAFTER_NAME, false)?)
}

/// What a load starts from: the device, the model file with its hyperparameters and
/// tokenizer, and the drafter file with its metadata (`opts.draft`).
pub(crate) struct Opened {
    pub ctx: Arc<GpuContext>,
    pub file: GgufFile,
    pub hp: Hparams,
    pub tok: Tokenizer,
    pub dfile: Option<GgufFile>,
    pub dmeta: Option<DrafterMeta>,
}

impl Opened {
    pub(crate) fn new(opts: &EngineOptions, model_path: &Path) -> Result<Opened> {
        if opts.n_ctx == 0 || opts.n_ubatch == 0 {
            return Err(Error::Usage("-c and -ub must be at least 1".into()));
        }
        let ctx = Arc::new(GpuContext::new(&DeviceOptions {
            index: opts.device,
            ..DeviceOptions::default()
        })?);
        let file = GgufFile::open(model_path)?;
        let hp = Hparams::from_gguf(&file)?;
        // Every weight held to the hyperparameters before the plan reads its bytes.
        shapes::check_shapes(&file, &hp)?;
        let tok = Tokenizer::from_gguf(&file)?;
        let dfile = match &opts.draft {
            Some(d) => Some(GgufFile::open(&d.model)?),
            None => None,
        };
        let dmeta = match &dfile {
            Some(f) => {
                let meta = DrafterMeta::from_gguf(f)?;
                shapes::check_drafter_shapes(f, &meta)?;
                Some(meta)
            }
            None => None,
        };
        Ok(Opened {
            ctx,
            file,
            hp,
            tok,
            dfile,
            dmeta,
        })
    }
}

/// Refuses a plan that does not fit, with its numbers, before anything is allocated.
pub(crate) fn refuse_unless_fits(plan: &Plan) -> Result<()> {
    if plan.fits() {
        return Ok(());
    }
    Err(Error::OutOfMemory {
        requested: plan.total(),
        limit: plan.budget.usable(),
        reasons: plan.misfit_summary(),
    })
}

impl Engine {
    /// One session (`generate`, `chat`, `bench`): the plan is checked before anything is
    /// allocated; `opts.n_ctx` is its context. The server's slots are a [`batch::BatchEngine`].
    pub fn load(opts: &EngineOptions) -> Result<Engine> {
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
            n_ubatch: opts.n_ubatch,
            type_k: opts.type_k,
            type_v: opts.type_v,
            verify_rows: opts.verify_rows.max(1),
            ..RunParams::default()
        };
        if let (Some(d), Some(meta)) = (&opts.draft, &dmeta) {
            params.draft = Some(draft_params(d, meta, opts.n_ctx)?);
            // Each target step's tap rows must fit the injection staging.
            params.n_ubatch = params.n_ubatch.min(d.inject_chunk);
        }
        let plan = memory::plan(
            TargetShape {
                hp: &hp,
                tensors: &file.tensors,
            },
            dmeta
                .as_ref()
                .zip(dfile.as_ref())
                .map(|(meta, f)| DrafterShape {
                    meta,
                    tensors: &f.tensors,
                }),
            &params,
            Budget::resolve(opts.gpu_mem, Some(&ctx)),
            DeviceLimits::from_context(&ctx),
        );
        refuse_unless_fits(&plan)?;
        let w = weights::load(&ctx, &file, &hp, opts.progress)?;
        let model_bytes = file.file_len();
        drop(file);
        // From here the slots set their pipelines up: a bar (or a line) says so.
        let compiling = CompileProgress::start(&ctx, opts.progress);
        // Measurements an earlier run made for this device, model and drafter.
        let cache = match (&opts.draft, &params.draft) {
            (Some(_), Some(dp)) => CostCache::new(&ctx, &model_path, opts, dp.n_draft),
            _ => None,
        };
        let stored = cache.as_ref().map(CostCache::load).unwrap_or_default();
        let mut measured = stored.clone();
        let mut alloc = Allocator::new(&ctx, &plan);
        let mut fwd = Forward::new(&ctx, hp.clone(), w.clone(), &params, &mut alloc)?;
        // A full prefill ubatch, then the decode step.
        fwd.warm(&ctx, &[(fwd.max_rows(), 1), (1, 1)])?;
        let drafter = match (&opts.draft, &dfile, &params.draft) {
            (Some(d), Some(f), Some(dp)) => {
                let cfg = DrafterConfig {
                    ctx_rows: dp.window.unwrap_or(params.n_ctx),
                    inject_chunk: dp.inject_chunk,
                    type_k: dp.type_k,
                    type_v: dp.type_v,
                };
                let mut dspark = Dspark::load(&ctx, f, &fwd.hp, &fwd.weights, &cfg, &mut alloc)?;
                if d.p_min > 0.0 && !dspark.meta.has_confidence {
                    return Err(Error::Usage(format!(
                        "--spec-draft-p-min {} needs a confidence head, and {} has none: \
                         set --spec-draft-p-min 0",
                        d.p_min,
                        d.model.display()
                    )));
                }
                fwd.set_taps(&ctx, &dspark.meta.target_layers, dspark.taps_buffer())?;
                let verify = dp.n_draft + 1;
                fwd.warm(&ctx, &[(verify, verify)])?;
                dspark.warm(&ctx)?;
                let n = dp.n_draft;
                let spec = spec_options(&ctx, &mut fwd, &mut dspark, d, n, None, &mut measured)?;
                Some((dspark, spec))
            }
            _ => None,
        };
        let allocated = std::mem::take(&mut alloc.records);
        drop(alloc);
        let mut engine = Engine {
            ctx: Arc::clone(&ctx),
            fwd,
            tok: tok.clone(),
            plan,
            model_path,
            model_bytes,
            drafter,
            allocated,
            costs_cached: false,
            ignore_eos: false,
            cost_cache: cache.clone(),
            grammar: None,
        };
        // Every measurement taken at this load was already stored: nothing was measured.
        let used = stored.step_secs.is_some() || stored.costs.is_some();
        let cached = cache.is_some() && used && measured == stored;
        engine.costs_cached = cached && engine.drafter.is_some();
        if let (Some(c), false) = (&cache, cached) {
            c.store(&measured);
        }
        // Every pipeline set up so far (the hot steps', `Forward::warm`) is built, or its
        // failure reported, before the engine is handed out.
        compiling.finish(&ctx)?;
        Ok(engine)
    }

    /// Run `tokens` through the model at the next positions, in ubatches; the last row's logits
    /// (and argmax) are ready afterwards. Chunks before the last skip the LM head.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<()> {
        let ub = (self.fwd.max_rows() as usize).max(1);
        let n_chunks = tokens.len().div_ceil(ub);
        for (i, chunk) in tokens.chunks(ub).enumerate() {
            let n_logits = u32::from(i + 1 == n_chunks);
            self.fwd.step(&self.ctx, chunk, n_logits)?;
        }
        Ok(())
    }

    /// The next token from the last step's logits: on-device argmax when greedy.
    pub fn pick(&mut self, sampler: Option<&mut Sampler>) -> Result<u32> {
        match sampler {
            None => self
                .fwd
                .argmax(&self.ctx)?
                .first()
                .copied()
                .ok_or_else(|| Error::Usage("no logits".into())),
            Some(s) => {
                let logits = self.fwd.logits(&self.ctx)?;
                let token = s.sample(&logits);
                s.accept(token);
                Ok(token)
            }
        }
    }

    /// Generate up to `n_predict` tokens after `prompt` (the cache continues from its current
    /// length), calling `on_token` for each; it returns `false` to stop. Stops at end-of-generation
    /// tokens and at the context limit. Speculates when the session has a drafter.
    ///
    /// Pipelines the load did not build (a prompt length's first shapes) are built when first
    /// used: the time this thread spends on them is taken out of the prompt and decode times
    /// (split at the first token) and reported as [`GenStats::compile_secs`].
    pub fn generate(
        &mut self,
        prompt: &[u32],
        n_predict: usize,
        sampler: Option<&mut Sampler>,
        mut on_token: impl FnMut(u32) -> Result<bool>,
    ) -> Result<GenStats> {
        if prompt.is_empty() {
            return Err(Error::EmptyStep {
                what: "the prompt has no tokens".into(),
            });
        }
        let start = PipelineCache::thread_wait();
        let mut at_first_token = None;
        // The first token is emitted after the prefill's timing, before any decode step.
        let on_token = |t: u32| {
            at_first_token.get_or_insert_with(PipelineCache::thread_wait);
            on_token(t)
        };
        let out = match self.drafter.take() {
            Some((mut d, spec)) => {
                let out =
                    speculate::generate(self, &mut d, &spec, prompt, n_predict, sampler, on_token);
                self.drafter = Some((d, spec));
                out
            }
            None => self.generate_plain(prompt, n_predict, sampler, on_token),
        };
        let mut stats = out?;
        if let (Some(c), Some(s)) = (&self.cost_cache, &stats.spec) {
            // The cycles' mean position: about the middle of what the generation added.
            let end = self.fwd.kv.len(0).unwrap_or(0) as f64;
            c.record_acceptance(verdict::RunObserved {
                cycles: s.cycles,
                committed: s.accepted + s.cycles,
                verify_rows: s.drafted + s.cycles,
                position: (end - stats.generated_tokens as f64 / 2.0).max(0.0),
            });
        }
        let end = PipelineCache::thread_wait();
        let split = at_first_token.unwrap_or(end);
        stats.exclude_compile(split.saturating_sub(start), end.saturating_sub(split));
        Ok(stats)
    }

    /// [`Engine::generate`] without speculation.
    pub fn generate_plain(
        &mut self,
        prompt: &[u32],
        n_predict: usize,
        mut sampler: Option<&mut Sampler>,
        mut on_token: impl FnMut(u32) -> Result<bool>,
    ) -> Result<GenStats> {
        if self.grammar.is_some() {
            return self.generate_constrained(prompt, n_predict, sampler, on_token);
        }
        let mut stats = GenStats {
            prompt_tokens: prompt.len(),
            ..GenStats::default()
        };
        if prompt.is_empty() {
            return Err(Error::EmptyStep {
                what: "the prompt has no tokens".into(),
            });
        }
        let t0 = Instant::now();
        self.prefill(prompt)?;
        let mut token = self.pick(sampler.as_deref_mut())?;
        stats.prefill_secs = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        while stats.generated_tokens < n_predict {
            if !self.ignore_eos && self.tok.is_eog(token) {
                break;
            }
            stats.generated_tokens += 1;
            stats.generated_token_ids.push(token);
            if !on_token(token)? || stats.generated_tokens >= n_predict {
                break;
            }
            if self.fwd.kv.len(0)? >= self.fwd.kv.capacity() {
                eprintln!("context full ({} tokens): stopping", self.fwd.kv.capacity());
                break;
            }
            self.fwd.step(&self.ctx, &[token], 1)?;
            token = self.pick(sampler.as_deref_mut())?;
        }
        stats.decode_secs = t1.elapsed().as_secs_f64();
        Ok(stats)
    }

    /// Keep the K/V rows of the longest common prefix of `cached` (the token ids whose rows the
    /// cache holds, in order) and the next prompt `ids`: at most `ids.len() - 1` rows (the last
    /// prompt token runs again for its logits), none when a drafter's position window moved past
    /// the prefix. Truncates the cache and `cached`; returns the rows kept. `chat` and the
    /// server's slots reuse their previous turn this way.
    pub fn keep_prefix(&mut self, cached: &mut Vec<u32>, ids: &[u32]) -> Result<usize> {
        let common = cached.iter().zip(ids).take_while(|(a, b)| a == b).count();
        let mut keep = common.min(ids.len().saturating_sub(1));
        if let Some((d, _)) = &self.drafter {
            if (keep as u32) < d.base() {
                keep = 0;
            }
        }
        // A recurrent state holds every row it saw: keep it only where it belongs to the kept
        // prefix (the whole cached sequence, or a checkpoint), else recompute from the start.
        if !self.fwd.can_truncate(keep as u32) {
            keep = 0;
        }
        self.fwd.truncate(&self.ctx, keep as u32)?;
        cached.truncate(keep);
        Ok(keep)
    }

    /// Record in `cached` what a generation left in the cache (`in_cache` rows): the prompt rows
    /// it ran and the generated tokens run through the model (all but the last after a length
    /// limit; all of them when an end token, sampled from the last one's row, ended it).
    pub fn note_cached(
        cached: &mut Vec<u32>,
        prompt_run: &[u32],
        generated: &[u32],
        in_cache: u32,
    ) {
        cached.extend_from_slice(prompt_run);
        cached.extend_from_slice(generated);
        cached.truncate(in_cache as usize);
    }

    /// Empty the KV cache (and the drafter's).
    pub fn reset(&mut self) -> Result<()> {
        if let Some((d, _)) = &mut self.drafter {
            d.reset();
        }
        // The recurrent state (hybrid models) is zeroed by the next step at position 0.
        Ok(self.fwd.kv.reset(0)?)
    }
}
