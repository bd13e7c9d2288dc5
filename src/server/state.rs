//! The server's shared state: its phase (loading → ready, or device lost / shutting down), API
//! keys, the served model's name, the tokenizer and chat template once loaded, the slots and
//! the counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use axum::http::HeaderMap;

use super::error::ApiError;
use super::metrics::Metrics;
use super::request::{Endpoint, Limits};
use super::slots::Slots;
use crate::tokenizer::{ChatTemplate, Tokenizer};

/// Where the server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    Loading,
    Ready,
    DeviceLost(String),
    /// A worker could not go on (the process is about to exit).
    Failed(String),
    ShuttingDown,
}

/// What requests need once the model is loaded.
pub struct Ready {
    pub tok: Tokenizer,
    /// `None` when the model has no chat template.
    pub template: Option<ChatTemplate>,
    pub limits: Limits,
    /// The model file as given (`/props`' `model_path`).
    pub model_path: String,
    /// Whether the slots speculate with a drafter.
    pub speculative: bool,
    /// The model's grammar compiler, built by the first request with a grammar (or why not).
    pub grammars: OnceLock<Result<crate::grammar::Grammars, String>>,
    /// How `/v1/embeddings` pools (the model's `{arch}.pooling_type`); the reason it refuses
    /// when the type is one it cannot answer (`none`, `rank`).
    pub pooling: Result<super::embed_job::Pooling, String>,
    /// The model's fill-in-the-middle tokens (`/infill`); `None`: it has none.
    pub fim: Option<super::infill::Fim>,
}

impl Ready {
    /// Compiles `spec` for the model's vocabulary: the request's one compile, on the blocking
    /// thread that prepares it, handed on to the worker. A refusal is a 400 on `field` quoting
    /// llguidance's reason (which names the keyword or rule it cannot honour).
    pub fn compile(
        &self,
        spec: &crate::grammar::GrammarSpec,
        field: &str,
    ) -> Result<crate::grammar::steps::Guide, ApiError> {
        let grammars = self
            .grammars
            .get_or_init(|| {
                crate::grammar::Grammars::new(&self.tok, self.limits.n_vocab)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| ApiError::internal(format!("the model's grammar compiler: {e}")))?;
        let c = grammars.compile(spec).map_err(|e| {
            ApiError::invalid(
                field,
                format!("`{field}` cannot be compiled into a constraint: {e}"),
            )
        })?;
        Ok(crate::grammar::steps::Guide::new(Box::new(c)))
    }
}

/// The handlers' deadlines.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// For reading a request's body.
    pub body: std::time::Duration,
    /// For a request waiting in the queue for a slot.
    pub queue: std::time::Duration,
    /// Between SSE keep-alive comments on a stream with nothing to send (`None`: off).
    pub keep_alive: Option<std::time::Duration>,
}

/// State shared by every handler.
pub struct App {
    /// Which `Host` names and body types a keyless server takes.
    pub access: super::access::Access,
    phase: Mutex<Phase>,
    keys: Vec<String>,
    pub alias: String,
    pub created: u64,
    pub slots: Arc<Slots>,
    pub metrics: Arc<Metrics>,
    ready: OnceLock<Arc<Ready>>,
    ids: AtomicU64,
    pub timeouts: Timeouts,
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl App {
    pub fn new(
        access: super::access::Access,
        keys: Vec<String>,
        alias: String,
        slots: Arc<Slots>,
        timeouts: Timeouts,
    ) -> App {
        App {
            access,
            phase: Mutex::new(Phase::Loading),
            keys,
            alias,
            created: now_secs(),
            slots,
            metrics: Arc::new(Metrics::default()),
            ready: OnceLock::new(),
            ids: AtomicU64::new(0),
            timeouts,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Move to `next` unless the server is already shutting down (which is final).
    pub fn set_phase(&self, next: Phase) {
        let mut p = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        if *p != Phase::ShuttingDown {
            *p = next;
        }
    }

    /// The model is loaded.
    pub fn set_ready(&self, ready: Ready) {
        let _ = self.ready.set(Arc::new(ready));
        self.set_phase(Phase::Ready);
    }

    /// `/health`'s status word.
    pub fn status(&self) -> &'static str {
        match self.phase() {
            Phase::Loading => "loading",
            Phase::Ready => "ok",
            Phase::DeviceLost(_) => "device lost",
            Phase::Failed(_) => "failed",
            Phase::ShuttingDown => "shutting down",
        }
    }

    /// `Err(503)` unless ready.
    pub fn available(&self) -> Result<(), ApiError> {
        match self.phase() {
            Phase::Ready => Ok(()),
            Phase::Loading => Err(ApiError::unavailable("loading the model")),
            Phase::DeviceLost(why) => Err(ApiError::unavailable(format!(
                "the GPU device was lost ({why}): restart the server"
            ))),
            Phase::Failed(why) => Err(ApiError::unavailable(format!(
                "the server failed ({why}) and is exiting"
            ))),
            Phase::ShuttingDown => Err(ApiError::unavailable("the server is shutting down")),
        }
    }

    pub fn ready(&self) -> Result<Arc<Ready>, ApiError> {
        self.available()?;
        self.ready
            .get()
            .cloned()
            .ok_or_else(|| ApiError::unavailable("loading the model"))
    }

    /// Whether the request carries one of the keys (always, when there are none). Keys are
    /// compared in constant time.
    pub fn authorized(&self, headers: &HeaderMap) -> bool {
        if self.keys.is_empty() {
            return true;
        }
        let Some(given) = super::http::presented_key(headers) else {
            return false;
        };
        self.keys.iter().fold(false, |ok, k| {
            ok | constant_time_eq::constant_time_eq(k.as_bytes(), given.as_bytes())
        })
    }

    /// A fresh response id.
    pub fn next_id(&self, endpoint: Endpoint) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let prefix = match endpoint {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completion | Endpoint::LlamaCompletion => "cmpl",
        };
        format!("{prefix}-{:x}{n:06x}", self.created)
    }
}
