//! The one matrix product of the forward pass, `Y[M, N] = X[M, K] · W[N, K]ᵀ` over weights
//! already dequantized to f32 (see [`crate::reference::matmul`] for the per-call oracle the GPU
//! matmul kernels are held to).
//!
//! Each output is one dot product accumulated in f64 (four interleaved partial sums over
//! `k ≡ 0..3 mod 4`, added at the end) and rounded to f32 once: the same value whatever the
//! batch size `M` or the number of threads, so prefill and decode agree to the bit on a row.
//! The `N` weight rows are split into contiguous ranges over up to [`max_threads`] scoped
//! threads (`std::thread::scope`); the split never changes a result.

use std::thread;

/// Threads used by [`linear`]: the machine's available parallelism, at most 16.
pub fn max_threads() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get().min(16))
}

const LANES: usize = 4;

/// `a · b` in f64, rounded once. `a`, `b`: `[K]`.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f64; LANES];
    let (a4, b4) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (a_rest, b_rest) = (a4.remainder(), b4.remainder());
    for (x, y) in a4.zip(b4) {
        for ((s, &xi), &yi) in acc.iter_mut().zip(x).zip(y) {
            *s += f64::from(xi) * f64::from(yi);
        }
    }
    let mut sum: f64 = acc.iter().sum();
    for (&xi, &yi) in a_rest.iter().zip(b_rest) {
        sum += f64::from(xi) * f64::from(yi);
    }
    sum as f32
}

/// x `[M, K]`, w `[N, K]` (N rows of K) → y `[M, N]`, `y[m, n] = Σ_k w[n, k] · x[m, k]`.
///
/// The caller guarantees `x.len() % k == 0` and `w.len() % k == 0` (the forward pass checks
/// every weight's shape at load).
pub fn linear(x: &[f32], w: &[f32], k: usize) -> Vec<f32> {
    debug_assert!(k > 0 && x.len().is_multiple_of(k) && w.len().is_multiple_of(k));
    let (m, n) = (x.len() / k, w.len() / k);
    // yt [N, M]: weight row n's outputs for every token, so each thread owns a contiguous range.
    let mut yt = vec![0f32; n * m];
    let rows_per_thread = n.div_ceil(max_threads()).max(1);
    thread::scope(|s| {
        for (w_part, yt_part) in w
            .chunks(rows_per_thread * k)
            .zip(yt.chunks_mut(rows_per_thread * m))
        {
            s.spawn(move || {
                for (w_row, yt_row) in w_part.chunks_exact(k).zip(yt_part.chunks_exact_mut(m)) {
                    for (x_row, out) in x.chunks_exact(k).zip(yt_row.iter_mut()) {
                        *out = dot(w_row, x_row);
                    }
                }
            });
        }
    });
    // y [M, N] = yt transposed.
    let mut y = vec![0f32; m * n];
    for (i, yt_row) in yt.chunks_exact(m).enumerate() {
        for (j, &v) in yt_row.iter().enumerate() {
            y[j * n + i] = v;
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_matmul_oracle_and_is_batch_invariant() {
        let (m, n, k) = (3, 37, 70);
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7919) % 97) as f32 / 13.0 - 3.0)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 104729) % 89) as f32 / 11.0 - 4.0)
            .collect();
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let want =
            crate::reference::matmul::matmul(crate::gguf::GgmlType::F32, &bytes, k, n, &x, m)
                .unwrap();
        let got = linear(&x, &w, k);
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{a} vs {b}");
        }
        // Row 1 alone is bit-identical to row 1 of the batch.
        let alone = linear(&x[k..2 * k], &w, k);
        assert_eq!(alone, got[n..2 * n]);
    }
}
