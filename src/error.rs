//! The crate error: one `thiserror` enum with a sub-enum per module, and the `Result` alias.
//!
//! Every variant carries the offending values in fields. `main.rs` maps errors
//! to exit codes: usage errors and plans that do not fit 2, bad input files 3, device problems 4,
//! everything else 1.

use crate::gguf::GgufError;
use crate::gpu::GpuError;
use crate::quant::QuantError;

/// Any error flint can return.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Accept(#[from] crate::speculative::accept::AcceptError),
    #[error(transparent)]
    Schedule(#[from] crate::speculative::schedule::ScheduleError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Hparams(#[from] crate::model::HparamsError),
    #[error(transparent)]
    Kv(#[from] crate::kv_cache::KvError),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error(transparent)]
    Sampling(#[from] crate::sampling::SamplerError),
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
    /// A file of outside data a command reads that is not what it must be (a benchmark's
    /// prompt set): the message names the file, the line and what is wrong.
    #[error("{0}")]
    BadInputFile(String),
    #[error(transparent)]
    DrafterInit(#[from] crate::model::drafter_init::InitError),
    #[error(transparent)]
    RandomWeights(#[from] crate::model::random_weights::RandomError),
    #[error("does not fit: the plan needs {requested} bytes, {limit} are usable: {}", reasons.join("; "))]
    OutOfMemory {
        requested: u64,
        limit: u64,
        reasons: Vec<String>,
    },
    #[error("invalid argument: {0}")]
    Usage(String),
    /// A step with no rows to run (an empty prompt, a request with nothing to decode): refused
    /// before anything reaches the device.
    #[error("a step with no rows to run: {what}")]
    EmptyStep { what: String },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("{path}: is a directory; -m takes a GGUF file")]
    ModelIsDirectory { path: String },
    #[error("{path}: is a DSpark drafter ({arch}), not a model to run; pass it with -md and a target model with -m")]
    ModelIsDrafter { path: String, arch: String },
    #[error("{path}: has no weights (a shape-only file, from `flint gguf strip` or `flint gguf preset` without --weights random); only `flint plan` and `flint info` take it")]
    ModelHasNoWeights { path: String },
    #[error("{path}: has no vocabulary (tokenizer.ggml.model = \"{tokenizer}\"), so it cannot tokenize a prompt")]
    ModelHasNoVocab { path: String, tokenizer: String },
}

impl Error {
    /// The process exit code the CLI uses for this error (never 101, which is a Rust panic).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Accept(_) | Error::Schedule(_) => 2,
            Error::Usage(_) | Error::OutOfMemory { .. } | Error::Kv(_) | Error::Sampling(_) => 2,
            Error::Grammar(_) => 2,
            Error::EmptyStep { .. } => 2,
            Error::ModelIsDirectory { .. } | Error::ModelIsDrafter { .. } => 2,
            Error::ModelHasNoWeights { .. } | Error::ModelHasNoVocab { .. } => 3,
            Error::Gguf(_)
            | Error::Quant(_)
            | Error::Hparams(_)
            | Error::Tokenizer(_)
            | Error::BadInputFile(_) => 3,
            Error::Gpu(_) => 4,
            Error::DrafterInit(e) => match e {
                crate::model::drafter_init::InitError::Hparams(_)
                | crate::model::drafter_init::InitError::Gguf(_) => 3,
                _ => 2,
            },
            Error::RandomWeights(e) => match e {
                crate::model::random_weights::RandomError::Io(_) => 1,
                _ => 3,
            },
            Error::Io { .. } => 1,
            Error::Store(e) => e.exit_code(),
        }
    }
}

/// `Result` with the crate [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
