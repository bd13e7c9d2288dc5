//! `flint bench`: a llama-bench compatible benchmark runner (issue 8); the speculative
//! benchmark (plain against DSpark decoding on the same prompts) is [`spec`].
//!
//! Tests follow llama-bench: `pp N` prefills N random token ids in ubatches, `tg N` generates N
//! tokens one at a time (greedy argmax on the device), `pg` does both; each runs at a KV depth
//! (`-d`) filled before the clock starts. One untimed warm-up run per test (none with
//! `--no-warmup`), then `-r` timed repetitions; tokenization and sampling are never timed.
//! Results are rows with llama-bench's field names plus flint's own ([`output`] writes md, csv,
//! json, jsonl and sql).

pub mod batched;
pub mod compare;
pub mod host;
pub mod output;
pub mod profile;
pub mod speculative;
pub mod sps;
pub mod stats;

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::engine::Engine;
use crate::gguf::{GgmlType, Gguf};
use crate::kernels::attention::{serial, KvType};
use crate::kernels::matmul::Family;
use crate::memory::Owner;
use crate::{Error, Result};

/// One test: prompt tokens, generated tokens, KV depth before the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestSpec {
    pub n_prompt: u32,
    pub n_gen: u32,
    pub n_depth: u32,
}

impl TestSpec {
    /// llama-bench's test name: `pp512`, `tg128`, `pp512+tg128`, with ` @ d4096` at depth.
    pub fn name(&self) -> String {
        let base = match (self.n_prompt, self.n_gen) {
            (p, 0) => format!("pp{p}"),
            (0, g) => format!("tg{g}"),
            (p, g) => format!("pp{p}+tg{g}"),
        };
        if self.n_depth > 0 {
            format!("{base} @ d{}", self.n_depth)
        } else {
            base
        }
    }

    /// Tokens processed by one run (the numerator of t/s).
    pub fn tokens(&self) -> u64 {
        u64::from(self.n_prompt) + u64::from(self.n_gen)
    }

    /// KV rows a run needs.
    pub fn ctx_needed(&self) -> u32 {
        self.n_depth
            .saturating_add(self.n_prompt)
            .saturating_add(self.n_gen)
    }
}

/// The tests of a command line, in llama-bench's order: for each depth, the pp tests, the tg
/// tests, then the pg tests. Zero entries of `-p`/`-n` are skipped (`-p 0` disables pp).
pub fn expand_tests(
    n_prompt: &[u32],
    n_gen: &[u32],
    pg: &[(u32, u32)],
    depths: &[u32],
) -> Vec<TestSpec> {
    let mut out = Vec::new();
    for &n_depth in depths {
        for &p in n_prompt.iter().filter(|&&p| p > 0) {
            out.push(TestSpec {
                n_prompt: p,
                n_gen: 0,
                n_depth,
            });
        }
        for &g in n_gen.iter().filter(|&&g| g > 0) {
            out.push(TestSpec {
                n_prompt: 0,
                n_gen: g,
                n_depth,
            });
        }
        for &(p, g) in pg.iter().filter(|(p, g)| p + g > 0) {
            out.push(TestSpec {
                n_prompt: p,
                n_gen: g,
                n_depth,
            });
        }
    }
    out
}

/// What the model file says about itself, for the result rows.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelDesc {
    /// `llama 135M Q4_1`: architecture, size label, dominant weight type.
    pub model_type: String,
    /// Bytes of all tensors (llama-bench's `model_size`).
    pub size: u64,
    pub n_params: u64,
    /// Weight bytes one decode step reads: every tensor, but one row of an untied embedding.
    pub bytes_per_token: u64,
}

/// A size label like llama.cpp's: `135M`, `1.7B`, `8B`.
pub fn size_label(n_params: u64) -> String {
    let p = n_params as f64;
    if p >= 1e9 {
        let b = p / 1e9;
        if (b - b.round()).abs() < 0.05 {
            format!("{:.0}B", b)
        } else {
            format!("{:.1}B", b)
        }
    } else {
        format!("{:.0}M", p / 1e6)
    }
}

impl ModelDesc {
    pub fn from_gguf(g: &Gguf, arch: &str, tied_embeddings: bool) -> ModelDesc {
        let size: u64 = g.tensors.iter().map(|t| t.n_bytes).sum();
        let n_params: u64 = g.tensors.iter().map(|t| t.n_elements()).sum();
        let mut by_type: Vec<(GgmlType, u64)> = Vec::new();
        for t in g.tensors.iter().filter(|t| t.shape.len() >= 2) {
            match by_type.iter_mut().find(|(ty, _)| *ty == t.ty) {
                Some(e) => e.1 += t.n_bytes,
                None => by_type.push((t.ty, t.n_bytes)),
            }
        }
        let dominant = by_type
            .iter()
            .max_by_key(|(_, b)| *b)
            .map_or("?", |(ty, _)| ty.name());
        let bytes_per_token = g
            .tensors
            .iter()
            .map(|t| {
                let rows = t.shape.iter().skip(1).product::<u64>().max(1);
                if t.name == "token_embd.weight" && !tied_embeddings {
                    t.n_bytes / rows
                } else {
                    t.n_bytes
                }
            })
            .sum();
        ModelDesc {
            model_type: format!(
                "{arch} {} {}",
                size_label(n_params),
                dominant.to_uppercase()
            ),
            size,
            n_params,
            bytes_per_token,
        }
    }
}

/// Settings of a bench session that are the same for every row.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub model_filename: String,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub type_k: String,
    pub type_v: String,
    pub repetitions: u32,
    /// Peak memory bandwidth in GB/s (`--bandwidth`), for `bandwidth_pct`.
    pub bandwidth_gbps: Option<f64>,
}

/// Timed samples of one test.
#[derive(Debug, Clone, PartialEq)]
pub struct TestResult {
    pub spec: TestSpec,
    pub test_time: String,
    pub samples_ns: Vec<u64>,
    /// Submits, waits and host time of the timed runs' steps.
    pub cost: host::StepCost,
}

impl TestResult {
    pub fn samples_ts(&self) -> Vec<f64> {
        stats::rates(self.spec.tokens(), &self.samples_ns)
    }
    pub fn avg_ts(&self) -> f64 {
        stats::mean(&self.samples_ts())
    }
    pub fn stddev_ts(&self) -> f64 {
        stats::stddev(&self.samples_ts())
    }
}

/// Deterministic random token ids (SplitMix64).
pub struct TokenRng(u64);

impl TokenRng {
    pub fn new(seed: u64) -> TokenRng {
        TokenRng(seed)
    }
    pub fn next(&mut self, n_vocab: u32) -> u32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % u64::from(n_vocab.max(1))) as u32
    }
    pub fn tokens(&mut self, n: u32, n_vocab: u32) -> Vec<u32> {
        (0..n).map(|_| self.next(n_vocab)).collect()
    }
}

/// Empties the cache, then fills it with `depth` random tokens and waits for the device
/// (untimed: what `@ dN` tests, profiles and SPS curves start from).
pub fn fill_depth(engine: &mut Engine, depth: u32, rng: &mut TokenRng) -> Result<()> {
    engine.reset(0)?;
    if depth > 0 {
        let tokens = rng.tokens(depth, engine.hp().n_vocab);
        engine.prefill(0, &tokens)?;
        engine.argmax()?;
    }
    Ok(())
}

/// One run of a test: reset, fill the depth (untimed), then the timed prompt and generation.
/// Adds the timed part's steps to `cost`; returns its nanoseconds.
pub fn run_once(
    engine: &mut Engine,
    spec: &TestSpec,
    rng: &mut TokenRng,
    cost: &mut host::StepCost,
) -> Result<u64> {
    let n_vocab = engine.hp().n_vocab;
    fill_depth(engine, spec.n_depth, rng)?;
    let prompt = rng.tokens(spec.n_prompt, n_vocab);
    let first = rng.next(n_vocab);
    let c0 = engine.ctx.counters().snapshot();
    let t0 = Instant::now();
    if !prompt.is_empty() {
        engine.prefill(0, &prompt)?;
        // Reading the argmax waits for the device (llama-bench's llama_synchronize).
        engine.argmax()?;
    }
    let mut token = first;
    for _ in 0..spec.n_gen {
        engine.prefill(0, &[token])?;
        token = engine
            .argmax()?
            .first()
            .copied()
            .ok_or_else(|| Error::Usage("no logits".into()))?;
    }
    let ns = t0.elapsed().as_nanos() as u64;
    let ubatch = u64::from(engine.max_rows().max(1));
    let steps = u64::from(spec.n_prompt).div_ceil(ubatch) + u64::from(spec.n_gen);
    cost.add(steps, ns, engine.ctx.counters().snapshot() - c0);
    Ok(ns)
}

/// Runs every test: one warm-up run (unless `warmup` is false), then `repetitions` timed ones;
/// `on_run` is called after each run (for the progress bar).
pub fn run_tests(
    engine: &mut Engine,
    tests: &[TestSpec],
    repetitions: u32,
    warmup: bool,
    mut on_run: impl FnMut(&TestSpec),
) -> Result<Vec<TestResult>> {
    let mut rng = TokenRng::new(0x5EED);
    let mut out = Vec::with_capacity(tests.len());
    for spec in tests {
        let test_time = rfc3339_now();
        if warmup {
            run_once(engine, spec, &mut rng, &mut host::StepCost::default())?;
            on_run(spec);
        }
        let mut samples_ns = Vec::with_capacity(repetitions as usize);
        let mut cost = host::StepCost::default();
        for _ in 0..repetitions {
            samples_ns.push(run_once(engine, spec, &mut rng, &mut cost)?);
            on_run(spec);
        }
        out.push(TestResult {
            spec: *spec,
            test_time,
            samples_ns,
            cost,
        });
    }
    Ok(out)
}

/// The current UTC time as `2025-01-31T12:34:56Z` (llama-bench's `test_time`).
pub fn rfc3339_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Seconds since the Unix epoch as an RFC 3339 UTC timestamp.
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Everything about the session that every row repeats.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub config: RunConfig,
    pub model: ModelDesc,
    pub backend: String,
    pub adapter: String,
    pub driver: String,
    pub features: Vec<String>,
    /// The kernels chosen for this adapter, in words (matmul family, multi-row attention).
    pub kernels: String,
    pub max_storage_binding: u64,
    pub max_buffer_size: u64,
    pub mem_target_bytes: u64,
    pub mem_drafter_bytes: u64,
    pub mem_runtime_bytes: u64,
}

impl SessionInfo {
    pub fn from_engine(engine: &Engine, config: RunConfig, model: ModelDesc) -> SessionInfo {
        let kernels = kernel_choice(engine, &config.type_k);
        let info = engine.ctx.info();
        let driver = if info.driver_info.is_empty() {
            info.driver.clone()
        } else {
            format!("{} {}", info.driver, info.driver_info)
        };
        SessionInfo {
            config,
            model,
            backend: info.backend.to_lowercase(),
            adapter: info.name.clone(),
            driver,
            features: info.features.clone(),
            kernels,
            max_storage_binding: info.limits.max_storage_buffer_binding_size,
            max_buffer_size: info.limits.max_buffer_size,
            mem_target_bytes: engine.plan.sum(Some(Owner::Target), None),
            mem_drafter_bytes: engine.plan.sum(Some(Owner::Drafter), None),
            mem_runtime_bytes: engine.plan.sum(Some(Owner::Runtime), None),
        }
    }
}

/// The kernels `engine`'s device runs: its matmul family and its multi-row attention over a
/// `type_k` K cache.
fn kernel_choice(engine: &Engine, type_k: &str) -> String {
    let ctx = &engine.ctx;
    let family = Family::for_context(ctx).describe();
    let ty = GgmlType::from_name(type_k).and_then(|t| KvType::from_ggml(t).ok());
    let attn = match ty {
        Some(ty) => serial::describe(ctx, ty, engine.hp().head_dim),
        None => format!("attention over a {type_k} cache"),
    };
    format!("{family}; {attn}")
}

/// One result row: llama-bench's fields in its order, then flint's own.
pub fn record(s: &SessionInfo, r: &TestResult) -> Map<String, Value> {
    let samples_ts = r.samples_ts();
    let avg_ts = stats::mean(&samples_ts);
    let ns: Vec<f64> = r.samples_ns.iter().map(|&n| n as f64).collect();
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("build_commit", json!(env!("CARGO_PKG_VERSION")));
    put("build_number", json!(0));
    put("cpu_info", json!(""));
    put("gpu_info", json!(s.adapter));
    put("backends", json!("wgpu"));
    put("model_filename", json!(s.config.model_filename));
    put("model_type", json!(s.model.model_type));
    put("model_size", json!(s.model.size));
    put("model_n_params", json!(s.model.n_params));
    put("n_batch", json!(s.config.n_batch));
    put("n_ubatch", json!(s.config.n_ubatch));
    put("type_k", json!(s.config.type_k));
    put("type_v", json!(s.config.type_v));
    put("n_gpu_layers", json!(99));
    put("flash_attn", json!(true));
    put("n_prompt", json!(r.spec.n_prompt));
    put("n_gen", json!(r.spec.n_gen));
    put("n_depth", json!(r.spec.n_depth));
    put("test_time", json!(r.test_time));
    put("avg_ns", json!(stats::mean(&ns).round() as u64));
    put("stddev_ns", json!(stats::stddev(&ns).round() as u64));
    put("avg_ts", json!(avg_ts));
    put("stddev_ts", json!(stats::stddev(&samples_ts)));
    put("samples_ns", json!(r.samples_ns));
    put("samples_ts", json!(samples_ts));
    // flint's own.
    put("backend", json!(s.backend));
    put("adapter", json!(s.adapter));
    put("driver", json!(s.driver));
    put("features", json!(s.features.join(",")));
    put("kernels", json!(s.kernels));
    put("max_storage_binding", json!(s.max_storage_binding));
    put("max_buffer_size", json!(s.max_buffer_size));
    put("mem_target_bytes", json!(s.mem_target_bytes));
    put("mem_drafter_bytes", json!(s.mem_drafter_bytes));
    put("mem_runtime_bytes", json!(s.mem_runtime_bytes));
    // Effective bandwidth: only a pure generation test reads the weights once per token.
    let gbps = if r.spec.n_prompt == 0 && r.spec.n_gen > 0 {
        Some(s.model.bytes_per_token as f64 * avg_ts / 1e9)
    } else {
        None
    };
    put("gbps", json!(gbps));
    let pct = match (gbps, s.config.bandwidth_gbps) {
        (Some(g), Some(b)) if b > 0.0 => Some(g / b * 100.0),
        _ => None,
    };
    put("bandwidth_pct", json!(pct));
    r.cost.put(&mut m);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_names_and_order() {
        let t = expand_tests(&[512, 0], &[128], &[(512, 128)], &[0, 4096]);
        let names: Vec<String> = t.iter().map(TestSpec::name).collect();
        assert_eq!(
            names,
            [
                "pp512",
                "tg128",
                "pp512+tg128",
                "pp512 @ d4096",
                "tg128 @ d4096",
                "pp512+tg128 @ d4096"
            ]
        );
        assert_eq!(t[2].tokens(), 640);
        assert_eq!(t[5].ctx_needed(), 4096 + 640);
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_735_689_599), "2024-12-31T23:59:59Z");
    }

    #[test]
    fn size_labels() {
        assert_eq!(size_label(134_515_008), "135M");
        assert_eq!(size_label(1_711_376_384), "1.7B");
        assert_eq!(size_label(8_030_261_248), "8B");
    }

    #[test]
    fn token_rng_in_range() {
        let mut r = TokenRng::new(1);
        assert!(r.tokens(1000, 7).iter().all(|&t| t < 7));
    }
}
