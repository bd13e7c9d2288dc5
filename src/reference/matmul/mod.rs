//! CPU oracle for the matmul family: dequantize the weight with [`crate::quant`] (bit-exact with
//! llama.cpp), then plain loops with f64 accumulation. Written for reading, not speed.
//!
//! Shapes: a weight is GGUF `[ne0 = K, ne1 = N]`, i.e. N rows of K elements stored row after row
//! as whole blocks. Activations X are `[M, K]` (M tokens), outputs Y are `[M, N]`:
//! `Y[m, n] = sum_k W[n, k] * X[m, k]` (ggml's `mul_mat(W, X)`).

use crate::gguf::GgmlType;
use crate::quant::{dequantize, QuantError};

/// Errors of the oracle: a bad weight (type, lengths) or bad activations / ids.
#[derive(Debug, thiserror::Error)]
pub enum MatmulRefError {
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error("{what}: expected {expected} values, got {actual}")]
    Length {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("token id {id} is not below the {n_rows} rows of the table")]
    TokenOutOfRange { id: u32, n_rows: usize },
}

/// The whole weight as f32 `[N, K]` (row n at `n * K`).
pub fn dequantize_matrix(
    ty: GgmlType,
    bytes: &[u8],
    k: usize,
    n: usize,
) -> Result<Vec<f32>, MatmulRefError> {
    let count = k.checked_mul(n).ok_or(MatmulRefError::Length {
        what: "weight elements",
        expected: usize::MAX,
        actual: k,
    })?;
    Ok(dequantize(ty, bytes, count)?)
}

/// `y[N] = W[N, K] . x[K]` with f64 accumulation, rounded to f32 once per output.
pub fn matvec(
    ty: GgmlType,
    bytes: &[u8],
    k: usize,
    n: usize,
    x: &[f32],
) -> Result<Vec<f32>, MatmulRefError> {
    matmul(ty, bytes, k, n, x, 1)
}

/// `Y[M, N] = X[M, K] . W[N, K]^T` with f64 accumulation.
pub fn matmul(
    ty: GgmlType,
    bytes: &[u8],
    k: usize,
    n: usize,
    x: &[f32],
    m: usize,
) -> Result<Vec<f32>, MatmulRefError> {
    if x.len() != m * k {
        return Err(MatmulRefError::Length {
            what: "X [M, K]",
            expected: m * k,
            actual: x.len(),
        });
    }
    let w = dequantize_matrix(ty, bytes, k, n)?; // [N, K]
    let mut y = vec![0f32; m * n]; // [M, N]
    for (x_row, y_row) in x.chunks_exact(k).zip(y.chunks_exact_mut(n)) {
        for (w_row, out) in w.chunks_exact(k).zip(y_row.iter_mut()) {
            let dot: f64 = w_row
                .iter()
                .zip(x_row)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            *out = dot as f32;
        }
    }
    Ok(y)
}

/// Rows `ids` of an embedding table `[ne0 = K, ne1 = n_rows]`, as f32 `[ids.len(), K]`,
/// exactly as [`crate::quant::dequantize`] decodes them.
pub fn embed_rows(
    ty: GgmlType,
    table: &[u8],
    k: usize,
    n_rows: usize,
    ids: &[u32],
) -> Result<Vec<f32>, MatmulRefError> {
    let (block, type_size) = ty.block_layout();
    let row_bytes = k / block.max(1) * type_size;
    let expected = row_bytes * n_rows;
    if !k.is_multiple_of(block.max(1)) || table.len() != expected {
        return Err(MatmulRefError::Length {
            what: "table bytes",
            expected,
            actual: table.len(),
        });
    }
    let mut out = Vec::with_capacity(ids.len() * k); // [n_tokens, K]
    for &id in ids {
        let row = usize::try_from(id).unwrap_or(usize::MAX);
        let bytes = table
            .get(row.saturating_mul(row_bytes)..row.saturating_add(1).saturating_mul(row_bytes))
            .filter(|_| row < n_rows)
            .ok_or(MatmulRefError::TokenOutOfRange { id, n_rows })?;
        out.extend(dequantize(ty, bytes, k)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_matmul_by_hand() {
        // W [N = 2, K = 3], X [M = 2, K = 3].
        let w: Vec<u8> = [1f32, 2., 3., -1., 0., 1.]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let x = [1f32, 1., 1., 0., 2., 4.];
        let y = matmul(GgmlType::F32, &w, 3, 2, &x, 2).unwrap();
        assert_eq!(y, [6., 0., 16., 4.]);
        assert_eq!(matvec(GgmlType::F32, &w, 3, 2, &x[..3]).unwrap(), [6., 0.]);
        let e = embed_rows(GgmlType::F32, &w, 3, 2, &[1, 0]).unwrap();
        assert_eq!(e, [-1., 0., 1., 1., 2., 3.]);
        assert!(matches!(
            embed_rows(GgmlType::F32, &w, 3, 2, &[2]),
            Err(MatmulRefError::TokenOutOfRange { id: 2, n_rows: 2 })
        ));
        assert!(matches!(
            matmul(GgmlType::F32, &w, 3, 2, &x[..5], 2),
            Err(MatmulRefError::Length { .. })
        ));
    }
}
