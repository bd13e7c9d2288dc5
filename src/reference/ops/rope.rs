//! RoPE, as ggml_rope_ext without YaRN (ext_factor 0, attn_factor 1).
//!
//! For token t at position p and rotation i in `0..n_rot/2`:
//! `theta = f32(p) * freq[i]`, `freq[i] = f32(freq_scale * freq_base^(-2i/n_rot) / ff[i])`
//! (computed in f64, rounded once), then `(x0, x1) ← (x0 cos θ - x1 sin θ, x0 sin θ + x1 cos θ)`
//! with the pair `(2i, 2i+1)` (normal) or `(i, i + n_rot/2)` (NEOX) of each head; elements
//! `n_rot..head_dim` pass through. ggml forms theta in f32 steps (`p * theta_scale^i / ff *
//! freq_scale`), a few ulp away from this.

/// The rotation: what the model's metadata says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeRef {
    pub n_rot: usize,
    /// NEOX pairing `(i, i + n_rot/2)`; else normal `(2i, 2i+1)`.
    pub neox: bool,
    pub freq_base: f32,
    pub freq_scale: f32,
}

/// `freq[i]` for i in `0..n_rot/2`, with optional frequency factors `[n_rot/2]` (divisors).
pub fn rope_freqs(cfg: &RopeRef, freq_factors: Option<&[f32]>) -> Vec<f32> {
    let half = cfg.n_rot / 2;
    (0..half)
        .map(|i| {
            let ff = freq_factors.map_or(1.0, |f| f64::from(f[i]));
            let base = f64::from(cfg.freq_base).powf(-2.0 * i as f64 / cfg.n_rot as f64);
            (f64::from(cfg.freq_scale) * base / ff) as f32
        })
        .collect()
}

/// x `[n_tokens, n_heads, head_dim]`, positions `[n_tokens]` → y (same shape).
pub fn rope(
    x: &[f32],
    positions: &[i32],
    n_heads: usize,
    head_dim: usize,
    cfg: &RopeRef,
    freq_factors: Option<&[f32]>,
) -> Vec<f32> {
    assert_eq!(x.len(), positions.len() * n_heads * head_dim, "x shape");
    assert!(cfg.n_rot % 2 == 0 && cfg.n_rot <= head_dim, "n_rot");
    let half = cfg.n_rot / 2;
    let freqs = rope_freqs(cfg, freq_factors);
    let mut y = x.to_vec();
    for (t, &p) in positions.iter().enumerate() {
        for h in 0..n_heads {
            let head = (t * n_heads + h) * head_dim;
            for (i, &freq) in freqs.iter().enumerate() {
                let theta = p as f32 * freq;
                let (s, c) = theta.sin_cos();
                let (i0, i1) = if cfg.neox {
                    (head + i, head + i + half)
                } else {
                    (head + 2 * i, head + 2 * i + 1)
                };
                let (x0, x1) = (x[i0], x[i1]);
                y[i0] = x0 * c - x1 * s;
                y[i1] = x0 * s + x1 * c;
            }
        }
    }
    y
}
