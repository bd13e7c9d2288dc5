//! Batch invariance of the matmul kernels, bit for bit (design principle 3: lossless
//! speculative decoding). For every type and kernel family, a row of Y computed alone (mat-vec,
//! M = 1), inside a small batch (M = 2, 5, 8, 16) or inside a prefill tile (M = 17, 64, 512)
//! must have identical bits; so must the staged and unstaged prefill paths, and the subgroup and
//! workgroup-memory reductions of the same lane count (for the SERIAL family the staged path is
//! matmul.wgsl and the others matmul_rows.wgsl for the block formats, so the two shaders must
//! agree bit for bit). The M = 512 result is also checked
//! against the CPU oracle, so a kernel that is invariant but wrong still fails.

use crate::common;
use crate::data;

use common::gpu::{assert_clean, ctx_features, nmse, read_f32, upload_f32, zeros_f32};
use data::{assert_bits, assert_matmul_nmse, min_k, random_f32, random_weight};
use flint::gguf::GgmlType;
use flint::gpu::GpuContext;
use flint::kernels::launch::submit;
use flint::kernels::matmul::{
    glu_epilogue, matmul_dispatches, matmul_now, matmul_now_with, Family, GpuWeight, MatmulIo,
    SERIAL_INT64, SERIAL_INT64_BCAST, STAGED_TM, SUPPORTED_TYPES,
};
use flint::kernels::ops::glu::{glu_on_gpu, Glu};
use flint::reference::matmul as oracle;

/// Rows of X whose outputs are compared across every M (they are in every batch).
const PROBE_ROWS: usize = 2;
const MS: [usize; 8] = [2, 4, 5, 8, 16, 17, 64, 512];

/// Checks one (family, type) and returns the M = 512 output.
fn check_type(ctx: &GpuContext, family: Family, ty: GgmlType, seed: u64) -> Vec<f32> {
    // N = 37: odd and not a multiple of any rows-per-workgroup; K spans several units per lane.
    let (k, n) = (min_k(ty).max(32) * 2 + min_k(ty).max(64) * 2, 37);
    let bytes = random_weight(ty, k, n, seed, true);
    let w = GpuWeight::upload(ctx, "w", ty, [k as u64, n as u64], &bytes).unwrap();
    let x = random_f32(512 * k, seed + 1);
    let what = |m: usize| format!("{ty} {family:?} M={m}");

    // Each probe row alone: the mat-vec path.
    let alone: Vec<Vec<f32>> = (0..PROBE_ROWS)
        .map(|r| matmul_now(ctx, family, &w, &x[r * k..(r + 1) * k], 1).unwrap())
        .collect();
    let mut prev: Option<Vec<f32>> = None;
    for m in MS {
        let y = matmul_now(ctx, family, &w, &x[..m * k], m as u32).unwrap();
        for (r, a) in alone.iter().enumerate() {
            assert_bits(
                &format!("{} row {r} vs alone", what(m)),
                &y[r * n..(r + 1) * n],
                a,
            );
        }
        // Every row shared with the previous batch size.
        if let Some(p) = &prev {
            let shared = p.len().min(y.len());
            assert_bits(
                &format!("{} vs smaller M", what(m)),
                &y[..shared],
                &p[..shared],
            );
        }
        prev = Some(y);
    }
    let y512 = prev.unwrap_or_default();
    // Both prefill paths over 64 rows, whichever the family uses by default: X staged through
    // workgroup memory (8-column tiles) and the unstaged 16-column tile.
    for (tm, staged) in [(STAGED_TM, true), (16, false)] {
        let y64 = matmul_now_with(ctx, family, tm, staged, &w, &x[..64 * k], 64).unwrap();
        let label = format!("{} TM={tm} staged={staged}", what(64));
        assert_bits(&label, &y64, &y512[..64 * n]);
    }
    let want = oracle::matmul(ty, &bytes, k, n, &x, 512).unwrap();
    let e = nmse(&y512, &want);
    assert_matmul_nmse(&format!("{} K={k} N={n}", what(512)), e);
    y512
}

fn check_family(ctx: &GpuContext, family: Family) -> Vec<Vec<f32>> {
    let out = SUPPORTED_TYPES
        .into_iter()
        .enumerate()
        .map(|(i, ty)| check_type(ctx, family, ty, 1000 + i as u64))
        .collect();
    assert_clean(ctx);
    out
}

#[test]
fn serial_family_is_batch_invariant() {
    let _serial = data::gpu_lock();
    check_family(&ctx_features(true, true), Family::SERIAL);
}

#[test]
fn serial_family_with_64_bit_loads_is_invariant_and_agrees_bit_for_bit() {
    let _serial = data::gpu_lock();
    let ctx = ctx_features(true, true);
    assert!(ctx.has_int64(), "lavapipe offers SHADER_INT64");
    let wide = check_family(&ctx, SERIAL_INT64);
    let narrow = check_family(&ctx, Family::SERIAL);
    for ((ty, a), b) in SUPPORTED_TYPES.iter().zip(&wide).zip(&narrow) {
        assert_bits(&format!("{ty}: 64-bit vs 32-bit loads"), a, b);
    }
}

/// X shared across the subgroup by broadcast (`X_BCAST`, lavapipe's subgroups of 8): batch
/// invariant, and the bits of the per-invocation X loads.
#[test]
fn serial_family_with_broadcast_x_is_invariant_and_agrees_bit_for_bit() {
    let _serial = data::gpu_lock();
    let ctx = ctx_features(true, true);
    assert!(ctx.has_subgroups(), "lavapipe offers subgroups");
    let shared = check_family(&ctx, SERIAL_INT64_BCAST);
    let own = check_family(&ctx, SERIAL_INT64);
    for ((ty, a), b) in SUPPORTED_TYPES.iter().zip(&shared).zip(&own) {
        assert_bits(&format!("{ty}: broadcast vs own X loads"), a, b);
    }
}

/// Rows of an odd block count take the unpaired 64-bit loads (no `PAIRS`): the same bits as the
/// 32-bit loads for every block format, alone and in batches.
#[test]
fn serial_64_bit_loads_of_odd_block_rows_agree_bit_for_bit() {
    let _serial = data::gpu_lock();
    let ctx = ctx_features(true, true);
    let (k, n) = (5 * 32, 37);
    for (i, ty) in SUPPORTED_TYPES.into_iter().enumerate() {
        if !matches!(
            ty,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0
        ) {
            continue;
        }
        let bytes = random_weight(ty, k, n, 500 + i as u64, true);
        let w = GpuWeight::upload(&ctx, "w", ty, [k as u64, n as u64], &bytes).unwrap();
        let x = random_f32(64 * k, 600 + i as u64);
        for m in [1, 2, 5, 64] {
            let xm = &x[..m * k];
            let narrow = matmul_now(&ctx, Family::SERIAL, &w, xm, m as u32).unwrap();
            for family in [SERIAL_INT64, SERIAL_INT64_BCAST] {
                let wide = matmul_now(&ctx, family, &w, xm, m as u32).unwrap();
                assert_bits(
                    &format!("{ty} K={k} M={m}: {family:?} vs 32-bit"),
                    &wide,
                    &narrow,
                );
            }
        }
    }
    assert_clean(&ctx);
}

/// The GLU epilogue of `matmul_rows.wgsl` (up projection writing act(gate) * up) gives the bits
/// of the matmul followed by `glu.wgsl`, for every block format, paired and unpaired rows,
/// mat-vec and batches, both activations.
#[test]
fn glu_epilogue_matches_matmul_then_glu_bit_for_bit() {
    let _serial = data::gpu_lock();
    let ctx = ctx_features(true, true);
    let n = 37;
    for (i, ty) in SUPPORTED_TYPES.into_iter().enumerate() {
        // (The 32-bit SERIAL variants give the bits of these: tests above.)
        for family in [SERIAL_INT64, SERIAL_INT64_BCAST] {
            if !glu_epilogue(family, ty) {
                continue;
            }
            for k in [160, 192] {
                let bytes = random_weight(ty, k, n, 700 + i as u64, true);
                let w = GpuWeight::upload(&ctx, "up", ty, [k as u64, n as u64], &bytes).unwrap();
                let x = random_f32(64 * k, 800 + i as u64);
                for m in [1, 5, 64] {
                    let gate = random_f32(m * n, 900 + m as u64);
                    let up = matmul_now(&ctx, family, &w, &x[..m * k], m as u32).unwrap();
                    for kind in [Glu::Swiglu, Glu::Geglu] {
                        let want = glu_on_gpu(&ctx, kind, &gate, &up).unwrap();
                        let got = epilogue_now(&ctx, family, &w, &x[..m * k], &gate, kind, m);
                        let what = format!("{ty} {family:?} K={k} M={m} {kind:?}");
                        assert_bits(&what, &got, &want);
                    }
                }
            }
        }
    }
    assert_clean(&ctx);
}

/// act(gate) * (X . W^T) through the epilogue, now.
fn epilogue_now(
    ctx: &GpuContext,
    family: Family,
    w: &GpuWeight,
    x: &[f32],
    gate: &[f32],
    kind: Glu,
    m: usize,
) -> Vec<f32> {
    let xb = upload_f32(ctx, "x", x);
    let gb = upload_f32(ctx, "gate", gate);
    let yb = zeros_f32(ctx, "y", gate.len());
    let io = MatmulIo {
        gate: Some((kind, &gb)),
        ..MatmulIo::dense(w, &xb, &yb, m as u32)
    };
    let list = matmul_dispatches(ctx, family, w, &io).unwrap();
    submit(ctx, "glu epilogue", &list.iter().collect::<Vec<_>>()).unwrap();
    read_f32(ctx, &yb, gate.len())
}

#[test]
fn serial_family_without_f16_is_batch_invariant() {
    let _serial = data::gpu_lock();
    // F16 weights decode without shader-f16 here; the other types do not use f16.
    let ctx = ctx_features(false, false);
    let ty = GgmlType::F16;
    check_type(&ctx, Family::SERIAL, ty, 77);
    assert_clean(&ctx);
}

#[test]
fn eight_lane_families_are_invariant_and_agree_bit_for_bit() {
    let _serial = data::gpu_lock();
    let ctx = ctx_features(true, true);
    assert!(ctx.has_subgroups() && ctx.info().limits.min_subgroup_size >= 8);
    let shuffled = check_family(&ctx, Family::wide(8, true));
    let shared = check_family(&ctx, Family::wide(8, false));
    for ((ty, a), b) in SUPPORTED_TYPES.iter().zip(&shuffled).zip(&shared) {
        assert_bits(&format!("{ty}: subgroup vs shared reduction"), a, b);
    }
}

#[test]
fn thirty_two_lane_family_is_batch_invariant() {
    let _serial = data::gpu_lock();
    check_family(&ctx_features(false, false), Family::wide(32, false));
}
