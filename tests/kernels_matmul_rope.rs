//! The RoPE + KV store epilogue of the split output (`SplitOut::rope`, `ROPE` in
//! `matmul_rows.wgsl`): one dispatch over a stacked q | k | v weight that rotates q and stores
//! k and v in f16 caches must give the bits of the split output followed by the fused RoPE + KV
//! store op (`RopeKv`), on every CPU-driver family (X in uniform windows or shared by
//! subgroups), for a mat-vec, a verify-sized batch and a batch that needs three X windows,
//! with partial rotary dims, V heads narrower than K heads, a partial last workgroup (672 rows)
//! and a position past the cache (neither path stores it), with a plain RoPE table and a YaRN
//! one (x4 from an original context of 16; its cos/sin scale is not 1). Bad shapes and NEOX
//! pairs are typed errors.

use crate::common;
use crate::data;

use common::gpu::{assert_bits_eq, assert_clean, ctx_features, read_f32, upload_bytes, upload_f32};
use data::{random_f32, random_weight};
use flint::gguf::GgmlType;
use flint::gpu::GpuContext;
use flint::kernels::attention::{KvLayout, KvType, RopeKv, RopeKvIo};
use flint::kernels::launch::submit;
use flint::kernels::matmul::{
    matmul_dispatches, Family, GpuWeight, MatmulIo, SplitOut, SplitRope, SERIAL_INT64,
    SERIAL_INT64_BCAST,
};
use flint::kernels::ops::rope::{rope_table, RopeConfig, RopeMode, RopeYarn};

/// Query heads, KV heads, head dims of q and k and of v, rotated dims, cache rows and K
/// (SmolLM2's width: 64 columns need three 64 KiB X windows on `Family::SERIAL`). The stacked
/// weight has 384 + 192 + 96 = 672 rows: its last 64-row workgroup is half empty.
const N_HEAD: u32 = 6;
const N_KV: u32 = 3;
const HEAD_DIM: u32 = 64;
const HEAD_DIM_V: u32 = 32;
const N_ROT: u32 = 48;
const N_CTX: u32 = 80;
const K: usize = 576;

struct Bufs {
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    positions: wgpu::Buffer,
    freqs: wgpu::Buffer,
    k_cache: wgpu::Buffer,
    v_cache: wgpu::Buffer,
    /// K and V cache layouts.
    layouts: [KvLayout; 2],
    cfg: RopeConfig,
}

/// YaRN x4 from an original context of 16 tokens (the caches hold 80).
const YARN: RopeYarn = RopeYarn {
    n_ctx_orig: 16,
    ext_factor: 1.0,
    attn_factor: 1.0,
    beta_fast: 32.0,
    beta_slow: 1.0,
};

fn bufs(ctx: &GpuContext, m: usize, yarn: bool) -> Bufs {
    let cfg = RopeConfig {
        n_rot: N_ROT,
        mode: RopeMode::Normal,
        freq_base: 10000.0,
        freq_scale: if yarn { 0.25 } else { 1.0 },
    };
    let table = rope_table(&cfg, yarn.then_some(&YARN), None).unwrap();
    // Scattered positions; with several tokens the last one is past the cache.
    let mut positions: Vec<u32> = (0..m as u32).map(|i| (i * 7 + 3) % N_CTX).collect();
    if let (Some(last), true) = (positions.last_mut(), m > 1) {
        *last = N_CTX + 2;
    }
    let layouts =
        [HEAD_DIM, HEAD_DIM_V].map(|d| KvLayout::new(KvType::F16, N_CTX, N_KV, d).unwrap());
    // Caches start with the same random words on both paths: untouched rows must stay so.
    let [kc, vc] = layouts.map(|l| random_f32((l.buffer_bytes() / 4) as usize, 99));
    Bufs {
        q: upload_f32(ctx, "q", &vec![0.0; m * (N_HEAD * HEAD_DIM) as usize]),
        k: upload_f32(ctx, "k", &vec![0.0; m * (N_KV * HEAD_DIM) as usize]),
        v: upload_f32(ctx, "v", &vec![0.0; m * (N_KV * HEAD_DIM_V) as usize]),
        positions: upload_bytes(ctx, "positions", bytemuck::cast_slice(&positions)),
        freqs: upload_f32(ctx, "freqs", &table),
        k_cache: upload_f32(ctx, "k cache", &kc),
        v_cache: upload_f32(ctx, "v cache", &vc),
        layouts,
        cfg,
    }
}

/// The fused RoPE + KV store op over `b`, set for `m` tokens.
fn rope_kv(ctx: &GpuContext, b: &Bufs, m: u32) -> RopeKv {
    let io = RopeKvIo {
        q: &b.q,
        k: &b.k,
        v: &b.v,
        positions: &b.positions,
        freqs: &b.freqs,
        k_cache: &b.k_cache,
        v_cache: &b.v_cache,
    };
    RopeKv::new(ctx, io, N_HEAD, [&b.layouts[0], &b.layouts[1]], &b.cfg, m).unwrap()
}

/// The split output's RoPE epilogue doing `op`'s work over `b`.
fn split_rope<'a>(b: &'a Bufs, op: &'a RopeKv) -> SplitRope<'a> {
    SplitRope {
        shape: op.params(),
        mode: op.mode(),
        uniform: op.uniform().unwrap(),
        positions: &b.positions,
        freqs: &b.freqs,
        k_cache: &b.k_cache,
        v_cache: &b.v_cache,
    }
}

/// (q, K cache, V cache) after the q | k | v matmul of `x` [m, K]: with the RoPE epilogue, or
/// the split output then `RopeKv`.
fn run(
    ctx: &GpuContext,
    family: Family,
    w: &GpuWeight,
    x: &[f32],
    m: usize,
    epilogue: bool,
    yarn: bool,
) -> [Vec<f32>; 3] {
    let b = bufs(ctx, m, yarn);
    let xb = upload_f32(ctx, "x", x);
    let op = rope_kv(ctx, &b, m as u32);
    let rope = split_rope(&b, &op);
    let split = SplitOut {
        y2: &b.k,
        y3: &b.v,
        split1: N_HEAD * HEAD_DIM,
        split2: (N_HEAD + N_KV) * HEAD_DIM,
        rope: epilogue.then_some(rope),
    };
    let io = MatmulIo {
        split: Some(split),
        ..MatmulIo::dense(w, &xb, &b.q, m as u32)
    };
    let list = matmul_dispatches(ctx, family, w, &io).unwrap();
    let mut all: Vec<_> = list.iter().collect();
    if !epilogue {
        all.push(&op.dispatch);
    }
    submit(ctx, "q | k | v", &all).unwrap();
    let [kw, vw] = b.layouts.map(|l| (l.buffer_bytes() / 4) as usize);
    [
        read_f32(ctx, &b.q, m * (N_HEAD * HEAD_DIM) as usize),
        read_f32(ctx, &b.k_cache, kw),
        read_f32(ctx, &b.v_cache, vw),
    ]
}

fn stacked_weight(ctx: &GpuContext) -> GpuWeight {
    let n = ((N_HEAD + N_KV) * HEAD_DIM + N_KV * HEAD_DIM_V) as usize;
    let bytes = random_weight(GgmlType::Q4_1, K, n, 17, true);
    GpuWeight::upload(ctx, "qkv", GgmlType::Q4_1, [K as u64, n as u64], &bytes).unwrap()
}

#[test]
fn rope_epilogue_matches_split_output_then_rope_kv_bit_for_bit() {
    let _serial = data::gpu_lock();
    let ctx = ctx_features(true, true);
    let w = stacked_weight(&ctx);
    let x = random_f32(64 * K, 23);
    for family in [Family::SERIAL, SERIAL_INT64, SERIAL_INT64_BCAST] {
        for (m, yarn) in [
            (1, false),
            (8, false),
            (64, false),
            (1, true),
            (8, true),
            (64, true),
        ] {
            let xm = &x[..m * K];
            let got = run(&ctx, family, &w, xm, m, true, yarn);
            let want = run(&ctx, family, &w, xm, m, false, yarn);
            for (what, g, e) in [
                ("q", &got[0], &want[0]),
                ("K cache", &got[1], &want[1]),
                ("V cache", &got[2], &want[2]),
            ] {
                assert_bits_eq(&format!("{what}, {family:?}, M={m}, yarn {yarn}"), g, e);
            }
            // The paths did work: q is rotated (not the zeros it started as).
            assert!(
                got[0].iter().any(|v| *v != 0.0),
                "{family:?} M={m}: q untouched"
            );
        }
    }
    assert_clean(&ctx);
}

#[test]
fn bad_rope_epilogue_shapes_are_typed_errors() {
    let _serial = data::gpu_lock();
    let ctx = ctx_features(true, true);
    let w = stacked_weight(&ctx);
    let b = bufs(&ctx, 2, false);
    let xb = upload_f32(&ctx, "x", &random_f32(2 * K, 5));
    let op = rope_kv(&ctx, &b, 2);
    let rope = split_rope(&b, &op);
    let run = |split1: u32, split2: u32, rope: SplitRope<'_>| {
        let io = MatmulIo {
            split: Some(SplitOut {
                y2: &b.k,
                y3: &b.v,
                split1,
                split2,
                rope: Some(rope),
            }),
            ..MatmulIo::dense(&w, &xb, &b.q, 2)
        };
        matmul_dispatches(&ctx, SERIAL_INT64_BCAST, &w, &io)
    };
    let (q_rows, k_rows) = (N_HEAD * HEAD_DIM, N_KV * HEAD_DIM);
    // Parts that are not whole heads.
    let err = run(q_rows - 2, q_rows + k_rows, rope).unwrap_err();
    assert!(err.to_string().contains("q | k | v rows"), "{err}");
    // NEOX pairs (dims i and i + n_rot / 2) are not the epilogue's.
    let neox = SplitRope {
        mode: RopeMode::Neox,
        ..rope
    };
    let err = run(q_rows, q_rows + k_rows, neox).unwrap_err();
    assert!(err.to_string().contains("normal pairs"), "{err}");
    // A cache too small for its rows.
    let small = upload_f32(&ctx, "small", &[0.0; 8]);
    let err = run(
        q_rows,
        q_rows + k_rows,
        SplitRope {
            k_cache: &small,
            ..rope
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("K cache"), "{err}");
    assert!(run(q_rows, q_rows + k_rows, rope).is_ok());
    assert_clean(&ctx);
}
