//! Negative controls of the matmul bound (`data::MATMUL_NMSE`): a weight given to the kernel
//! with one deliberate defect must fail the check the matmul tests apply, on every kernel
//! family the adapter offers, for every supported type, mat-vec and prefill alike. Defects:
//! - a dropped block (one block of one row zeroed, as a kernel that skips a block reads it);
//! - a transposed tile (one block column's two rows exchanged, as a wrong row stride reads it);
//! - one quant off by one (a single weight decoded one step off).
//!
//! Each defect is placed where it moves the oracle's product by at least 100x the bound (so it
//! is real), then the kernel's output on the defective weight is compared with the oracle on
//! the intact one. The
//! test prints every figure next to the old bound (5e-4): the single-quant defect and, at
//! the larger K, the dropped block stay under it, which is why the bound was tightened.

use crate::common;
use crate::data;

use common::gpu::{assert_clean, ctx, ctx_features, nmse};
use data::{min_k, random_f32, random_weight, MATMUL_NMSE};
use flint::gguf::GgmlType;
use flint::gpu::GpuContext;
use flint::kernels::matmul::{matmul_now, Family, GpuWeight, SUPPORTED_TYPES};
use flint::reference::matmul as oracle;

/// The bound the matmul tests used before it came from a measurement.
const OLD_BOUND: f64 = 5e-4;

#[derive(Debug, Clone, Copy)]
enum Defect {
    DroppedBlock,
    TransposedTile,
    QuantOffByOne,
}

/// Bytes of one block (floats: 32 elements) and elements per block of `ty`.
fn block_geometry(ty: GgmlType) -> (usize, usize) {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => (32 * ty.type_size(), 32),
        _ => {
            let (elems, bytes) = ty.block_layout();
            (bytes, elems)
        }
    }
}

/// `bytes` of a `[k, n]` weight with `defect` applied to block `b` of row `r` (and row `r + 1`
/// for the tile).
fn inject(ty: GgmlType, bytes: &[u8], k: usize, defect: Defect, r: usize, b: usize) -> Vec<u8> {
    let (size, elems) = block_geometry(ty);
    let row_bytes = k / elems * size;
    let at = |row: usize| row * row_bytes + b * size;
    let mut out = bytes.to_vec();
    match defect {
        Defect::DroppedBlock => out[at(r)..at(r) + size].fill(0),
        Defect::TransposedTile => {
            let (lo, hi) = out.split_at_mut(at(r + 1));
            lo[at(r)..at(r) + size].swap_with_slice(&mut hi[..size]);
        }
        Defect::QuantOffByOne => match ty {
            // One element's sign bit (the top bit of its last byte).
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
                out[at(r) + ty.type_size() - 1] ^= 0x80;
            }
            // The middle byte of every block format lies in its quants (checked per layout:
            // Q2_K qs 16..80 of 84, Q3_K qs 32..96 of 110, Q6_K ql 0..128 of 210, Q5_K qs
            // 48..176 of 176, the legacy formats' qs after their scales; Q1_0 and Q2_0 byte 9
            // of qs 2..18, Q2_0_G128 / PQ2_0 byte 17 of qs 2..34, TQ1_0 byte 27 of qs 0..48,
            // TQ2_0 byte 33 of qs 0..64; IQ4_NL byte 9, IQ4_XS byte 68, MXFP4 byte 8: one
            // codebook nibble; the lattice i-quants: a sign bit (IQ2_XXS bit 24 of a1, IQ2_S
            // signs[7]) or a grid index bit (IQ2_XS, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), see
            // docs/QUANT_FORMATS.md); bit 0 is the low bit of one quant (TQ1_0: of a byte
            // of five base-3 digits, which moves one or more of them or, rarely, none: the site
            // search below then takes the next row).
            _ => out[at(r) + size / 2] ^= 1,
        },
    }
    out
}

/// Every defect on `ty` through `family`; returns the smallest NMSE a defect reached.
fn check_defects(ctx: &GpuContext, family: Family, ty: GgmlType, seed: u64) -> f64 {
    let kb = min_k(ty).max(32);
    // The widest K of the matmul tests, N odd and not a multiple of any rows-per-workgroup.
    let (k, n) = (kb * 5, 131);
    let (_, elems) = block_geometry(ty);
    let bytes = random_weight(ty, k, n, seed, true);
    let mut least = f64::INFINITY;
    for m in [1usize, 21] {
        let x = random_f32(m * k, seed ^ m as u64);
        let want = oracle::matmul(ty, &bytes, k, n, &x, m).unwrap();
        for defect in [
            Defect::DroppedBlock,
            Defect::TransposedTile,
            Defect::QuantOffByOne,
        ] {
            // The first site from the middle row on where the defect moves the oracle's
            // product by NMSE >= 100x the bound (random sub-block scales can make one quant's
            // step tiny; such a site tests nothing).
            let what = format!("{ty} {family:?} K={k} N={n} M={m} {defect:?}");
            let site = (n / 2..n - 1).find_map(|r| {
                let bad = inject(ty, &bytes, k, defect, r, (k / elems) / 2);
                let effect = nmse(&oracle::matmul(ty, &bad, k, n, &x, m).unwrap(), &want);
                (effect >= 100.0 * MATMUL_NMSE).then_some((bad, effect))
            });
            let (bad, effect) =
                site.unwrap_or_else(|| panic!("{what}: no row where the defect shows"));
            let w = GpuWeight::upload(ctx, "defective", ty, [k as u64, n as u64], &bad).unwrap();
            let got = matmul_now(ctx, family, &w, &x, m as u32).unwrap();
            let e = nmse(&got, &want);
            eprintln!(
                "control {what}: NMSE {e:.2e}, in the oracle {effect:.2e} (bound {MATMUL_NMSE:e}; \
                 old bound {OLD_BOUND:e}: {})",
                if e > OLD_BOUND { "caught" } else { "missed" }
            );
            assert!(
                e > MATMUL_NMSE,
                "{what}: NMSE {e:e} passes the bound {MATMUL_NMSE:e}; the check cannot see it"
            );
            least = least.min(e);
        }
    }
    least
}

#[test]
fn every_defect_fails_the_bound_on_the_device_family_for_every_type() {
    let _serial = data::gpu_lock();
    let ctx = ctx();
    let family = Family::for_context(&ctx);
    let mut least = f64::INFINITY;
    for (i, ty) in SUPPORTED_TYPES.into_iter().enumerate() {
        least = least.min(check_defects(&ctx, family, ty, 700 + i as u64));
    }
    eprintln!("smallest defect NMSE {least:.2e} against the bound {MATMUL_NMSE:e}");
    assert_clean(&ctx);
}

#[test]
fn every_defect_fails_the_bound_on_the_wide_and_serial_families() {
    let _serial = data::gpu_lock();
    for (f16, sg) in [(false, false), (true, true)] {
        let ctx = ctx_features(f16, sg);
        let families = if sg {
            vec![Family::wide(8, true), Family::SERIAL]
        } else {
            vec![Family::wide(32, false), Family::wide(8, false)]
        };
        for family in families {
            for (i, ty) in [GgmlType::F16, GgmlType::Q4_0, GgmlType::Q6_K]
                .into_iter()
                .enumerate()
            {
                check_defects(&ctx, family, ty, 800 + i as u64);
            }
        }
        assert_clean(&ctx);
    }
}
