//! Per-token op benchmarks with device-synchronised timing: the residual add + RMSNorm and the
//! fused RoPE + KV store of one SmolLM2-135M layer (576 wide; 9 query and 3 KV heads of 64
//! dims), at 1 token (a decode step) and 8 tokens (a verify batch). Each sample records
//! `ITERS` copies of the dispatch into one compute pass and submits once; the reported time is
//! the best of `SAMPLES` samples / `ITERS`, after a warm-up submit. The ratio column is the
//! 8-token time over the 1-token time of the same op in the same run: what a verify batch adds
//! to these ops (a dispatch has a fixed cost, about 20–40 µs on lavapipe, that any row count
//! pays). `cargo bench --bench ops`.

use std::time::{Duration, Instant};

use flint::gpu::buffers::{create_storage, create_storage_init};
use flint::gpu::{DeviceOptions, GpuContext, GpuError};
use flint::kernels::attention::{KvLayout, KvType, RopeKv, RopeKvIo};
use flint::kernels::launch::{submit, Dispatch};
use flint::kernels::ops::norm::RmsNorm;
use flint::kernels::ops::rope::{rope_freqs, RopeConfig, RopeMode};

const ITERS: usize = 300;
const SAMPLES: usize = 7;
/// Model width, query heads, KV heads and head dims of SmolLM2-135M.
const D: u32 = 576;
const N_HEAD: u32 = 9;
const N_KV: u32 = 3;
const HEAD_DIM: u32 = 64;

fn time(ctx: &GpuContext, d: &Dispatch) -> Result<Duration, GpuError> {
    submit(ctx, "warm-up", &[d])?;
    ctx.poll("warm-up", true)?;
    let many: Vec<&Dispatch> = (0..ITERS).map(|_| d).collect();
    let mut best = Duration::MAX;
    for _ in 0..SAMPLES {
        let t0 = Instant::now();
        submit(ctx, "bench", &many)?;
        ctx.poll("bench", true)?;
        best = best.min(t0.elapsed() / ITERS as u32);
    }
    Ok(best)
}

/// f32 storage holding `n` values of a short ramp (the ops' speed does not depend on them).
fn ramp(ctx: &GpuContext, what: &str, n: u32) -> Result<wgpu::Buffer, GpuError> {
    let v: Vec<f32> = (0..n).map(|i| (i % 17) as f32 * 0.1 - 0.8).collect();
    create_storage_init(ctx, what, bytemuck::cast_slice(&v))
}

fn norm(ctx: &GpuContext, rows: u32) -> Result<Duration, GpuError> {
    let r = ramp(ctx, "residual", rows * D)?;
    let y = ramp(ctx, "y", rows * D)?;
    let w = ramp(ctx, "weight", D)?;
    let op = RmsNorm::add_then_norm(ctx, &r, &y, &w, rows, D, 1e-5)?;
    time(ctx, &op.dispatch)
}

fn rope_kv(ctx: &GpuContext, rows: u32) -> Result<Duration, GpuError> {
    let cfg = RopeConfig {
        n_rot: HEAD_DIM,
        mode: RopeMode::Normal,
        freq_base: 10000.0,
        freq_scale: 1.0,
    };
    let q = ramp(ctx, "q", rows * N_HEAD * HEAD_DIM)?;
    let k = ramp(ctx, "k", rows * N_KV * HEAD_DIM)?;
    let v = ramp(ctx, "v", rows * N_KV * HEAD_DIM)?;
    let pos: Vec<u32> = (0..rows).map(|i| 100 + i).collect();
    let positions = create_storage_init(ctx, "positions", bytemuck::cast_slice(&pos))?;
    let freqs = rope_freqs(&cfg, None).map_err(|e| GpuError::BadInput {
        what: "RoPE frequencies".into(),
        expected: "a table".into(),
        actual: e.to_string(),
    })?;
    let freqs = create_storage_init(ctx, "freqs", bytemuck::cast_slice(&freqs))?;
    let layout = KvLayout::new(KvType::F16, 2048, N_KV, HEAD_DIM)?;
    let k_cache = create_storage(ctx, "k cache", layout.buffer_bytes())?;
    let v_cache = create_storage(ctx, "v cache", layout.buffer_bytes())?;
    let io = RopeKvIo {
        q: &q,
        k: &k,
        v: &v,
        positions: &positions,
        freqs: &freqs,
        k_cache: &k_cache,
        v_cache: &v_cache,
    };
    let op = RopeKv::new(ctx, io, N_HEAD, [&layout, &layout], &cfg, rows)?;
    time(ctx, &op.dispatch)
}

type Op = fn(&GpuContext, u32) -> Result<Duration, GpuError>;

fn main() -> Result<(), GpuError> {
    let ctx = GpuContext::new(&DeviceOptions::default())?;
    println!("adapter: {} ({})", ctx.info().name, ctx.info().device_type);
    println!("| op | 1 token | 8 tokens | 8 / 1 |");
    println!("|---|---:|---:|---:|");
    let ops: [(&str, Op); 2] = [
        ("residual add + RMSNorm [576]", norm),
        ("RoPE + KV store (9 q, 3 kv heads)", rope_kv),
    ];
    for (name, op) in ops {
        let one = op(&ctx, 1)?;
        let eight = op(&ctx, 8)?;
        println!(
            "| {name} | {:.1} µs | {:.1} µs | {:.2} |",
            one.as_secs_f64() * 1e6,
            eight.as_secs_f64() * 1e6,
            eight.as_secs_f64() / one.as_secs_f64()
        );
    }
    let errors = ctx.take_uncaptured_errors();
    if !errors.is_empty() {
        eprintln!("uncaptured wgpu errors: {errors:#?}");
        std::process::exit(1);
    }
    Ok(())
}
