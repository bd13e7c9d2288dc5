//! Softmax over rows, as ggml_soft_max_ext without ALiBi: values `x * scale + mask` in f32,
//! exponentials in f32, their sum in f64, then each exponential times `f32(1 / sum)`.

/// Values below this (a `-inf` mask) are masked: their output is exactly 0.
const MASKED: f32 = -3.0e38;

/// x `[n_rows, n_cols]`, mask `[n_mask_rows, n_cols]` (row r uses mask row `r % n_mask_rows`)
/// → y `[n_rows, n_cols]`. A fully masked row gives zeros.
pub fn softmax(x: &[f32], n_cols: usize, scale: f32, mask: Option<&[f32]>) -> Vec<f32> {
    assert!(
        n_cols > 0 && x.len().is_multiple_of(n_cols),
        "x is not [n_rows, {n_cols}]"
    );
    if let Some(m) = mask {
        assert!(
            !m.is_empty() && m.len() % n_cols == 0,
            "mask is not [n, {n_cols}]"
        );
    }
    let mut y = Vec::with_capacity(x.len());
    for (r, row) in x.chunks_exact(n_cols).enumerate() {
        let v: Vec<f32> = row
            .iter()
            .enumerate()
            .map(|(c, &xv)| {
                let m = mask.map_or(0.0, |m| {
                    let n_mask_rows = m.len() / n_cols;
                    m[(r % n_mask_rows) * n_cols + c]
                });
                xv * scale + m
            })
            .collect();
        let max = v.iter().copied().fold(f32::MIN, f32::max);
        let e: Vec<f32> = v
            .iter()
            .map(|&vi| if vi >= MASKED { (vi - max).exp() } else { 0.0 })
            .collect();
        let sum: f64 = e.iter().map(|&ei| f64::from(ei)).sum();
        let inv = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
        y.extend(e.iter().map(|&ei| ei * inv));
    }
    y
}
