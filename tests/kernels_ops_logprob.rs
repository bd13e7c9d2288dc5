//! The log-probability kernel (`flint::kernels::ops::logprob`, `shaders/logprob.wgsl`): each
//! row's log-sum-exp against an f64 sum on the host, and the gathered target logit exactly, on
//! real vocabulary sizes, rows shorter than a workgroup, large and spread-out logits, masked
//! (most negative finite) logits and rows without a target. Bad shapes are typed errors.

use crate::common;

use common::gpu::{assert_clean, ctx};
use common::Rng;
use flint::gpu::GpuError;
use flint::kernels::ops::logprob::{logprob_on_gpu, NO_TARGET};
use flint::kernels::ops::mask::LOWEST;

/// log(sum exp(x)) in f64, from the row's max.
fn lse64(row: &[f32]) -> f64 {
    let m = row
        .iter()
        .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
    let s: f64 = row.iter().map(|&v| (f64::from(v) - m).exp()).sum();
    m + s.ln()
}

#[test]
fn lse_and_target_logits_match_f64() {
    let ctx = ctx();
    let mut rng = Rng::new(52);
    for (n_cols, scale, offset) in [
        (1usize, 1.0f32, 0.0f32),
        (7, 3.0, -2.0),
        (64, 10.0, 0.0),
        (65, 1.0, 80.0),
        (1000, 30.0, -50.0),
        (49152, 8.0, 0.0),
        (151936, 4.0, 12.0),
    ] {
        let n_rows = 3usize;
        let mut x: Vec<f32> = (0..n_rows * n_cols)
            .map(|_| (rng.f32() * 2.0 - 1.0) * scale + offset)
            .collect();
        // Row 1: half its columns masked by a grammar.
        for c in (0..n_cols).step_by(2) {
            if n_cols > 1 {
                x[n_cols + c] = LOWEST;
            }
        }
        let targets: Vec<u32> = vec![(n_cols as u32) - 1, NO_TARGET, (n_cols / 2) as u32 | 1];
        let targets: Vec<u32> = targets
            .into_iter()
            .map(|t| {
                if t != NO_TARGET && t as usize >= n_cols {
                    0
                } else {
                    t
                }
            })
            .collect();
        let got = logprob_on_gpu(&ctx, &x, n_cols, &targets).unwrap();
        assert_eq!(got.len(), n_rows);
        for (r, &(lse, picked)) in got.iter().enumerate() {
            let row = &x[r * n_cols..(r + 1) * n_cols];
            let want = lse64(row);
            let err = (f64::from(lse) - want).abs();
            // f32 accumulation of up to 151936 terms: a few ulps of the result, relative.
            let bound = 4e-6 * want.abs().max(1.0);
            assert!(
                err <= bound,
                "n_cols {n_cols} row {r}: lse {lse} vs {want} (err {err:e})"
            );
            match targets[r] {
                NO_TARGET => assert_eq!(picked, 0.0),
                t => assert_eq!(picked, row[t as usize], "n_cols {n_cols} row {r}"),
            }
        }
    }
    assert_clean(&ctx);
}

#[test]
fn bad_shapes_are_typed_errors() {
    let ctx = ctx();
    let x = vec![0.5f32; 12];
    for (n_cols, targets) in [(5usize, vec![0u32; 2]), (4, vec![0; 2]), (0, vec![])] {
        let r = logprob_on_gpu(&ctx, &x, n_cols, &targets);
        assert!(
            matches!(r, Err(GpuError::BadInput { .. })),
            "n_cols {n_cols} targets {}: {r:?}",
            targets.len()
        );
    }
    assert_clean(&ctx);
}
