//! Attention over a (dequantized) KV cache, in f64: the oracle for the GPU attention kernels.
//!
//! Shapes (row-major):
//! - `q`: `[n_q, n_head, head_dim]` f32, one query row per head for each of the `n_q` rows.
//! - `k`, `v`: `[kv_len, n_kv_heads, head_dim]` f32, the cache rows as the GPU sees them (already
//!   rounded to f16 or quantized and dequantized).
//! - output: `[n_q, n_head, head_dim]` f32.
//!
//! Query head `h` reads KV head `h / (n_head / n_kv_heads)` (grouped-query attention). Scores are
//! `scale · q·k + mask`; key `j` is visible to row `i` when the mask allows it:
//! - [`Mask::None`]: every key `j < kv_len` (the drafter's non-causal block);
//! - [`Mask::Causal`]: keys `j <= positions[i]` (and `< kv_len`);
//! - [`Mask::Explicit`]: additive `[n_q, kv_len]` values, `-inf` = hidden.
//!
//! A row that sees no key at all outputs zeros (as the GPU kernels do).

/// Which keys each query row sees.
#[derive(Debug, Clone, Copy)]
pub enum Mask<'a> {
    /// Every key `0..kv_len`.
    None,
    /// Row `i` sees keys `0..=positions[i]` (clipped to `kv_len`). `positions: [n_q]`.
    Causal(&'a [u32]),
    /// Additive mask `[n_q, kv_len]`; `-inf` hides a key.
    Explicit(&'a [f32]),
}

/// Attention problem shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnDims {
    pub n_q: usize,
    pub n_head: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub kv_len: usize,
}

/// Softmax attention in f64. Panics if slice lengths disagree with `dims` (test oracle only).
pub fn attention(
    dims: AttnDims,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Mask<'_>,
    scale: f32,
) -> Vec<f32> {
    let AttnDims {
        n_q,
        n_head,
        n_kv_heads,
        head_dim: d,
        kv_len,
    } = dims;
    assert_eq!(q.len(), n_q * n_head * d, "q shape");
    assert_eq!(k.len(), kv_len * n_kv_heads * d, "k shape");
    assert_eq!(v.len(), kv_len * n_kv_heads * d, "v shape");
    assert!(n_kv_heads > 0 && n_head % n_kv_heads == 0, "GQA ratio");
    let group = n_head / n_kv_heads;
    let mut out = vec![0f32; n_q * n_head * d];
    for i in 0..n_q {
        for h in 0..n_head {
            let kvh = h / group;
            let qrow = &q[(i * n_head + h) * d..][..d];
            // scores[j] = scale * q·k_j + mask[i][j]; None = hidden.
            let scores: Vec<Option<f64>> = (0..kv_len)
                .map(|j| {
                    let add = match mask {
                        Mask::None => 0.0,
                        Mask::Causal(pos) => {
                            if j as u64 > u64::from(pos[i]) {
                                return None;
                            }
                            0.0
                        }
                        Mask::Explicit(m) => f64::from(m[i * kv_len + j]),
                    };
                    if add == f64::NEG_INFINITY {
                        return None;
                    }
                    let krow = &k[(j * n_kv_heads + kvh) * d..][..d];
                    let dot: f64 = qrow
                        .iter()
                        .zip(krow)
                        .map(|(&a, &b)| f64::from(a) * f64::from(b))
                        .sum();
                    Some(dot * f64::from(scale) + add)
                })
                .collect();
            let max = scores
                .iter()
                .flatten()
                .fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            if max == f64::NEG_INFINITY {
                continue; // nothing visible: zeros
            }
            let mut acc = vec![0f64; d];
            let mut sum = 0f64;
            for (j, s) in scores.iter().enumerate() {
                let Some(s) = s else { continue };
                let p = (s - max).exp();
                sum += p;
                let vrow = &v[(j * n_kv_heads + kvh) * d..][..d];
                for (a, &x) in acc.iter_mut().zip(vrow) {
                    *a += p * f64::from(x);
                }
            }
            let o = &mut out[(i * n_head + h) * d..][..d];
            for (o, a) in o.iter_mut().zip(&acc) {
                *o = (a / sum) as f32;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_returns_its_value_and_causal_hides_the_future() {
        let dims = AttnDims {
            n_q: 2,
            n_head: 2,
            n_kv_heads: 1,
            head_dim: 2,
            kv_len: 2,
        };
        let q = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0];
        let k = [1.0, 0.0, 0.0, 1.0];
        let v = [1.0, 2.0, 3.0, 4.0];
        let out = attention(dims, &q, &k, &v, Mask::Causal(&[0, 1]), 1.0);
        // Row 0 sees key 0 only.
        assert_eq!(&out[..4], &[1.0, 2.0, 1.0, 2.0]);
        // Row 1, head 0: softmax(1, 0) over values (1,2), (3,4).
        let p0 = 1f64.exp() / (1f64.exp() + 1.0);
        let want = (p0 * 1.0 + (1.0 - p0) * 3.0) as f32;
        assert!((out[4] - want).abs() < 1e-6);
        let hidden = [f32::NEG_INFINITY; 4];
        let none = attention(dims, &q, &k, &v, Mask::Explicit(&hidden), 1.0);
        assert!(none.iter().all(|&x| x == 0.0));
    }
}
