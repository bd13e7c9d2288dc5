//! GPU argmax and top-k (`flint::kernels::ops::select`) against the CPU oracle, exactly: real
//! vocabulary sizes (49152, 151936), tiny rows, and inputs built with ties across lanes,
//! workgroups and lists so that "value descending, ties to the lower id" is really exercised.

use crate::common;

use common::gpu::{assert_clean, ctx};
use common::Rng;
use flint::gpu::GpuError;
use flint::kernels::ops::select::{self, Select};
use flint::reference::ops as oracle;

/// Logits rounded to 1/8 on [-8, 8): about 128 distinct values, so ties everywhere.
fn tied_logits(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| (rng.f32() * 64.0).floor() / 8.0).collect()
}

/// Logits with `best` planted at `positions` (in any order), everything else below it.
fn planted(rng: &mut Rng, n: usize, positions: &[usize], best: f32) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n).map(|_| rng.f32() * 4.0 - 5.0).collect();
    for &p in positions {
        x[p] = best;
    }
    x
}

#[test]
fn argmax_is_exact_with_ties_to_the_lowest_index() {
    let ctx = ctx();
    let mut rng = Rng::new(11);
    for n_cols in [49152usize, 151936] {
        // Row 0: the max at three places in different workgroups, the lowest in the middle of
        // the planted list; row 1: random ties; row 2: all equal; row 3: the last column.
        let mut x = planted(&mut rng, n_cols, &[n_cols - 1, 70_001 % n_cols, 4097], 3.5);
        x.extend(tied_logits(&mut rng, n_cols));
        x.extend(vec![-1.25; n_cols]);
        x.extend(planted(&mut rng, n_cols, &[n_cols - 1], 9.0));
        let got = select::argmax_on_gpu(&ctx, &x, n_cols).unwrap();
        let want = oracle::argmax(&x, n_cols);
        assert_eq!(got, want, "vocab {n_cols}");
        assert_eq!(got[0], 4097, "lowest of the tied maxima");
        assert_eq!(got[2], 0, "all equal → index 0");
        assert_eq!(got[3], n_cols as u32 - 1);
    }
    // Tiny rows: one column, fewer columns than lanes, -inf entries.
    let x = [f32::NEG_INFINITY, -3.0, 7.0, 7.0, 2.0, f32::NEG_INFINITY];
    for n_cols in [1, 2, 3, 6] {
        let got = select::argmax_on_gpu(&ctx, &x, n_cols).unwrap();
        assert_eq!(got, oracle::argmax(&x, n_cols), "{n_cols} columns");
    }
    assert_clean(&ctx);
}

fn check_top_k(ctx: &flint::gpu::GpuContext, x: &[f32], n_cols: usize, k: u32, what: &str) {
    let (ids, values) = select::top_k_on_gpu(ctx, x, n_cols, k).unwrap();
    let (want_ids, want_values) = oracle::top_k(x, n_cols, k as usize);
    assert_eq!(ids, want_ids, "{what}: ids");
    assert_eq!(values, want_values, "{what}: values");
}

#[test]
fn top_k_is_exact_and_sorted_with_ties_to_the_lower_id() {
    let ctx = ctx();
    let mut rng = Rng::new(12);
    for n_cols in [49152usize, 151936] {
        // Row 0: heavy ties; row 1: distinct values with a planted tie at the top.
        let mut x = tied_logits(&mut rng, n_cols);
        x.extend(planted(
            &mut rng,
            n_cols,
            &[n_cols - 2, 5, 77_777 % n_cols],
            2.0,
        ));
        for k in [1, 40, 64] {
            check_top_k(&ctx, &x, n_cols, k, &format!("vocab {n_cols} k={k}"));
        }
    }
    // Ascending input (every element enters every list: the insertion worst case), a row
    // exactly k long, fewer columns than lanes.
    let ascending: Vec<f32> = (0..5000).map(|i| i as f32 * 0.5).collect();
    check_top_k(&ctx, &ascending, 5000, 64, "ascending");
    let short: Vec<f32> = (0..3 * 64).map(|i| ((i * 37) % 11) as f32).collect();
    check_top_k(&ctx, &short, 64, 64, "k = n_cols");
    check_top_k(&ctx, &short, 3, 2, "3 columns");
    assert_clean(&ctx);
}

#[test]
fn select_rows_can_shrink_between_steps_and_bad_k_is_an_error() {
    use common::gpu::{read_f32, upload_f32, zeros_f32};
    let ctx = ctx();
    let mut rng = Rng::new(13);
    let n_cols = 3000;
    let x = tied_logits(&mut rng, 4 * n_cols);
    let logits = upload_f32(&ctx, "logits", &x);
    let ids = zeros_f32(&ctx, "ids", 4 * 8);
    let values = zeros_f32(&ctx, "values", 4 * 8);
    let mut op = Select::top_k(&ctx, &logits, &ids, &values, 4, n_cols as u32, 8).unwrap();
    op.set_rows(&ctx, 2).unwrap();
    flint::kernels::launch::submit(&ctx, "top-k 2 rows", &op.dispatches()).unwrap();
    let (want_ids, want_values) = oracle::top_k(&x[..2 * n_cols], n_cols, 8);
    let got_values = read_f32(&ctx, &values, 4 * 8);
    assert_eq!(&got_values[..16], &want_values[..]);
    assert!(
        got_values[16..].iter().all(|&v| v == 0.0),
        "rows past 2 were written"
    );
    let got_ids: Vec<u32> = read_f32(&ctx, &ids, 16)
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(got_ids, want_ids);
    assert!(matches!(
        op.set_rows(&ctx, 5),
        Err(GpuError::BadInput { .. })
    ));

    for (k, n) in [(0, 100), (65, 100), (10, 9)] {
        let r = select::top_k_on_gpu(&ctx, &x[..n], n, k);
        assert!(
            matches!(r, Err(GpuError::BadInput { .. })),
            "k={k} n_cols={n}"
        );
    }
    assert!(matches!(
        select::argmax_on_gpu(&ctx, &x[..10], 3),
        Err(GpuError::BadInput { .. })
    ));
    assert_clean(&ctx);
}
