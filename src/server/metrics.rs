//! Server counters and their Prometheus text exposition (`GET /metrics`): requests, refusals,
//! tokens, decode time (so tok/s), slot occupancy, queue depth and speculative acceptance.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::GenStats;

/// Monotonic counters (updated by handlers and workers).
#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: AtomicU64,
    pub rejected: AtomicU64,
    pub errors: AtomicU64,
    prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    prefill_us: AtomicU64,
    decode_us: AtomicU64,
    drafted: AtomicU64,
    accepted: AtomicU64,
    queue_us: AtomicU64,
}

fn add(c: &AtomicU64, v: u64) {
    c.fetch_add(v, Ordering::Relaxed);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

impl Metrics {
    pub fn inc(c: &AtomicU64) {
        add(c, 1);
    }

    /// Time a job waited for its slot.
    pub fn record_wait(&self, waited: std::time::Duration) {
        add(&self.queue_us, waited.as_micros() as u64);
    }

    /// Count one finished generation.
    pub fn record(&self, s: &GenStats) {
        add(&self.prompt_tokens, s.prompt_tokens as u64);
        add(&self.generated_tokens, s.generated_tokens as u64);
        add(&self.prefill_us, (s.prefill_secs * 1e6) as u64);
        add(&self.decode_us, (s.decode_secs * 1e6) as u64);
        if let Some(spec) = &s.spec {
            add(&self.drafted, spec.drafted);
            add(&self.accepted, spec.accepted);
        }
    }

    /// The exposition, with the current slot occupancy and queue depth.
    pub fn render(&self, busy: usize, slots: usize, queue: usize) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(out, "# HELP flint_{name} {help}");
            let _ = writeln!(out, "# TYPE flint_{name} {kind}");
            let _ = writeln!(out, "flint_{name} {value}");
        };
        let c = |x: &AtomicU64| get(x).to_string();
        metric(
            "requests_total",
            "counter",
            "Generation requests accepted into the queue.",
            c(&self.requests),
        );
        metric(
            "requests_rejected_total",
            "counter",
            "Requests refused because every slot was busy and the queue full.",
            c(&self.rejected),
        );
        metric(
            "requests_failed_total",
            "counter",
            "Generations that ended with an error.",
            c(&self.errors),
        );
        metric(
            "prompt_tokens_total",
            "counter",
            "Prompt tokens processed.",
            c(&self.prompt_tokens),
        );
        metric(
            "generated_tokens_total",
            "counter",
            "Tokens generated.",
            c(&self.generated_tokens),
        );
        let secs = |x: &AtomicU64| get(x) as f64 / 1e6;
        metric(
            "prompt_seconds_total",
            "counter",
            "Prefill time.",
            secs(&self.prefill_us).to_string(),
        );
        metric(
            "queue_seconds_total",
            "counter",
            "Time requests waited for a slot.",
            secs(&self.queue_us).to_string(),
        );
        metric(
            "decode_seconds_total",
            "counter",
            "Decode time.",
            secs(&self.decode_us).to_string(),
        );
        let rate = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        metric(
            "prompt_tokens_per_second",
            "gauge",
            "Average prefill throughput.",
            format!(
                "{:.3}",
                rate(get(&self.prompt_tokens), secs(&self.prefill_us))
            ),
        );
        metric(
            "predicted_tokens_per_second",
            "gauge",
            "Average decode throughput.",
            format!(
                "{:.3}",
                rate(get(&self.generated_tokens), secs(&self.decode_us))
            ),
        );
        metric("slots_total", "gauge", "Slots.", slots.to_string());
        metric(
            "slots_busy",
            "gauge",
            "Slots running a request.",
            busy.to_string(),
        );
        metric(
            "queue_depth",
            "gauge",
            "Requests waiting for a slot.",
            queue.to_string(),
        );
        metric(
            "spec_draft_tokens_total",
            "counter",
            "Draft tokens verified.",
            c(&self.drafted),
        );
        metric(
            "spec_accepted_tokens_total",
            "counter",
            "Draft tokens accepted.",
            c(&self.accepted),
        );
        let (d, a) = (get(&self.drafted), get(&self.accepted));
        metric(
            "spec_acceptance_rate",
            "gauge",
            "Accepted / drafted tokens.",
            format!("{:.4}", if d > 0 { a as f64 / d as f64 } else { 0.0 }),
        );
        out
    }
}
