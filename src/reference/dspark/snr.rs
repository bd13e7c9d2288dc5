//! Log-SNR conditioning of a drafter's block (PrismML GIDD drafters, `LogSnrEmbed`), in f32,
//! straight-line. Per slot `j` of a block of γ (`d` the drafter's hidden size):
//!
//! ```text
//! s_j    = max_log_snr if j = 0 (the anchor, position ≡ 0 mod γ) else min_log_snr
//! t_j    = (s_j − min) / (max − min) · 1000
//! f_i    = exp(−ln(10000) · i / 64)                          i in 0..64
//! feat_j = [sin(t_j · f_0..63) ; cos(t_j · f_0..63)]         [128]
//! a_j    = silu(fc1 · feat_j + b1)                           [d]    (fc1 [d, 128])
//! row_j  = fc2 · a_j + b2                                    [d]    (fc2 [d, d])
//! x_j   += row_j                                             the slot's embedding, before layer 0
//! ```
//!
//! The rows depend on the slot only, so the oracle computes all γ of them at load.

use crate::reference::forward::linear;

/// Sinusoidal features per log-SNR value.
pub const FEATURES: usize = 128;

/// The f32 weights of the conditioning MLP (matrices `[N, K]`, N rows of K).
#[derive(Debug, Clone)]
pub struct SnrWeights {
    /// `[d, 128]`
    pub fc1: Vec<f32>,
    /// `[d]`
    pub b1: Vec<f32>,
    /// `[d, d]`
    pub fc2: Vec<f32>,
    /// `[d]`
    pub b2: Vec<f32>,
}

/// The 128 features of log-SNR `s` in the range `(min, max)`.
pub fn features(s: f32, min: f32, max: f32) -> Vec<f32> {
    let t = (s - min) / (max - min) * 1000.0;
    let half = FEATURES / 2;
    let freq = |i: usize| (-(10000f32).ln() * i as f32 / half as f32).exp();
    let sin = (0..half).map(|i| (t * freq(i)).sin());
    let cos = (0..half).map(|i| (t * freq(i)).cos());
    sin.chain(cos).collect()
}

/// The rows `[γ, d]` added to a block's embeddings.
pub fn rows(w: &SnrWeights, gamma: usize, d: usize, min: f32, max: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(gamma * d); // [γ, d]
    for j in 0..gamma {
        let s = if j == 0 { max } else { min };
        let feat = features(s, min, max); // [128]
        let a: Vec<f32> = linear(&feat, &w.fc1, FEATURES) // [d]
            .iter()
            .zip(&w.b1)
            .map(|(&z, &b)| {
                let z = z + b;
                z / (1.0 + (-z).exp())
            })
            .collect();
        let row = linear(&a, &w.fc2, d); // [d]
        out.extend(row.iter().zip(&w.b2).map(|(&r, &b)| r + b));
    }
    out
}
