//! The engine: one target model on the device with its tokenizer, memory plan, a K/V cache
//! (and a hybrid's recurrent state) per sequence and a drafter per sequence ([`Engine`],
//! `batch.rs`), and the one generation loop every command runs: a step over any mix of
//! requests (`batch_run.rs`, drafting in `batch_draft.rs`, grammars in `batch_grammar.rs`),
//! driven for one request by `solo.rs` (`generate`, `chat`, `bench`) and for many by the
//! server's worker. Whether a request drafts is decided per request and per step
//! (`decision.rs`) from what was measured at load (`measure.rs`) and what earlier requests and
//! runs showed (`verdict.rs`, `cost_cache.rs`).
//!
//! Loading follows design principle 1: GGUF metadata → memory plan → refuse with the numbers if
//! it does not fit → upload weights (the GGUF map is dropped after upload) → build the forward.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::gguf::GgmlType;
use crate::memory::Plan;

pub mod batch;
pub use batch::Engine;
pub use open::{open, Opened};
mod batch_draft;
mod batch_grammar;
pub mod batch_run;
pub mod batching;
mod compile_progress;
pub mod cost_cache;
pub mod decision;
mod draft;
pub mod fit;
pub mod logprobs;
mod measure;
mod mtp;
pub mod open;
mod rows;
pub mod solo;
pub mod verdict;
use crate::{Error, Result};
pub use draft::{draft_params, DraftOptions};

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
    /// Where the target's weights live (`-ot`, `--cpu-moe`, `--n-cpu-moe`).
    pub placement: crate::memory::PlacementRules,
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
            placement: crate::memory::PlacementRules::default(),
        }
    }
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
