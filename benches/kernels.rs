//! Kernel benchmarks with device-synchronised timing: each sample records `iters` copies of a
//! kernel's dispatches into one compute pass, submits once and waits for the device; the
//! reported time is the best sample / iters (after one warm-up submit that also pays the JIT).
//!
//! Per type and shape: mat-vec (M = 1) and small batch (M = 8) in GB/s of weight bytes read,
//! prefill (M = 512) in GFLOP/s, each with the ratio to the one-invocation-per-output baseline
//! kernel (`shaders/matmul_baseline.wgsl`, same decoders) measured in the same process, and the
//! embedding gather. Mat-vec and batch rows also give their GB/s and speed against Q4_0's row of
//! the same kernel and shape (the 1-bit and ternary formats read fewer bytes per weight: GB/s
//! says how well a kernel streams them, speed how long the same matmul takes).
//! `cargo bench --bench kernels` prints a table; `-- quick` runs a smaller set; other arguments
//! pick types whose name contains one of them (Q4_0, the reference, always runs; `embed` the
//! gather), e.g. `cargo bench --bench kernels -- quick Q1_0 Q2_0 TQ`.
//! Runs on the default adapter with its default kernel family (lavapipe: `Family::SERIAL`).

use std::time::{Duration, Instant};

use flint::gguf::GgmlType;
use flint::gpu::buffers::{create_storage, create_storage_init};
use flint::gpu::{DeviceOptions, GpuContext, GpuError};
use flint::kernels::launch::{submit, Dispatch};
use flint::kernels::matmul::{
    baseline_dispatches, embed_dispatches, matmul_dispatches, matmul_dispatches_with, Family,
    GpuWeight, MatmulIo, STAGED_TM,
};

/// SplitMix64 bytes: weight contents do not change the speed, only the scales must be finite.
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) & 0x3b3b) as u8 // keeps f16 exponents small and finite
        })
        .collect()
}

/// Best time of one run of `dispatches`, over `samples` samples of `iters` runs each.
fn time(
    ctx: &GpuContext,
    dispatches: &[Dispatch],
    iters: usize,
    samples: usize,
) -> Result<Duration, GpuError> {
    let once: Vec<&Dispatch> = dispatches.iter().collect();
    submit(ctx, "warm-up", &once)?;
    ctx.poll("warm-up", true)?;
    let many: Vec<&Dispatch> = (0..iters).flat_map(|_| dispatches.iter()).collect();
    let mut best = Duration::MAX;
    for _ in 0..samples {
        let t0 = Instant::now();
        submit(ctx, "bench", &many)?;
        ctx.poll("bench", true)?;
        best = best.min(t0.elapsed() / iters as u32);
    }
    Ok(best)
}

struct Row {
    kernel: String,
    ty: GgmlType,
    shape: String,
    t: Duration,
    rate: String,
    /// Weight GB/s (mat-vec and batch rows).
    gbs: Option<f64>,
    base: Option<Duration>,
}

/// The type as the table names it: `Debug` tells the two Q2_0 layouts apart.
fn type_label(ty: GgmlType) -> String {
    format!("{ty:?}")
}

fn print(rows: &[Row]) {
    println!(
        "| {:<22} | {:<9} | {:<18} | {:>10} | {:>14} | {:>11} | {:>8} | {:>12} | {:>13} |",
        "kernel",
        "type",
        "shape [K,N] x M",
        "time",
        "rate",
        "baseline",
        "speedup",
        "GB/s vs Q4_0",
        "speed vs Q4_0"
    );
    println!(
        "|{:-<24}|{:-<11}|{:-<20}|{:-<12}|{:-<16}|{:-<13}|{:-<10}|{:-<14}|{:-<15}|",
        "", "", "", "", "", "", "", "", ""
    );
    for r in rows {
        // Q4_0's row of the same kernel and shape, in this run.
        let q4 = rows
            .iter()
            .find(|q| q.ty == GgmlType::Q4_0 && q.kernel == r.kernel && q.shape == r.shape);
        let (vs_rate, vs_speed) = match (q4, r.gbs, q4.and_then(|q| q.gbs)) {
            (Some(q), Some(g), Some(qg)) => (
                format!("{:.2}x", g / qg),
                format!("{:.2}x", q.t.as_secs_f64() / r.t.as_secs_f64()),
            ),
            _ => ("-".into(), "-".into()),
        };
        let (b, ratio) = match r.base {
            Some(b) => (
                format!("{:.3} ms", b.as_secs_f64() * 1e3),
                format!("{:.2}x", b.as_secs_f64() / r.t.as_secs_f64()),
            ),
            None => ("-".into(), "-".into()),
        };
        println!(
            "| {:<22} | {:<9} | {:<18} | {:>7.3} ms | {:>14} | {:>11} | {:>8} | {:>12} | {:>13} |",
            r.kernel,
            type_label(r.ty),
            r.shape,
            r.t.as_secs_f64() * 1e3,
            r.rate,
            b,
            ratio,
            vs_rate,
            vs_speed
        );
    }
}

fn bench_type(
    ctx: &GpuContext,
    family: Family,
    ty: GgmlType,
    quick: bool,
    rows: &mut Vec<Row>,
) -> Result<(), GpuError> {
    let (k, n) = (2048u32, 2048u32);
    let bytes = random_bytes(
        ty.row_bytes(u64::from(k)).unwrap_or(0) as usize * n as usize,
        ty.id().into(),
    );
    let w = GpuWeight::upload(ctx, &type_label(ty), ty, [k.into(), n.into()], &bytes)?;
    let wbytes = w.device_bytes() as f64;
    let x = create_storage_init(ctx, "x", &vec![0u8; 512 * 2048 * 4])?;
    let y = create_storage(ctx, "y", 512 * 2048 * 4)?;
    let batch_ms: &[u32] = if quick { &[1] } else { &[1, 8] };
    for &m in batch_ms {
        let io = MatmulIo::dense(&w, &x, &y, m);
        let t = time(ctx, &matmul_dispatches(ctx, family, &w, &io)?, 8, 3)?;
        let b = time(ctx, &baseline_dispatches(ctx, &w, &io)?, 2, 2)?;
        let kernel = if m == 1 {
            "mat-vec".to_string()
        } else {
            format!("batch (TM={})", m)
        };
        rows.push(Row {
            kernel,
            ty,
            shape: format!("[{k},{n}] x {m}"),
            t,
            rate: format!("{:.2} GB/s", wbytes / t.as_secs_f64() / 1e9),
            gbs: Some(wbytes / t.as_secs_f64() / 1e9),
            base: Some(b),
        });
    }
    let prefill_types = [
        GgmlType::F16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ];
    if !quick && prefill_types.contains(&ty) {
        let (pk, pn, m) = (1024u32, 1024u32, 512u32);
        let pbytes = random_bytes(
            ty.row_bytes(u64::from(pk)).unwrap_or(0) as usize * pn as usize,
            3,
        );
        let pw = GpuWeight::upload(ctx, "prefill", ty, [pk.into(), pn.into()], &pbytes)?;
        let io = MatmulIo::dense(&pw, &x, &y, m);
        let flops = 2.0 * f64::from(m) * f64::from(pk) * f64::from(pn);
        let base = time(ctx, &baseline_dispatches(ctx, &pw, &io)?, 1, 2)?;
        let staged = matmul_dispatches_with(ctx, family, STAGED_TM, true, &pw, &io)?;
        let staged = time(ctx, &staged, 1, 2)?;
        let flat = matmul_dispatches_with(ctx, family, 16, false, &pw, &io)?;
        let flat = time(ctx, &flat, 1, 2)?;
        let mark = |on: bool| if on == family.mm_staged { " *" } else { "" };
        let names = [
            format!("prefill staged TM=8{}", mark(true)),
            format!("prefill flat TM=16{}", mark(false)),
        ];
        for (kernel, t) in names.into_iter().zip([staged, flat]) {
            rows.push(Row {
                kernel,
                ty,
                shape: format!("[{pk},{pn}] x {m}"),
                t,
                rate: format!("{:.2} GFLOP/s", flops / t.as_secs_f64() / 1e9),
                gbs: None,
                base: Some(base),
            });
        }
    }
    Ok(())
}

fn bench_embed(ctx: &GpuContext, rows: &mut Vec<Row>) -> Result<(), GpuError> {
    // The real model's table: token_embd Q8_0 [576, 49152]; a 64-token ubatch.
    let (k, n, t) = (576u32, 49152u32, 64u32);
    let ty = GgmlType::Q8_0;
    let bytes = random_bytes(
        ty.row_bytes(u64::from(k)).unwrap_or(0) as usize * n as usize,
        5,
    );
    let w = GpuWeight::upload(ctx, "token_embd", ty, [k.into(), n.into()], &bytes)?;
    let ids: Vec<u32> = (0..t).map(|i| i * 761 % n).collect();
    let idb = create_storage_init(ctx, "ids", bytemuck::cast_slice(&ids))?;
    let out = create_storage(ctx, "out", u64::from(t * k) * 4)?;
    let tm = time(ctx, &embed_dispatches(ctx, &w, &idb, 0, t, &out, 0)?, 20, 3)?;
    let read = f64::from(t) * ty.row_bytes(u64::from(k)).unwrap_or(0) as f64;
    rows.push(Row {
        kernel: "embed gather".into(),
        ty,
        shape: format!("[{k},{n}] x {t}"),
        t: tm,
        rate: format!(
            "{:.2} GB/s",
            (read + f64::from(t * k) * 4.0) / tm.as_secs_f64() / 1e9
        ),
        gbs: None,
        base: None,
    });
    Ok(())
}

fn main() -> Result<(), GpuError> {
    let quick = std::env::args().any(|a| a == "quick");
    // Type filters: every argument but `quick` and flags (cargo passes `--bench`).
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "quick" && !a.starts_with('-'))
        .map(|a| a.to_ascii_lowercase())
        .collect();
    let picked = |name: &str| {
        let name = name.to_ascii_lowercase();
        filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
    };
    let ctx = GpuContext::new(&DeviceOptions::default())?;
    let family = Family::for_context(&ctx);
    println!(
        "adapter: {} ({}), family {family:?}",
        ctx.info().name,
        ctx.info().device_type
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    for ty in flint::kernels::matmul::SUPPORTED_TYPES {
        if ty == GgmlType::Q4_0 || picked(&type_label(ty)) {
            bench_type(&ctx, family, ty, quick, &mut rows)?;
        }
    }
    if picked("embed gather") {
        bench_embed(&ctx, &mut rows)?;
    }
    print(&rows);
    println!("(mat-vec / batch rate = repacked weight bytes / time; baseline = one invocation per");
    println!(" output, same decoders; * = the prefill path this family uses by default)");
    println!("total {:.1} s", started.elapsed().as_secs_f64());
    let errors = ctx.take_uncaptured_errors();
    if !errors.is_empty() {
        eprintln!("uncaptured wgpu errors: {errors:#?}");
        std::process::exit(1);
    }
    Ok(())
}
