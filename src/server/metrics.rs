//! Server counters and their Prometheus text exposition (`GET /metrics`): requests, refusals,
//! tokens, decode time (so tok/s), slot occupancy, queue depth, KV use and speculative
//! acceptance, under flint's `flint_*` names and again under llama-server's `llamacpp:*` names
//! (so its dashboards work unchanged), plus two histograms: time to first token and whole
//! request latency.
//!
//! llama-server's names, types and meanings follow its documentation
//! (<https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md>, "GET /metrics");
//! where flint differs: throughputs are averages since start (llama-server's reset at each
//! scrape), and a "decode" is one model forward (a prompt's prefill counts once).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::histogram::{Histogram, E2E_BOUNDS, TTFT_BOUNDS};
use crate::engine::GenStats;

/// Monotonic counters (updated by handlers and workers).
#[derive(Debug)]
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
    draft_cycles: AtomicU64,
    queue_us: AtomicU64,
    /// Model forwards, and the busy slots summed over them.
    decodes: AtomicU64,
    busy_per_decode: AtomicU64,
    /// Tokens whose K/V rows each slot holds, and the slots' total capacity (tokens).
    kv_used: Mutex<Vec<usize>>,
    kv_capacity: AtomicU64,
    /// The most tokens one slot has held (prompt and generated).
    n_tokens_max: AtomicU64,
    /// Arrival to first generated token, and arrival to the end, of each finished generation.
    pub ttft: Histogram,
    pub e2e: Histogram,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let z = || AtomicU64::new(0);
        Metrics {
            requests: z(),
            rejected: z(),
            errors: z(),
            prompt_tokens: z(),
            generated_tokens: z(),
            prefill_us: z(),
            decode_us: z(),
            drafted: z(),
            accepted: z(),
            draft_cycles: z(),
            queue_us: z(),
            decodes: z(),
            busy_per_decode: z(),
            kv_used: Mutex::new(Vec::new()),
            kv_capacity: z(),
            n_tokens_max: z(),
            ttft: Histogram::new(TTFT_BOUNDS),
            e2e: Histogram::new(E2E_BOUNDS),
        }
    }
}

fn add(c: &AtomicU64, v: u64) {
    c.fetch_add(v, Ordering::Relaxed);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// `n / secs`, 0 before any time was spent.
fn rate(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
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
            add(&self.draft_cycles, spec.cycles);
        }
    }

    /// `n` model forwards that each ran `busy` slots' rows.
    pub fn record_decodes(&self, n: u64, busy: u64) {
        add(&self.decodes, n);
        add(&self.busy_per_decode, n * busy);
    }

    /// The slots' total K/V capacity, tokens (set once the model is loaded).
    pub fn set_kv_capacity(&self, tokens: u64) {
        self.kv_capacity.store(tokens, Ordering::Relaxed);
    }

    /// Slot `slot` now holds the K/V rows of `tokens` tokens.
    pub fn set_kv_used(&self, slot: usize, tokens: usize) {
        let mut used = self.kv_used.lock();
        if used.len() <= slot {
            used.resize(slot + 1, 0);
        }
        used[slot] = tokens;
        drop(used);
        self.n_tokens_max
            .fetch_max(tokens as u64, Ordering::Relaxed);
    }

    /// The exposition, with the current slot occupancy and queue depth.
    pub fn render(&self, busy: usize, slots: usize, queue: usize) -> String {
        let mut out = String::new();
        self.render_flint(&mut out, busy, slots, queue);
        self.render_llamacpp(&mut out, busy, queue);
        self.ttft.render(
            &mut out,
            "flint_time_to_first_token_seconds",
            "Time from a generation request's arrival to its first generated token.",
        );
        self.e2e.render(
            &mut out,
            "flint_e2e_request_latency_seconds",
            "Time from a generation request's arrival to its last generated token.",
        );
        out
    }

    fn render_flint(&self, out: &mut String, busy: usize, slots: usize, queue: usize) {
        let mut m = |name: &str, kind: &str, help: &str, value: String| {
            sample(out, &format!("flint_{name}"), kind, help, &value);
        };
        let c = |x: &AtomicU64| get(x).to_string();
        let secs = |x: &AtomicU64| get(x) as f64 / 1e6;
        m(
            "requests_total",
            "counter",
            "Generation requests accepted into the queue.",
            c(&self.requests),
        );
        m(
            "requests_rejected_total",
            "counter",
            "Requests refused because every slot was busy and the queue full.",
            c(&self.rejected),
        );
        m(
            "requests_failed_total",
            "counter",
            "Generations that ended with an error.",
            c(&self.errors),
        );
        m(
            "prompt_tokens_total",
            "counter",
            "Prompt tokens processed.",
            c(&self.prompt_tokens),
        );
        m(
            "generated_tokens_total",
            "counter",
            "Tokens generated.",
            c(&self.generated_tokens),
        );
        m(
            "prompt_seconds_total",
            "counter",
            "Prefill time.",
            secs(&self.prefill_us).to_string(),
        );
        m(
            "queue_seconds_total",
            "counter",
            "Time requests waited for a slot.",
            secs(&self.queue_us).to_string(),
        );
        m(
            "decode_seconds_total",
            "counter",
            "Decode time.",
            secs(&self.decode_us).to_string(),
        );
        m(
            "prompt_tokens_per_second",
            "gauge",
            "Average prefill throughput.",
            format!("{:.3}", self.prompt_rate()),
        );
        m(
            "predicted_tokens_per_second",
            "gauge",
            "Average decode throughput.",
            format!("{:.3}", self.predicted_rate()),
        );
        m("slots_total", "gauge", "Slots.", slots.to_string());
        m(
            "slots_busy",
            "gauge",
            "Slots running a request.",
            busy.to_string(),
        );
        m(
            "queue_depth",
            "gauge",
            "Requests waiting for a slot.",
            queue.to_string(),
        );
        m(
            "spec_draft_tokens_total",
            "counter",
            "Draft tokens verified.",
            c(&self.drafted),
        );
        m(
            "spec_accepted_tokens_total",
            "counter",
            "Draft tokens accepted.",
            c(&self.accepted),
        );
        let (d, a) = (get(&self.drafted), get(&self.accepted));
        m(
            "spec_acceptance_rate",
            "gauge",
            "Accepted / drafted tokens.",
            format!("{:.4}", if d > 0 { a as f64 / d as f64 } else { 0.0 }),
        );
    }

    /// llama-server's families (its names and types; meanings as in the module header).
    fn render_llamacpp(&self, out: &mut String, busy: usize, queue: usize) {
        let mut m = |name: &str, kind: &str, help: &str, value: String| {
            sample(out, &format!("llamacpp:{name}"), kind, help, &value);
        };
        let c = |x: &AtomicU64| get(x).to_string();
        let secs = |x: &AtomicU64| get(x) as f64 / 1e6;
        m(
            "prompt_tokens_total",
            "counter",
            "Number of prompt tokens processed.",
            c(&self.prompt_tokens),
        );
        m(
            "prompt_seconds_total",
            "counter",
            "Prompt process time in seconds.",
            secs(&self.prefill_us).to_string(),
        );
        m(
            "tokens_predicted_total",
            "counter",
            "Number of generation tokens processed.",
            c(&self.generated_tokens),
        );
        m(
            "tokens_predicted_seconds_total",
            "counter",
            "Predict process time in seconds.",
            secs(&self.decode_us).to_string(),
        );
        m(
            "n_decode_total",
            "counter",
            "Total number of model forward calls.",
            c(&self.decodes),
        );
        m(
            "n_tokens_max",
            "counter",
            "High watermark of the context size observed.",
            c(&self.n_tokens_max),
        );
        m(
            "spec_decode_num_draft_tokens_total",
            "counter",
            "Total draft tokens sent to verification (0 when spec-decode is off).",
            c(&self.drafted),
        );
        m(
            "spec_decode_num_accepted_tokens_total",
            "counter",
            "Total draft tokens accepted by the target model (0 when spec-decode is off).",
            c(&self.accepted),
        );
        m(
            "spec_decode_num_drafts_total",
            "counter",
            "Total speculative decoding verification steps (0 when spec-decode is off).",
            c(&self.draft_cycles),
        );
        m(
            "prompt_tokens_seconds",
            "gauge",
            "Average prompt throughput in tokens/s.",
            self.prompt_rate().to_string(),
        );
        m(
            "predicted_tokens_seconds",
            "gauge",
            "Average generation throughput in tokens/s.",
            self.predicted_rate().to_string(),
        );
        let used: usize = self.kv_used.lock().iter().sum();
        let cap = get(&self.kv_capacity);
        m(
            "kv_cache_usage_ratio",
            "gauge",
            "KV-cache usage. 1 = 100 percent usage.",
            (if cap > 0 {
                used as f64 / cap as f64
            } else {
                0.0
            })
            .to_string(),
        );
        m(
            "kv_cache_tokens",
            "gauge",
            "KV-cache tokens.",
            used.to_string(),
        );
        m(
            "requests_processing",
            "gauge",
            "Number of requests processing.",
            busy.to_string(),
        );
        m(
            "requests_deferred",
            "gauge",
            "Number of requests deferred.",
            queue.to_string(),
        );
        let n = get(&self.decodes);
        m(
            "n_busy_slots_per_decode",
            "gauge",
            "Average number of busy slots per model forward call.",
            (get(&self.busy_per_decode) as f64 / n.max(1) as f64).to_string(),
        );
    }

    fn prompt_rate(&self) -> f64 {
        rate(get(&self.prompt_tokens), get(&self.prefill_us) as f64 / 1e6)
    }

    fn predicted_rate(&self) -> f64 {
        rate(
            get(&self.generated_tokens),
            get(&self.decode_us) as f64 / 1e6,
        )
    }
}

/// One single-sample family: HELP, TYPE and the value.
fn sample(out: &mut String, name: &str, kind: &str, help: &str, value: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}
