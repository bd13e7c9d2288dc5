//! Sample statistics as llama-bench computes them: the mean, and the sample standard deviation
//! (n − 1 in the denominator; 0 below two samples); and the median of the profiles.

/// Arithmetic mean; 0 for no samples.
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Median (shared with the speculative profile, which sits left of `bench`).
pub use crate::speculative::stats::median;

/// Sample standard deviation (Bessel-corrected); 0 for fewer than two samples.
pub fn stddev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = mean(xs);
    let var = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64;
    var.sqrt()
}

/// Tokens per second of each sample (`tokens / seconds`); 0 where a sample took no time.
pub fn rates(n_tokens: u64, samples_ns: &[u64]) -> Vec<f64> {
    samples_ns
        .iter()
        .map(|&ns| {
            if ns == 0 {
                0.0
            } else {
                n_tokens as f64 * 1e9 / ns as f64
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_stddev() {
        assert_eq!(mean(&[]), 0.0);
        assert_eq!(stddev(&[]), 0.0);
        assert_eq!(stddev(&[3.0]), 0.0);
        assert_eq!(mean(&[1.0, 2.0, 3.0, 4.0]), 2.5);
        // Sample variance of 2,4,4,4,5,5,7,9 is 32/7.
        let xs = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert!((stddev(&xs) - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(stddev(&[5.0, 5.0, 5.0]), 0.0);
    }

    #[test]
    fn rates_per_sample() {
        assert_eq!(
            rates(128, &[1_000_000_000, 2_000_000_000, 0]),
            vec![128.0, 64.0, 0.0]
        );
    }
}
