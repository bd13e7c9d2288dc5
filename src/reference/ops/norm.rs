//! RMSNorm, as ggml_rms_norm (sum of squares in f64) followed by ggml_mul with the weight.

/// x `[n_rows, n_cols]`, weight `[n_cols]` → y `[n_rows, n_cols]`:
/// `y[r, c] = (x[r, c] * s_r) * w[c]` with `s_r = 1 / sqrt(Σ_c x[r, c]² / n_cols + eps)`.
pub fn rms_norm(x: &[f32], n_cols: usize, weight: Option<&[f32]>, eps: f32) -> Vec<f32> {
    assert!(
        n_cols > 0 && x.len().is_multiple_of(n_cols),
        "x is not [n_rows, {n_cols}]"
    );
    if let Some(w) = weight {
        assert_eq!(w.len(), n_cols, "weight is not [{n_cols}]");
    }
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks_exact(n_cols) {
        let sum_sq: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let mean = (sum_sq / n_cols as f64) as f32;
        let s = 1.0 / (mean + eps).sqrt();
        for (c, &v) in row.iter().enumerate() {
            let normed = v * s;
            y.push(match weight {
                Some(w) => normed * w[c],
                None => normed,
            });
        }
    }
    y
}
