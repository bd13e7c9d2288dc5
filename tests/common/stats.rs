//! Goodness-of-fit helpers for the sampling tests.

use statrs::distribution::{ChiSquared, ContinuousCDF};

/// Pearson chi-square over bins merged so every expected count is at least 5:
/// returns (statistic, degrees of freedom). `expected[i]` is the count of bin `i`.
pub fn chi_square(observed: &[f64], expected: &[f64]) -> (f64, usize) {
    let (mut chi2, mut bins) = (0.0, 0usize);
    let (mut pool_o, mut pool_e) = (0.0, 0.0);
    for (&o, &e) in observed.iter().zip(expected) {
        if e >= 5.0 {
            chi2 += (o - e).powi(2) / e;
            bins += 1;
        } else {
            pool_o += o;
            pool_e += e;
        }
    }
    // A pool still under 5 expected is too small to judge and is left out.
    if pool_e >= 5.0 {
        chi2 += (pool_o - pool_e).powi(2) / pool_e;
        bins += 1;
    }
    (chi2, bins.saturating_sub(1))
}

/// The chi-square survival function: the p-value of `chi2` with `df` degrees of freedom.
pub fn p_value(chi2: f64, df: usize) -> f64 {
    let dist = ChiSquared::new(df.max(1) as f64).expect("df >= 1");
    dist.sf(chi2)
}
