//! RoPE, as ggml_rope_ext, YaRN included (llama.cpp's `rope_yarn`).
//!
//! For token t at position p and rotation i in `0..n_rot/2`:
//! `theta = f32(p) * freq[i]`, `freq[i] = f32(freq_scale * freq_base^(-2i/n_rot) / ff[i])`
//! (computed in f64, rounded once), then `(x0, x1) ← (x0 cos θ - x1 sin θ, x0 sin θ + x1 cos θ)`
//! with the pair `(2i, 2i+1)` (normal) or `(i, i + n_rot/2)` (NEOX) of each head; elements
//! `n_rot..head_dim` pass through. ggml forms theta in f32 steps (`p * theta_scale^i / ff *
//! freq_scale`), a few ulp away from this.
//!
//! With YaRN ([`RefYarn`], [`RopeRef::rotate`]) this is llama.cpp's `rope_yarn` (ggml-cpu
//! `ops.cpp`, with `rope_yarn_ramp` and ggml.c's `ggml_rope_yarn_corr_dims`):
//! ```text
//! theta_extrap = p · freq_base^(-2i/n_rot) / ff[i]
//! theta_interp = freq_scale · theta_extrap
//! ramp_mix     = rope_yarn_ramp(corr_dims, 2i) · ext_factor    (f32, as ggml)
//! theta        = theta_interp · (1 − ramp_mix) + theta_extrap · ramp_mix
//! mscale       = attn_factor · (1 + 0.1 · ln(1 / freq_scale))
//! (cos, sin)   = (cos θ · mscale, sin θ · mscale)
//! ```
//! and with ext_factor 0, `theta = theta_interp` and `mscale = attn_factor`. theta is linear in
//! p, so the mix is evaluated at p = 1 in f64 and rounded once to f32, and `theta = f32(p) ·
//! that`, as above (the same convention as without YaRN; ggml's f32 steps are a few ulp away).

use crate::reference::meta::RefYarn;

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

impl RefYarn {
    /// ggml's `ggml_rope_yarn_corr_dims(n_rot, n_ctx_orig, freq_base, beta_fast, beta_slow)`,
    /// in f32 as ggml: `corr_dim(β) = n_rot · ln(n_ctx_orig / (β · 2π)) / (2 ln freq_base)`,
    /// the rotation index that turns β times over the original context; `[max(0,
    /// floor(corr_dim(beta_fast))), min(n_rot − 1, ceil(corr_dim(beta_slow)))]`.
    pub fn corr_dims(&self, n_rot: usize, freq_base: f32) -> [f32; 2] {
        let corr_dim = |beta: f32| {
            let turns = self.n_ctx_orig as f32 / (beta * 2.0 * std::f32::consts::PI);
            n_rot as f32 * turns.ln() / (2.0 * freq_base.ln())
        };
        let low = corr_dim(self.beta_fast).floor();
        let high = corr_dim(self.beta_slow).ceil();
        [low.max(0.0), high.min(n_rot as f32 - 1.0)]
    }

    /// ggml's `rope_yarn_ramp(low, high, i0) · ext_factor` for rotation `i = i0 / 2`: 1 (pure
    /// extrapolation) up to `low`, 0 (pure interpolation) from `high`, linear between.
    pub fn ramp_mix(&self, [low, high]: [f32; 2], i: usize) -> f32 {
        let y = (i as f32 - low) / (high - low).max(0.001);
        (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor
    }
}

/// llama.cpp's `rope_yarn` for one rotation, in f64: the angle mixed from `theta_extrap` (the
/// unscaled angle) and its interpolation `freq_scale · theta_extrap` by `ramp_mix`, and the
/// cos/sin scale `mscale`.
fn rope_yarn(theta_extrap: f64, freq_scale: f32, ramp_mix: f32, y: &RefYarn) -> (f64, f64) {
    let fs = f64::from(freq_scale);
    let theta_interp = fs * theta_extrap;
    if y.ext_factor == 0.0 {
        return (theta_interp, f64::from(y.attn_factor));
    }
    let r = f64::from(ramp_mix);
    let theta = theta_interp * (1.0 - r) + theta_extrap * r;
    let mscale = f64::from(y.attn_factor) * (1.0 + 0.1 * (1.0 / fs).ln());
    (theta, mscale)
}

impl RopeRef {
    /// The angle per unit position of every rotation (`theta = f32(p) · freq[i]`) and the
    /// cos/sin scale, under `yarn` (`None`: [`rope_freqs`] and 1).
    pub fn freqs(&self, yarn: Option<&RefYarn>, freq_factors: Option<&[f32]>) -> (Vec<f32>, f32) {
        let Some(y) = yarn.filter(|y| y.is_active()) else {
            return (rope_freqs(self, freq_factors), 1.0);
        };
        if y.ext_factor == 0.0 {
            return (rope_freqs(self, freq_factors), y.attn_factor);
        }
        let corr = y.corr_dims(self.n_rot, self.freq_base);
        let mut mscale = 1.0;
        let freqs = (0..self.n_rot / 2)
            .map(|i| {
                let ff = freq_factors.map_or(1.0, |f| f64::from(f[i]));
                let exponent = -2.0 * i as f64 / self.n_rot as f64;
                let theta_extrap = f64::from(self.freq_base).powf(exponent) / ff; // p = 1
                let (theta, m) = rope_yarn(theta_extrap, self.freq_scale, y.ramp_mix(corr, i), y);
                mscale = m;
                theta as f32
            })
            .collect();
        (freqs, mscale as f32)
    }

    /// x `[n_tokens, n_heads, head_dim]`, positions `[n_tokens]` → y (same shape), under `yarn`
    /// (`None` or inactive: plain RoPE, the same bits as [`rope`]).
    pub fn rotate(
        &self,
        x: &[f32],
        positions: &[i32],
        n_heads: usize,
        head_dim: usize,
        yarn: Option<&RefYarn>,
        freq_factors: Option<&[f32]>,
    ) -> Vec<f32> {
        assert_eq!(x.len(), positions.len() * n_heads * head_dim, "x shape");
        assert!(
            self.n_rot.is_multiple_of(2) && self.n_rot <= head_dim,
            "n_rot"
        );
        let half = self.n_rot / 2;
        let (freqs, mscale) = self.freqs(yarn, freq_factors);
        let mut y = x.to_vec();
        for (t, &p) in positions.iter().enumerate() {
            for h in 0..n_heads {
                let head = (t * n_heads + h) * head_dim;
                for (i, &freq) in freqs.iter().enumerate() {
                    let theta = p as f32 * freq;
                    let (s, c) = theta.sin_cos();
                    // × 1 (no YaRN, no attention factor) is exact: the bits of plain RoPE.
                    let (s, c) = (s * mscale, c * mscale);
                    let (i0, i1) = if self.neox {
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
}

/// x `[n_tokens, n_heads, head_dim]`, positions `[n_tokens]` → y (same shape), without YaRN.
pub fn rope(
    x: &[f32],
    positions: &[i32],
    n_heads: usize,
    head_dim: usize,
    cfg: &RopeRef,
    freq_factors: Option<&[f32]>,
) -> Vec<f32> {
    cfg.rotate(x, positions, n_heads, head_dim, None, freq_factors)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ggml's CPU RoPE cache as ggml computes it, all in f32: theta by repeated multiplication
    /// by `freq_base^(-2/n_rot)` from `p`, divided by the factor, then `rope_yarn`.
    fn ggml_cache(cfg: &RopeRef, y: &RefYarn, p: i32, ff: Option<&[f32]>) -> Vec<(f32, f32)> {
        let theta_scale = cfg.freq_base.powf(-2.0 / cfg.n_rot as f32);
        let corr = y.corr_dims(cfg.n_rot, cfg.freq_base);
        let mut theta = p as f32;
        (0..cfg.n_rot / 2)
            .map(|i| {
                let theta_extrap = theta / ff.map_or(1.0, |f| f[i]);
                let theta_interp = cfg.freq_scale * theta_extrap;
                let mut t = theta_interp;
                let mut mscale = y.attn_factor;
                if y.ext_factor != 0.0 {
                    let r = y.ramp_mix(corr, i);
                    t = theta_interp * (1.0 - r) + theta_extrap * r;
                    mscale *= 1.0 + 0.1 * (1.0 / cfg.freq_scale).ln();
                }
                theta *= theta_scale;
                (t.cos() * mscale, t.sin() * mscale)
            })
            .collect()
    }

    /// Bonsai-8B's YaRN: x4 from 16384, base 1e6, 128 rotated dims.
    fn bonsai() -> (RopeRef, RefYarn) {
        let cfg = RopeRef {
            n_rot: 128,
            neox: true,
            freq_base: 1e6,
            freq_scale: 0.25,
        };
        let y = RefYarn {
            n_ctx_orig: 16384,
            ext_factor: 1.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        };
        (cfg, y)
    }

    #[test]
    fn corr_dims_and_ramp_as_ggml() {
        let (cfg, y) = bonsai();
        // 128 · ln(16384 / (32 · 2π)) / (2 ln 1e6) = 20.38…, and with β = 1: 36.44….
        assert_eq!(y.corr_dims(cfg.n_rot, cfg.freq_base), [20.0, 37.0]);
        let corr = [20.0, 37.0];
        assert_eq!(y.ramp_mix(corr, 0), 1.0);
        assert_eq!(y.ramp_mix(corr, 20), 1.0);
        assert_eq!(y.ramp_mix(corr, 37), 0.0);
        assert_eq!(y.ramp_mix(corr, 63), 0.0);
        assert!((y.ramp_mix(corr, 28) - (1.0 - 8.0 / 17.0)).abs() < 1e-7);
        // Clamped to the rotated dims; never negative.
        let tiny = RefYarn { n_ctx_orig: 8, ..y };
        assert_eq!(tiny.corr_dims(16, 10000.0)[0], 0.0);
        let huge = RefYarn {
            n_ctx_orig: 1 << 30,
            ..y
        };
        assert_eq!(huge.corr_dims(16, 10000.0)[1], 15.0);
    }

    /// The oracle's f64 mix at unit position, times f32(p), against ggml's f32 cache: the same
    /// rotation up to f32 rounding of the angle (which grows with p: a few ulp of p · freq).
    #[test]
    fn matches_ggml_rope_yarn() {
        let (cfg, y) = bonsai();
        let ff: Vec<f32> = (0..64).map(|i| 1.0 + (i % 3) as f32 * 0.5).collect();
        let scaled = RefYarn {
            attn_factor: 0.8,
            ..y
        };
        for (yarn, ff) in [(y, None), (scaled, Some(&ff[..]))] {
            let (freqs, mscale) = cfg.freqs(Some(&yarn), ff);
            let want_mscale = yarn.attn_factor * (1.0 + 0.1 * 4f32.ln());
            assert!((mscale - want_mscale).abs() <= 1e-6 * want_mscale);
            for p in [0, 1, 7, 1000, 16383, 16384, 40000, 65535] {
                let ggml = ggml_cache(&cfg, &yarn, p, ff);
                for (i, (&f, &(c, s))) in freqs.iter().zip(&ggml).enumerate() {
                    let theta = p as f32 * f;
                    // Angle error allowed: what ggml's repeated multiplication accumulates
                    // (i products and theta_scale's rounding raised to the i-th power, each
                    // relative 2^-24, about 6e-8) and a few roundings more, times mscale.
                    let tol = 1e-6 + theta.abs() * (2.0 * i as f32 + 8.0) * 6e-8 * 1.2;
                    let (ws, wc) = theta.sin_cos();
                    assert!((wc * mscale - c).abs() <= tol, "p {p} i {i}: cos");
                    assert!((ws * mscale - s).abs() <= tol, "p {p} i {i}: sin");
                }
            }
        }
    }

    /// Without YaRN (or with an inactive one) the rotation is plain RoPE to the bit; with ext 0
    /// only the scale changes.
    #[test]
    fn inactive_yarn_is_plain_rope() {
        let (cfg, y) = bonsai();
        let cfg = RopeRef { n_rot: 16, ..cfg };
        let x: Vec<f32> = (0..2 * 3 * 20).map(|i| (i as f32 * 0.37).sin()).collect();
        let pos = [5, 70000];
        let off = RefYarn {
            ext_factor: 0.0,
            ..y
        };
        let plain = rope(&x, &pos, 3, 20, &cfg, None);
        let same = cfg.rotate(&x, &pos, 3, 20, Some(&off), None);
        assert_eq!(plain, same);
        let half = RefYarn {
            attn_factor: 0.5,
            ..off
        };
        let halved = cfg.rotate(&x, &pos, 3, 20, Some(&half), None);
        for (h, (a, b)) in halved.iter().zip(&plain).enumerate() {
            if h % 20 < 16 {
                assert!((a - b * 0.5).abs() <= 1e-6, "{h}");
            } else {
                assert_eq!(a, b, "pass-through {h}");
            }
        }
    }
}
