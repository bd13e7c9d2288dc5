//! Matmul kernels against the CPU oracle (`flint::reference::matmul`) on the real adapter
//! (lavapipe in CI): mat-vec, small batches and prefill for every supported type over awkward
//! shapes (NMSE <= `data::MATMUL_NMSE`, set from the measured worst case), the embedding gather bit for bit, weights split
//! past a lowered binding limit, exact device sizes, typed errors. Batch invariance lives in
//! `kernels_matmul_invariance.rs`. GPU tests fail, never skip, without an adapter.

use crate::common;
use crate::data;

use common::gpu::{assert_clean, ctx, ctx_with, nmse};
use data::{assert_bits, assert_matmul_nmse, min_k, random_f32, random_weight, Rng};
use flint::gguf::GgmlType;
use flint::gpu::{DeviceOptions, GpuContext, GpuError};
use flint::kernels::matmul::{
    baseline_now, device_bytes, embed_now, matmul_now, Family, GpuWeight, SUPPORTED_TYPES,
};
use flint::reference::matmul as oracle;

fn upload(ctx: &GpuContext, ty: GgmlType, k: usize, n: usize, bytes: &[u8]) -> GpuWeight {
    GpuWeight::upload(ctx, &format!("{ty}"), ty, [k as u64, n as u64], bytes)
        .unwrap_or_else(|e| panic!("{ty} [{k}, {n}]: {e}"))
}

/// Runs `Y = X . W^T` for several M on `family` and checks each against the oracle; returns the
/// worst NMSE.
fn check_matmul(
    ctx: &GpuContext,
    family: Family,
    ty: GgmlType,
    k: usize,
    n: usize,
    ms: &[usize],
    seed: u64,
) -> f64 {
    let bytes = random_weight(ty, k, n, seed, true);
    let w = upload(ctx, ty, k, n, &bytes);
    let mut worst = 0f64;
    for &m in ms {
        let x = random_f32(m * k, seed ^ m as u64);
        let want = oracle::matmul(ty, &bytes, k, n, &x, m).unwrap();
        let got = matmul_now(ctx, family, &w, &x, m as u32).unwrap();
        let e = nmse(&got, &want);
        assert_matmul_nmse(&format!("{ty} K={k} N={n} M={m} {family:?}"), e);
        worst = worst.max(e);
    }
    worst
}

#[test]
fn every_type_matches_the_oracle_on_the_device_family() {
    let _serial = data::gpu_lock();
    let ctx = ctx();
    let family = Family::for_context(&ctx);
    eprintln!("{ctx:?}: {family:?}");
    for (i, ty) in SUPPORTED_TYPES.into_iter().enumerate() {
        let kb = min_k(ty);
        // K at the smallest block multiple with odd N; then a wider K with N not a multiple of
        // the rows per workgroup; M covers mat-vec, batches and the prefill path.
        let e1 = check_matmul(
            &ctx,
            family,
            ty,
            kb.max(32),
            67,
            &[1, 3, 16, 21],
            100 + i as u64,
        );
        let e2 = check_matmul(
            &ctx,
            family,
            ty,
            kb * 3 + kb.max(32) * 2,
            131,
            &[1, 9],
            200 + i as u64,
        );
        eprintln!("{ty}: worst NMSE {:.2e}", e1.max(e2));
    }
    assert_clean(&ctx);
}

#[test]
fn wide_families_match_the_oracle_without_f16_or_subgroups() {
    let _serial = data::gpu_lock();
    for (f16, sg) in [(false, false), (true, true)] {
        let ctx = common::gpu::ctx_features(f16, sg);
        // Without features: both shared-memory families. With f16 and subgroups: the
        // subgroup reduction (lavapipe has subgroups of 8) and the native f16 F16 decoder.
        let families = if sg {
            assert!(ctx.has_subgroups() && ctx.info().limits.min_subgroup_size >= 8);
            assert!(ctx.has_f16(), "the adapter offers shader-f16");
            vec![Family::wide(8, true)]
        } else {
            vec![Family::wide(32, false), Family::wide(8, false)]
        };
        for family in families {
            for (i, ty) in SUPPORTED_TYPES.into_iter().enumerate() {
                let k = min_k(ty).max(32) * 2;
                check_matmul(&ctx, family, ty, k, 45, &[1, 4, 19], 300 + i as u64);
            }
        }
        assert_clean(&ctx);
    }
}

#[test]
fn baseline_kernel_matches_the_oracle() {
    let _serial = data::gpu_lock();
    let ctx = ctx();
    for (i, ty) in SUPPORTED_TYPES.into_iter().enumerate() {
        let (k, n, m) = (min_k(ty).max(32) * 2, 29, 3);
        let bytes = random_weight(ty, k, n, 400 + i as u64, true);
        let w = upload(&ctx, ty, k, n, &bytes);
        let x = random_f32(m * k, 401);
        let want = oracle::matmul(ty, &bytes, k, n, &x, m).unwrap();
        let e = nmse(&baseline_now(&ctx, &w, &x, m as u32).unwrap(), &want);
        assert_matmul_nmse(&format!("{ty} baseline K={k} N={n} M={m}"), e);
    }
    assert_clean(&ctx);
}

#[test]
fn embedding_gather_is_bit_exact() {
    let _serial = data::gpu_lock();
    let ctx = ctx();
    for (i, ty) in SUPPORTED_TYPES.into_iter().enumerate() {
        let (k, n) = (min_k(ty).max(32) * 3, 50);
        // Any finite scale (subnormals included); float tables get arbitrary bit patterns,
        // NaNs with payloads included.
        let table = random_weight(ty, k, n, 500 + i as u64, false);
        let w = upload(&ctx, ty, k, n, &table);
        let mut rng = Rng(7);
        let mut ids: Vec<u32> = (0..37).map(|_| rng.below(n as u64) as u32).collect();
        ids.extend([0, n as u32 - 1, 5, 5]);
        let want = oracle::embed_rows(ty, &table, k, n, &ids).unwrap();
        let got = embed_now(&ctx, &w, &ids).unwrap();
        assert_bits(&format!("{ty} embedding"), &got, &want);
    }
    // The real model's table shape (token_embd Q8_0 [576, 49152]), a few rows.
    let (k, n) = (576, 49152);
    let table = random_weight(GgmlType::Q8_0, k, n, 9, false);
    let w = upload(&ctx, GgmlType::Q8_0, k, n, &table);
    let ids = [0u32, 1, 49151, 12345, 1];
    let want = oracle::embed_rows(GgmlType::Q8_0, &table, k, n, &ids).unwrap();
    assert_bits("token_embd", &embed_now(&ctx, &w, &ids).unwrap(), &want);
    assert_clean(&ctx);
}

#[test]
fn weights_split_past_a_16_mib_binding_limit() {
    let _serial = data::gpu_lock();
    let ctx = ctx_with(DeviceOptions {
        max_storage_binding_override: Some(16 << 20),
        ..DeviceOptions::default()
    });
    let family = Family::for_context(&ctx);
    // F16 [1024, 8400]: 17.2 MB, two splits.
    let (ty, k, n) = (GgmlType::F16, 1024, 8400);
    let bytes = random_weight(ty, k, n, 11, true);
    let w = upload(&ctx, ty, k, n, &bytes);
    assert_eq!(w.splits.len(), 2);
    assert!(w.splits.iter().all(|s| s.buffer.size() <= 16 << 20));
    // What wgpu created: the F16 bytes of the file, rows × row bytes, nothing more.
    let created: u64 = w.splits.iter().map(|s| s.buffer.size()).sum();
    assert_eq!(created, (n * k * 2) as u64);
    assert_eq!(w.buffer_bytes(), created);
    for m in [1usize, 3, 18] {
        let x = random_f32(m * k, 12);
        let want = oracle::matmul(ty, &bytes, k, n, &x, m).unwrap();
        let e = nmse(&matmul_now(&ctx, family, &w, &x, m as u32).unwrap(), &want);
        assert_matmul_nmse(&format!("F16 split K={k} N={n} M={m}"), e);
    }
    let ids = [0u32, 4199, 4200, 8399, 6000];
    let want = oracle::embed_rows(ty, &bytes, k, n, &ids).unwrap();
    assert_bits(
        "split embedding",
        &embed_now(&ctx, &w, &ids).unwrap(),
        &want,
    );
    assert_clean(&ctx);
}

#[test]
fn every_type_splits_past_a_small_binding_limit_with_the_same_bits() {
    let _serial = data::gpu_lock();
    let small = ctx_with(DeviceOptions {
        max_storage_binding_override: Some(64 << 10),
        ..DeviceOptions::default()
    });
    let whole = ctx();
    let family = Family::for_context(&whole);
    assert_eq!(family, Family::for_context(&small));
    for (i, ty) in SUPPORTED_TYPES.into_iter().enumerate() {
        let k = min_k(ty).max(32) * 4;
        let n = 160_000 / (k * ty.type_size() / ty.block_size()) + 3;
        let bytes = random_weight(ty, k, n, 600 + i as u64, true);
        let ws = upload(&small, ty, k, n, &bytes);
        let ww = upload(&whole, ty, k, n, &bytes);
        assert!(ws.splits.len() >= 3, "{ty}: {} splits", ws.splits.len());
        // What wgpu created holds the weight's bytes in the file, rows × row bytes, plus at
        // most the alignment padding of each split (planes start on 16 bytes, a split ends on
        // 32: under 3 × 16 + 32 bytes a split) and, for the lattice i-quants, their grid once
        // per split.
        let (block, size) = ty.block_layout();
        let file_bytes = (n * (k / block * size)) as u64;
        let created: u64 = ws.splits.iter().map(|s| s.buffer.size()).sum();
        let grid = flint::quant::grid_len(ty) as u64;
        let slack = ws.splits.len() as u64 * (3 * 16 + 32 + grid);
        assert!(
            created >= file_bytes && created - file_bytes < slack,
            "{ty}: {created} device bytes for {file_bytes} in the file, {} splits",
            ws.splits.len()
        );
        assert_eq!(
            ws.device_bytes(),
            device_bytes(ty, [k as u64, n as u64], small.limits()).unwrap()
        );
        for m in [1usize, 5] {
            let x = random_f32(m * k, 601);
            let got = matmul_now(&small, family, &ws, &x, m as u32).unwrap();
            let want = matmul_now(&whole, family, &ww, &x, m as u32).unwrap();
            assert_bits(&format!("{ty} M={m} split vs whole"), &got, &want);
            let e = nmse(&got, &oracle::matmul(ty, &bytes, k, n, &x, m).unwrap());
            assert_matmul_nmse(&format!("{ty} small splits K={k} N={n} M={m}"), e);
        }
        let ids = [0u32, n as u32 - 1, n as u32 / 2];
        let want = oracle::embed_rows(ty, &bytes, k, n, &ids).unwrap();
        assert_bits(
            &format!("{ty} split embedding"),
            &embed_now(&small, &ws, &ids).unwrap(),
            &want,
        );
    }
    assert_clean(&small);
    assert_clean(&whole);
}

#[test]
fn bad_inputs_are_typed_errors() {
    let _serial = data::gpu_lock();
    let ctx = ctx();
    let family = Family::for_context(&ctx);
    let bytes = random_weight(GgmlType::Q8_0, 64, 4, 1, true);
    let short = GpuWeight::upload(&ctx, "short", GgmlType::Q8_0, [64, 4], &bytes[1..]);
    assert!(matches!(short, Err(GpuError::BadInput { .. })), "{short:?}");
    let ragged = GpuWeight::upload(&ctx, "ragged", GgmlType::Q4_K, [288, 1], &[0; 162]);
    assert!(
        matches!(ragged, Err(GpuError::BadInput { .. })),
        "{ragged:?}"
    );
    let unsupported = GpuWeight::upload(&ctx, "nvfp4", GgmlType::NVFP4, [64, 1], &[0; 36]);
    assert!(
        matches!(unsupported, Err(GpuError::UnsupportedType { .. })),
        "{unsupported:?}"
    );
    let w = upload(&ctx, GgmlType::Q8_0, 64, 4, &bytes);
    let r = matmul_now(&ctx, family, &w, &[0.0; 63], 1);
    assert!(matches!(r, Err(GpuError::BadInput { .. })), "{r:?}");
    let r = embed_now(&ctx, &w, &[4]);
    assert!(matches!(r, Err(GpuError::BadInput { .. })), "{r:?}");
    assert!(matmul_now(&ctx, family, &w, &[], 0).unwrap().is_empty());
    // A row larger than the binding limit cannot be split.
    let tiny = ctx_with(DeviceOptions {
        max_storage_binding_override: Some(1024),
        ..DeviceOptions::default()
    });
    let big = random_weight(GgmlType::F32, 512, 2, 2, true);
    let r = GpuWeight::upload(&tiny, "wide row", GgmlType::F32, [512, 2], &big);
    assert!(matches!(r, Err(GpuError::BufferTooLarge { .. })), "{r:?}");
    assert_clean(&ctx);
    assert_clean(&tiny);
}
