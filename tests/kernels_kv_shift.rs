//! Moving KV cache rows to new positions (`kernels::attention::shift`): K rows rotated by the
//! move, V rows copied, in every cache type and both RoPE pairings.
//!
//! Rows stored for positions `p` (RoPE applied by the CPU oracle, then the cache's rounding) move
//! from rows 24..40 to rows 0..16 (a move of −24, the chunks overlapping nothing they still need
//! to read). Held to: V rows bit for bit; K rows against the oracle rotating the decoded stored
//! row by −24 in f64, then rounded as the cache rounds: f16 rows equal except where the f64
//! value lies within 1e-6 of a rounding boundary (measured: every element equal); q8_0 / q4_0
//! rows within one quantization step of their block. And against a row computed afresh for its
//! new position: f16 within 2 ulps of the element's RoPE pair norm (two roundings; measured
//! worst 0.84).

use crate::common;

use flint::gpu::buffers::read_back;
use flint::kernels::attention::{
    create_cache, store_rows_now, KvLayout, KvShift, KvType, Rotation,
};
use flint::kernels::ops::rope::{rope_table, RopeConfig, RopeMode};
use flint::quant;
use flint::reference::ops::{rope, RopeRef};

const N_KV: u32 = 2;
const HEAD: u32 = 64;
const N_ROT: u32 = 32;

/// Every cache row `0..n_rows` decoded to f32 `[n_rows, N_KV·HEAD]`.
fn decode(
    ctx: &flint::gpu::GpuContext,
    layout: &KvLayout,
    cache: &wgpu::Buffer,
    n_rows: u32,
) -> Vec<f32> {
    let row_bytes = layout.ty.row_bytes(HEAD) as usize;
    let bytes = read_back(ctx, cache, 0, layout.buffer_bytes()).unwrap();
    let mut out = Vec::new();
    for r in 0..(n_rows * N_KV) as usize {
        let ggml = layout
            .ty
            .unpack_row(HEAD, &bytes[r * row_bytes..(r + 1) * row_bytes])
            .unwrap();
        out.extend(quant::dequantize(layout.ty.ggml_type(), &ggml, HEAD as usize).unwrap());
    }
    out
}

/// The other element of element `i`'s RoPE pair (itself past the rotated dims).
fn partner(i: usize) -> usize {
    let (head, j) = (i / HEAD as usize * HEAD as usize, i % HEAD as usize);
    let half = N_ROT as usize / 2;
    match j {
        j if j >= N_ROT as usize => i,
        j if NEOX.with(|n| n.get()) => head + if j < half { j + half } else { j - half },
        j => head + (j ^ 1),
    }
}

thread_local! {
    static NEOX: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn f16_round(x: f64) -> f32 {
    half::f16::from_f64(x).to_f32()
}

fn check(ty: KvType, mode: RopeMode) {
    let ctx = common::gpu::ctx();
    let what = format!("{ty:?} {mode:?}");
    NEOX.with(|n| n.set(mode == RopeMode::Neox));
    let n_ctx = 64;
    let layout = KvLayout::new(ty, n_ctx, N_KV, HEAD).unwrap();
    let (kc, vc) = (
        create_cache(&ctx, "k", &layout).unwrap(),
        create_cache(&ctx, "v", &layout).unwrap(),
    );
    let width = (N_KV * HEAD) as usize;
    let mut rng = common::Rng::new(17);
    let x: Vec<f32> = (0..40 * width).map(|_| rng.f32()).collect();
    let cfg = RopeRef {
        n_rot: N_ROT as usize,
        neox: mode == RopeMode::Neox,
        freq_base: 10000.0,
        freq_scale: 1.0,
    };
    let pos: Vec<i32> = (0..40).collect();
    let k = rope(&x, &pos, N_KV as usize, HEAD as usize, &cfg, None);
    let positions: Vec<u32> = (0..40).collect();
    store_rows_now(&ctx, &layout, &kc, &k, &positions).unwrap();
    store_rows_now(&ctx, &layout, &vc, &x, &positions).unwrap();
    let stored_k = decode(&ctx, &layout, &kc, 40);
    let stored_v = decode(&ctx, &layout, &vc, 40);
    let gpu_cfg = RopeConfig {
        n_rot: N_ROT,
        mode,
        freq_base: 10000.0,
        freq_scale: 1.0,
    };
    let table = rope_table(&gpu_cfg, None, None).unwrap();
    let freqs = common::gpu::upload_f32(&ctx, "freqs", &table);
    let scratch = common::gpu::zeros_f32(&ctx, "scratch", 16 * width);
    let rot = Rotation {
        n_rot: N_ROT,
        mode,
        freqs: &freqs,
    };
    let dst: Vec<u32> = (0..16).collect();
    let pos_buf = common::gpu::upload_bytes(&ctx, "positions", bytemuck::cast_slice(&dst));
    let mut sk = KvShift::new(&ctx, layout, &kc, &scratch, &pos_buf, Some(rot), 16).unwrap();
    let mut sv = KvShift::new(&ctx, layout, &vc, &scratch, &pos_buf, None, 16).unwrap();
    sk.set(&ctx, 24, 0, 16).unwrap();
    sv.set(&ctx, 24, 0, 16).unwrap();
    let list: Vec<_> = sk.dispatches().into_iter().chain(sv.dispatches()).collect();
    flint::kernels::launch::submit(&ctx, "shift", &list).unwrap();
    let moved_k = decode(&ctx, &layout, &kc, 16);
    let moved_v = decode(&ctx, &layout, &vc, 16);
    assert_eq!(
        moved_v,
        stored_v[24 * width..],
        "{what}: V rows move bit for bit"
    );
    // The oracle: the decoded stored rows 24..40 rotated by −24 in f64.
    let src = &stored_k[24 * width..];
    let back: Vec<i32> = vec![-24; 16];
    let src64: Vec<f32> = src.to_vec();
    let want = rope(&src64, &back, N_KV as usize, HEAD as usize, &cfg, None);
    let fresh = &rope(
        &x[24 * width..],
        &(0..16).collect::<Vec<i32>>(),
        N_KV as usize,
        HEAD as usize,
        &cfg,
        None,
    );
    let (mut worst_ulp, mut off) = (0f32, 0usize);
    for (i, (&g, &w)) in moved_k.iter().zip(&want).enumerate() {
        match ty {
            KvType::F16 => {
                let r = f16_round(f64::from(w));
                if g != r {
                    off += 1;
                    let ulp = (half::f16::from_f32(r.abs()).to_f32() * 2f32.powi(-10)).max(6e-8);
                    assert!((g - r).abs() <= ulp, "{what} element {i}: {g} vs {r}");
                }
                // A rotated element carries its pair's rounding: ulps of the pair's norm.
                let partner = partner(i);
                let norm = fresh[i].hypot(fresh[partner]);
                let ulp = (norm * 2f32.powi(-10)).max(6e-8);
                worst_ulp = worst_ulp.max((g - fresh[i]).abs() / ulp);
            }
            _ => {
                // One quantization step of the element's block (max |x| / 127 or / 8).
                let b = i / 32 * 32;
                let amax = want[b..b + 32].iter().fold(0f32, |m, v| m.max(v.abs()));
                let step = if ty == KvType::Q8_0 {
                    amax / 127.0
                } else {
                    amax / 8.0
                };
                assert!(
                    (g - w).abs() <= step * 1.01 + 1e-6,
                    "{what} element {i}: {g} vs {w}"
                );
            }
        }
    }
    if ty == KvType::F16 {
        eprintln!("{what}: {off} elements off the rounded oracle, worst {worst_ulp:.2} ulp from a fresh row");
        assert!(off * 1000 <= moved_k.len(), "{what}: {off} elements differ");
        assert!(
            worst_ulp <= 2.0,
            "{what}: {worst_ulp} ulps from a fresh row"
        );
    }
    common::gpu::assert_clean(&ctx);
}

#[test]
fn rows_move_with_their_rotation_in_every_cache_type() {
    for ty in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            check(ty, mode);
        }
    }
}
