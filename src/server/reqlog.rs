//! The request log: one middleware around every route gives each request an id (the client's
//! `X-Request-Id` when it sends a usable one, else `req-N`), echoes it in the response's
//! `X-Request-Id`, and logs one line at info (health checks and scrapes at debug) when the
//! response body ends or is dropped:
//! method, path, status, latency (ms, to the body's end, so a stream's whole length), and for
//! generations the slot and the prompt and generated tokens.
//!
//! A generation's counters come from the worker that runs it: the middleware scopes a [`Trace`]
//! over the handler (a task-local), [`Slots::submit`](super::slots::Slots::submit) files it
//! under the job's id, and the worker takes it with the job ([`JobClock`]), which also feeds the
//! time-to-first-token and latency histograms.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use super::inflight::HoldUntilEnd;
use super::metrics::Metrics;
use super::slots::Outcome;

/// The target of the server's own log lines (`RUST_LOG=flint=…` selects them).
pub const TARGET: &str = "flint serve";

/// Routes whose request lines are logged at debug rather than info.
const PROBES: &[&str] = &["/health", "/v1/health", "/metrics"];

/// The response header that carries the request id.
const HEADER: &str = "x-request-id";

/// The server's request counter (`req-N`).
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// "Not set" in the atomics below.
const NONE: usize = usize::MAX;

tokio::task_local! {
    static TRACE: Arc<Trace>;
}

/// What the log line of one request reports beyond its status.
#[derive(Debug)]
pub struct Trace {
    pub id: String,
    arrived: Instant,
    slot: AtomicUsize,
    prompt_tokens: AtomicUsize,
    generated_tokens: AtomicUsize,
    /// Arrival to the first generated token, µs (`u64::MAX` until then).
    first_token_us: AtomicU64,
    failed: AtomicBool,
}

impl Trace {
    fn new(id: String) -> Trace {
        Trace {
            id,
            arrived: Instant::now(),
            slot: AtomicUsize::new(NONE),
            prompt_tokens: AtomicUsize::new(NONE),
            generated_tokens: AtomicUsize::new(NONE),
            first_token_us: AtomicU64::new(u64::MAX),
            failed: AtomicBool::new(false),
        }
    }

    fn get(a: &AtomicUsize) -> Option<usize> {
        Some(a.load(Ordering::Relaxed)).filter(|v| *v != NONE)
    }
}

/// The trace of the request being handled on this task, if any.
pub fn current() -> Option<Arc<Trace>> {
    TRACE.try_with(Arc::clone).ok()
}

/// A generation's timing in its worker: the time to its first token and to its end go to the
/// histograms, its slot and token counts to its request's trace.
#[derive(Clone)]
pub struct JobClock {
    trace: Option<Arc<Trace>>,
    /// The request's arrival (the job's queueing when it has no trace).
    start: Instant,
    first: Option<Instant>,
    slot: usize,
}

impl JobClock {
    /// Slot `slot` took a job queued at `queued_at`.
    pub fn new(trace: Option<Arc<Trace>>, queued_at: Instant, slot: usize) -> JobClock {
        let start = trace.as_ref().map_or(queued_at, |t| t.arrived);
        if let Some(t) = &trace {
            t.slot.store(slot, Ordering::Relaxed);
        }
        JobClock {
            trace,
            start,
            first: None,
            slot,
        }
    }

    /// The request id, for the worker's own log lines.
    pub fn id(&self) -> &str {
        self.trace.as_ref().map_or("-", |t| t.id.as_str())
    }

    /// A token was generated.
    pub fn token(&mut self) {
        if self.first.is_none() {
            let now = Instant::now();
            self.first = Some(now);
            if let Some(t) = &self.trace {
                let us = now.duration_since(t.arrived).as_micros() as u64;
                t.first_token_us.store(us, Ordering::Relaxed);
            }
        }
    }

    /// The generation ended with `o` (called before the client is told): one observation in
    /// each histogram (a generation without tokens counts its end as its first token).
    pub fn finished(&self, metrics: &Metrics, o: &Outcome) {
        let now = Instant::now();
        let first = self.first.unwrap_or(now);
        metrics
            .ttft
            .observe(first.duration_since(self.start).as_secs_f64());
        metrics
            .e2e
            .observe(now.duration_since(self.start).as_secs_f64());
        if let Some(t) = &self.trace {
            t.prompt_tokens.store(o.prompt_tokens, Ordering::Relaxed);
            t.generated_tokens
                .store(o.completion_tokens, Ordering::Relaxed);
        }
    }

    /// The generation failed: logged at error with the request and the slot.
    pub fn failed(&self, why: &str) {
        if let Some(t) = &self.trace {
            t.failed.store(true, Ordering::Relaxed);
        }
        tracing::error!(target: TARGET, id = self.id(), slot = self.slot, error = why, "generation failed");
    }
}

/// The id a request goes by: the client's `X-Request-Id` when it is 1–128 visible ASCII
/// characters, else `req-N` from the server's counter.
fn request_id(req: &Request, next: &AtomicU64) -> String {
    let given = req
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()));
    match given {
        Some(v) => v.to_string(),
        None => format!("req-{}", next.fetch_add(1, Ordering::Relaxed)),
    }
}

/// The middleware (`axum::middleware::from_fn`).
pub async fn layer(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let trace = Arc::new(Trace::new(request_id(&req, &NEXT_ID)));
    let mut resp = TRACE.scope(Arc::clone(&trace), next.run(req)).await;
    if let Ok(v) = HeaderValue::from_str(&trace.id) {
        resp.headers_mut().insert(HEADER, v);
    }
    let status = resp.status();
    let line = Line {
        trace,
        method,
        path,
        status,
    };
    resp.map(|body| HoldUntilEnd::body(body, line))
}

/// What the log line needs once the body ends; logged when dropped (the body ended, failed, or
/// was dropped by a client that left mid-stream).
struct Line {
    trace: Arc<Trace>,
    method: Method,
    path: String,
    status: StatusCode,
}

impl Line {
    fn emit(&self) {
        let t = &self.trace;
        let latency_ms = (t.arrived.elapsed().as_secs_f64() * 1e3 * 10.0).round() / 10.0;
        let ttft_ms = Some(t.first_token_us.load(Ordering::Relaxed))
            .filter(|us| *us != u64::MAX)
            .map(|us| (us as f64 / 100.0).round() / 10.0);
        let slot = Trace::get(&t.slot);
        let prompt_tokens = Trace::get(&t.prompt_tokens);
        let generated_tokens = Trace::get(&t.generated_tokens);
        let failed = t.failed.load(Ordering::Relaxed).then_some(true);
        // Probes (health checks, scrapes) at debug, as llama-server leaves them out of its log.
        macro_rules! line {
            ($level:expr) => {
                tracing::event!(
                    target: TARGET,
                    $level,
                    id = %t.id,
                    method = %self.method,
                    path = %self.path,
                    status = self.status.as_u16(),
                    latency_ms,
                    ttft_ms,
                    slot,
                    prompt_tokens,
                    generated_tokens,
                    failed,
                    "request"
                )
            };
        }
        if PROBES.contains(&self.path.as_str()) {
            line!(tracing::Level::DEBUG);
        } else {
            line!(tracing::Level::INFO);
        }
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        self.emit();
    }
}
