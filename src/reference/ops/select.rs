//! Selection over a vocabulary: greedy argmax and top-k candidates. Order: value descending,
//! ties to the lower id (llama.cpp's greedy sampler keeps the first maximum).

use std::cmp::Ordering;

/// logits `[n_rows, n_cols]` → the index of each row's first maximum `[n_rows]`.
pub fn argmax(logits: &[f32], n_cols: usize) -> Vec<u32> {
    assert!(
        n_cols > 0 && logits.len().is_multiple_of(n_cols),
        "logits are not [n_rows, {n_cols}]"
    );
    logits
        .chunks_exact(n_cols)
        .map(|row| {
            let mut best = 0;
            for (i, &v) in row.iter().enumerate() {
                if v > row[best] {
                    best = i;
                }
            }
            best as u32
        })
        .collect()
}

/// logits `[n_rows, n_cols]` → `(ids, values)`, each `[n_rows, k]`: every row's k best, by
/// value descending then id ascending.
pub fn top_k(logits: &[f32], n_cols: usize, k: usize) -> (Vec<u32>, Vec<f32>) {
    assert!(
        n_cols > 0 && logits.len().is_multiple_of(n_cols),
        "logits are not [n_rows, {n_cols}]"
    );
    assert!(k <= n_cols, "k = {k} > n_cols = {n_cols}");
    let (mut ids, mut values) = (Vec::new(), Vec::new());
    for row in logits.chunks_exact(n_cols) {
        let mut order: Vec<usize> = (0..n_cols).collect();
        order.sort_by(|&a, &b| {
            row[b]
                .partial_cmp(&row[a])
                .unwrap_or(Ordering::Equal)
                .then(a.cmp(&b))
        });
        for &i in &order[..k] {
            ids.push(i as u32);
            values.push(row[i]);
        }
    }
    (ids, values)
}
