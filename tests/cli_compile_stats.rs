//! One-time pipeline compilation is counted apart from the rates: `generate --stats-json` has
//! `compile_ms` (a number, at least 0) and a finite, positive prompt rate, and the pipeline
//! cache counts the creations it ran and the time a thread spent on them.

use std::process::Command;
use std::time::Duration;

use flint::gpu::{DeviceOptions, GpuContext, PipelineCache, ShaderVariant};
use flint::kernels::dequant;

const MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

#[test]
fn stats_json_reports_compile_ms_and_a_positive_prompt_rate() {
    let dir = tempfile::Builder::new()
        .prefix("flint-compile-stats-")
        .tempdir()
        .expect("temp dir");
    let stats = dir.path().join("stats.json");
    // A prompt length other than the shapes the load builds (a full ubatch, one row).
    let o = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args([
            "generate",
            "-m",
            MODEL,
            "-p",
            "The capital of France is",
            "-n",
            "4",
            "-c",
            "64",
            "--temp",
            "0",
            "--no-spec",
            "--stats-json",
            stats.to_str().expect("utf-8"),
        ])
        .output()
        .expect("run flint");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).expect("stats")).expect("json");
    let compile = v["compile_ms"].as_f64().expect("compile_ms is a number");
    assert!(compile.is_finite() && compile >= 0.0, "{v}");
    let prefill = v["prefill_tps"].as_f64().expect("prefill_tps");
    assert!(prefill.is_finite() && prefill > 0.0, "{v}");
    let decode = v["decode_tps"].as_f64().expect("decode_tps");
    assert!(decode.is_finite() && decode >= 0.0, "{v}");
    // The stats line shows the compile time exactly when there was some worth showing.
    let line = err
        .lines()
        .find(|l| l.starts_with("prompt: "))
        .expect("stats line");
    assert_eq!(line.contains("| compile "), compile >= 5.0, "{line} / {v}");
}

#[test]
fn the_pipeline_cache_counts_its_builds_and_the_threads_wait() {
    let ctx = GpuContext::new(&DeviceOptions::default()).unwrap_or_else(|e| {
        panic!("no usable GPU adapter ({e}); GPU tests fail rather than skip without one")
    });
    let cache = ctx.pipelines();
    assert_eq!(cache.builds().builds, 0);
    assert_eq!(cache.builds().time, Duration::ZERO);
    let variants: Vec<ShaderVariant> = dequant::SUPPORTED_TYPES
        .iter()
        .take(3)
        .map(|&ty| dequant::variant(ty, false, false).expect("variant"))
        .collect();
    let before = PipelineCache::thread_wait();
    let got: Vec<_> = variants
        .iter()
        .map(|v| cache.get(&ctx, v).expect("set up"))
        .collect();
    let mut seen = Vec::new();
    cache
        .wait_all_with(|done, total| seen.push((done, total)))
        .expect("built");
    assert_eq!(cache.pending(), 0);
    // Progress runs up to every pipeline, never past it.
    let &(done, total) = seen.last().expect("progress");
    assert_eq!((done, total), (variants.len(), variants.len()), "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{seen:?}");
    // One creation per variant, with some time to it; setting them up took this thread some.
    let count = cache.builds();
    assert_eq!(count.builds, variants.len() as u64);
    assert!(count.time > Duration::ZERO);
    let after = PipelineCache::thread_wait();
    assert!(after > before);
    // Built pipelines cost nothing more: asking again neither builds nor waits.
    for (v, p) in variants.iter().zip(&got) {
        p.ready().expect("ready");
        assert!(std::sync::Arc::ptr_eq(
            p,
            &cache.get(&ctx, v).expect("cached")
        ));
    }
    cache.wait_all().expect("still built");
    assert_eq!(cache.builds(), count);
    assert_eq!(PipelineCache::thread_wait(), after);
}
