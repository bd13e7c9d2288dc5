//! `flint serve`: an OpenAI-compatible HTTP server (axum on tokio). It binds first (loopback by
//! default; a non-loopback address needs an API key or `--insecure`), answers 503 while the
//! model loads, then runs `N` slots, each a session with its own KV cache and drafter, behind a
//! bounded queue. SIGINT / SIGTERM end in-flight streams with an error event and stop the
//! server. Routes: `docs/SERVER.md`.

mod access;
mod anthropic;
mod anthropic_stream;
mod batch_recover;
mod batch_worker;
mod bias;
mod chat_prompt;
pub mod conn;
mod cors;
mod drafted;
mod embed_job;
mod embeddings;
mod error;
pub mod fields;
mod histogram;
mod http;
mod infill;
mod inflight;
mod llama_completion;
mod llama_routes;
mod logprobs;
mod messages;
mod metrics;
mod prompt;
mod reqlog;
pub mod request;
mod response;
mod slots;
mod state;
pub mod stop;
pub mod structured;
pub mod tools;
mod webui;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::EngineOptions;
use crate::engine::{Engine, Opened};
use crate::sampling::SamplerParams;
use crate::{Error, Result};

pub use error::ApiError;
use reqlog::TARGET;
use request::Limits;
use slots::Slots;
use state::{App, Phase, Ready};

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The engine of one slot (`n_ctx` is per slot).
    pub engine: EngineOptions,
    pub host: IpAddr,
    pub port: u16,
    pub n_slots: u32,
    pub max_queue: usize,
    pub keys: Vec<String>,
    pub insecure: bool,
    /// `Host` names allowed besides loopback names and the bound address when there is no API
    /// key (`--allowed-hosts`; `*`: any).
    pub allowed_hosts: Vec<String>,
    /// The model name clients see (`/v1/models`).
    pub alias: String,
    /// Sampling defaults of requests.
    pub defaults: SamplerParams,
    /// Connection deadlines and the connection cap.
    pub conn: conn::Limits,
    /// How long a request may wait in the queue for a slot before it is answered 503.
    pub queue_timeout: Duration,
    /// The seed of requests that set none (`-s`); `None`: each takes the clock.
    pub seed: Option<u64>,
    /// Origins allowed by CORS (`--cors-origin`; `*` for any); empty: no CORS headers.
    pub cors_origins: Vec<String>,
    /// Between SSE keep-alive comments on a quiet stream (`None`: off).
    pub keep_alive: Option<Duration>,
    /// A chat template source replacing the model's (`--chat-template`).
    pub chat_template: Option<String>,
    /// `--strict-fields`: refuse unknown request fields instead of ignoring them.
    pub strict_fields: bool,
    /// Chat defaults (`--reasoning-format`, `--chat-template-kwargs`, `--reasoning-budget 0`).
    pub chat: request::ChatDefaults,
    /// The constraint of requests that ask for none (`--grammar-file`, `-j`, `--regex`).
    pub default_grammar: Option<crate::grammar::GrammarSpec>,
    /// Serve the chat page at `/` (off with `--no-webui`).
    pub webui: bool,
}

/// How long in-flight requests get to end after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a server whose worker cannot go on answers (503) before it exits.
const FATAL_GRACE: Duration = Duration::from_secs(2);
/// The exit status then (`EX_SOFTWARE`).
const EXIT_WORKER_FAILED: i32 = 70;

/// Run the server until SIGINT / SIGTERM.
pub fn run(opts: ServeOptions, opened: Opened) -> Result<()> {
    if !opts.host.is_loopback() && opts.keys.is_empty() && !opts.insecure {
        return Err(Error::Usage(format!(
            "refusing to serve on {} without an API key: pass --api-key or --api-key-file, \
             or --insecure to serve anyway",
            opts.host
        )));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            context: "starting the async runtime".into(),
            source,
        })?;
    // The signal handlers exist before anything else runs: a SIGTERM during the load ends the
    // server through its shutdown, not the default action.
    let signals = {
        let _rt = rt.enter();
        Signals::new()?
    };
    rt.block_on(serve(opts, opened, signals))
}

async fn serve(opts: ServeOptions, opened: Opened, signals: Signals) -> Result<()> {
    let addr = SocketAddr::new(opts.host, opts.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Io {
            context: format!("binding {addr}"),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| Error::Io {
        context: "reading the bound address".into(),
        source,
    })?;
    tracing::info!(target: TARGET, "listening on http://{local}");
    if !opts.keys.is_empty() {
        let tails: Vec<String> = opts.keys.iter().map(|k| key_tail(k)).collect();
        tracing::info!(
            target: TARGET,
            "{} API key(s): {}",
            opts.keys.len(),
            tails.join(", ")
        );
    }
    let slots = Arc::new(Slots::new(opts.n_slots as usize, opts.max_queue));
    let access = access::Access::new(opts.keys.is_empty(), local.ip(), &opts.allowed_hosts);
    let app = Arc::new(App::new(
        access,
        opts.keys.clone(),
        opts.alias.clone(),
        Arc::clone(&slots),
        state::Timeouts {
            body: opts.conn.body,
            queue: opts.queue_timeout,
            keep_alive: opts.keep_alive,
        },
    ));
    let limits = opts.conn;
    let router = http::router(app.clone(), &opts.cors_origins, opts.webui)?;
    spawn_loader(Arc::clone(&app), opts, opened);
    let stop = Arc::new(tokio::sync::Notify::new());
    let signal = {
        let (app, stop) = (Arc::clone(&app), Arc::clone(&stop));
        async move {
            signals.recv().await;
            tracing::info!(target: TARGET, "shutting down");
            app.set_phase(Phase::ShuttingDown);
            app.slots.shutdown();
            stop.notify_one();
        }
    };
    tokio::spawn(signal);
    let table = Arc::new(conn::Table::default());
    conn::serve(listener, router, limits, table, stop, SHUTDOWN_GRACE).await;
    Ok(())
}

/// The last four characters of a key (all a log may show).
fn key_tail(k: &str) -> String {
    let tail: String = k
        .chars()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("…{tail}")
}

/// Load the slots on a thread; the server answers 503 meanwhile. A model that fails to load
/// ends the process with the error's exit code; a loader that panics, with 70 and the message.
fn spawn_loader(app: Arc<App>, opts: ServeOptions, opened: Opened) {
    std::thread::spawn(move || {
        let guarded =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| load(app, opts, opened)));
        if let Err(panic) = guarded {
            tracing::error!(
                target: TARGET,
                "loading the model panicked: {}",
                batch_worker::panic_text(&*panic)
            );
            crate::gpu::end_process(EXIT_WORKER_FAILED);
        }
    });
}

/// The loader thread's work: the engine, the worker, then ready.
fn load(app: Arc<App>, opts: ServeOptions, opened: Opened) {
    #[cfg(feature = "fault")]
    if std::env::var("FLINT_FAULT").is_ok_and(|v| v == "loader") {
        panic!("injected fault: loader");
    }
    // One batched engine for every slot (`-np 1` included), one worker.
    let engine = match Engine::from_opened(opened, &opts.engine, opts.n_slots) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(target: TARGET, "loading the model failed: {e}");
            // Pipeline builders may still be compiling: no library teardown under them.
            crate::gpu::end_process(e.exit_code());
        }
    };
    let (tok, n_ctx, n_vocab) = (engine.tok.clone(), engine.capacity(), engine.hp().n_vocab);
    let (drafter, planned) = (!engine.drafters.is_empty(), engine.plan.total());
    let pooling = embed_job::pooling_of(&engine.metadata);
    let fim = infill::fim_tokens(&engine.metadata, &tok);
    let template = match tok.chat_template(opts.chat_template.as_deref()) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(
                target: TARGET,
                "no chat template ({e}): /v1/chat/completions is refused"
            );
            None
        }
    };
    let limits = Limits {
        n_ctx,
        model_names: vec![opts.alias.clone()],
        defaults: opts.defaults,
        seed: opts.seed,
        n_vocab,
        strict_fields: opts.strict_fields,
        chat: opts.chat.clone(),
        default_grammar: opts.default_grammar.clone(),
    };
    let lost_app = Arc::clone(&app);
    let on_lost: Arc<dyn Fn(String) + Send + Sync> = Arc::new(move |why: String| {
        tracing::error!(
            target: TARGET,
            "the GPU device was lost ({why}): every request is refused with 503 until \
             the server is restarted"
        );
        lost_app.set_phase(Phase::DeviceLost(why));
    });
    let fatal_app = Arc::clone(&app);
    let on_fatal: Arc<dyn Fn(String) + Send + Sync> = Arc::new(move |why: String| {
        tracing::error!(target: TARGET, "cannot go on: {why}");
        fatal_app.set_phase(Phase::Failed(why.clone()));
        fatal_app.slots.fail_all(&why);
        // The failed requests' answers and `/health`'s 503 get a moment to go out.
        std::thread::sleep(FATAL_GRACE);
        crate::gpu::end_process(EXIT_WORKER_FAILED);
    });
    let shared = batch_worker::Shared {
        slots: Arc::clone(&app.slots),
        metrics: Arc::clone(&app.metrics),
        on_device_lost: Arc::clone(&on_lost),
        on_fatal: Arc::clone(&on_fatal),
    };
    std::thread::spawn(move || batch_worker::run(engine, shared));
    app.metrics
        .set_kv_capacity(u64::from(limits.n_ctx) * u64::from(opts.n_slots));
    tracing::info!(
        target: TARGET,
        "ready: {} as {:?}, {} slot(s) × {} context, batched steps{}, {:.1} MiB planned \
         (weights shared by the slots)",
        opts.engine.model.display(),
        opts.alias,
        opts.n_slots,
        limits.n_ctx,
        if drafter { ", DSpark drafter" } else { "" },
        planned as f64 / (1024.0 * 1024.0)
    );
    app.set_ready(Ready {
        tok,
        template,
        limits,
        model_path: opts.engine.model.display().to_string(),
        speculative: drafter,
        grammars: std::sync::OnceLock::new(),
        pooling,
        fim,
    });
}

/// SIGINT, and SIGTERM on Unix, registered when made (inside the runtime).
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let make = |kind: SignalKind, name: &str| {
                signal(kind).map_err(|source| Error::Io {
                    context: format!("installing the {name} handler"),
                    source,
                })
            };
            Ok(Signals {
                term: make(SignalKind::terminate(), "SIGTERM")?,
                int: make(SignalKind::interrupt(), "SIGINT")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The first of them.
    async fn recv(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
        #[cfg(not(unix))]
        {
            let _ = &mut self;
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
