//! Verify-length policies (docs/DSPARK.md): how many of the γ drafts of a block the
//! target verifies.
//!
//! - [`threshold_len`]: the static per-slot confidence threshold (`--spec-draft-p-min`).
//! - [`confidence_schedule`]: the paper's hardware-aware scheduler (Algorithm 1) over R requests:
//!   admit drafts in order of prefix survival `a_{r,j} = ∏_{i≤j} c_{r,i}` while the expected
//!   throughput `Θ = E[tokens] · SPS(B)` keeps rising, where `SPS(B)` ([`SpsProfile`]) is the
//!   measured rate of target forwards over `B` rows. It stops at the first draft that does not
//!   raise `Θ`: that early stop keeps stochastic verification lossless (§3.5).

/// A profile that cannot be used. Every variant names the values involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("empty steps-per-second profile: batch size 1 at least must be measured")]
    EmptyProfile,
    #[error("batch size {batch}: {secs} seconds per step is invalid: it must be finite and > 0")]
    BadSeconds { batch: usize, secs: f64 },
}

/// `SPS(B)`: target forward steps per second for a batch of `B` rows, `B = 1..=max_batch`.
/// Batches outside that range (0, or larger than profiled) have rate 0, so the scheduler never
/// chooses them.
#[derive(Debug, Clone, PartialEq)]
pub struct SpsProfile {
    /// `sps[B - 1] = SPS(B)`, all finite and > 0.
    sps: Vec<f64>,
}

impl SpsProfile {
    /// From measured seconds per step: `secs[B - 1]` for batch `B` (`[max_batch]`). Fails on an
    /// empty slice or any value that is not finite and > 0.
    pub fn from_secs(secs: &[f64]) -> Result<Self, ScheduleError> {
        if secs.is_empty() {
            return Err(ScheduleError::EmptyProfile);
        }
        let sps = secs
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let rate = 1.0 / s;
                if s.is_finite() && s > 0.0 && rate.is_finite() {
                    Ok(rate)
                } else {
                    Err(ScheduleError::BadSeconds {
                        batch: i + 1,
                        secs: s,
                    })
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { sps })
    }

    /// `SPS(batch)`; 0 for batch 0 or beyond [`SpsProfile::max_batch`].
    pub fn sps(&self, batch: usize) -> f64 {
        batch
            .checked_sub(1)
            .and_then(|i| self.sps.get(i))
            .copied()
            .unwrap_or(0.0)
    }

    /// The largest profiled batch size.
    pub fn max_batch(&self) -> usize {
        self.sps.len()
    }
}

/// The verify plan of one step over R requests.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// `[R]`: drafts to verify per request (`ℓ_r`, each `0..=conf[r].len()`).
    pub lens: Vec<usize>,
    /// Rows of the target forward: `B = R + Σ ℓ_r` (each request verifies its anchor too).
    pub batch: usize,
    /// Expected committed tokens `τ* = R + Σ_r Σ_{j≤ℓ_r} a_{r,j}`.
    pub expected_tokens: f64,
    /// `Θ = τ* · SPS(B)`, expected tokens per second.
    pub throughput: f64,
}

/// Static threshold: the number of leading slots whose confidence is at least `p_min`
/// (truncates at the first slot below it, per slot, not cumulative; a NaN confidence counts as
/// below). `p_min <= 0` (or NaN) keeps all `conf.len()` slots. May return 0.
pub fn threshold_len(conf: &[f32], p_min: f32) -> usize {
    if p_min.is_nan() || p_min <= 0.0 {
        return conf.len();
    }
    conf.iter().take_while(|&&c| c >= p_min).count()
}

/// Paper Algorithm 1. `conf[r]` (`[γ_r]`) holds the confidences `c_{r,1..γ_r}` of request `r`
/// (each the probability that the draft survives given the earlier ones did; clamped to
/// `[0, 1]`, NaN counts as 0). Starts from ℓ = 0 everywhere (`B = R`, `τ* = R`), walks the
/// drafts by prefix survival `a_{r,j}` descending (ties: lower `r`, then lower `j`), and admits
/// each while `Θ = τ* · SPS(B)` strictly rises; the first that does not rise ends the search.
///
/// Generic over the confidence type so `f32` head outputs and exact `f64` values both work.
pub fn confidence_schedule<T: Copy + Into<f64>>(conf: &[&[T]], sps: &SpsProfile) -> Schedule {
    // (a_{r,j}, r, j) with j counted from 1.
    let mut candidates: Vec<(f64, usize, usize)> = Vec::new();
    for (r, slots) in conf.iter().enumerate() {
        let mut survival = 1.0f64;
        for (j, &c) in slots.iter().enumerate() {
            survival *= clamp_unit(c.into());
            candidates.push((survival, r, j + 1));
        }
    }
    // Survival never rises along a request, so with the tie order this list is prefix-closed:
    // (r, j) always comes after (r, j - 1).
    candidates.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));

    let mut plan = Schedule {
        lens: vec![0; conf.len()],
        batch: conf.len(),
        expected_tokens: conf.len() as f64,
        throughput: conf.len() as f64 * sps.sps(conf.len()),
    };
    for (survival, r, j) in candidates {
        let batch = plan.batch + 1;
        let expected_tokens = plan.expected_tokens + survival;
        let throughput = expected_tokens * sps.sps(batch);
        if throughput <= plan.throughput || throughput.is_nan() {
            break;
        }
        if let Some(len) = plan.lens.get_mut(r) {
            *len = j;
        }
        plan.batch = batch;
        plan.expected_tokens = expected_tokens;
        plan.throughput = throughput;
    }
    plan
}

/// Clamps a confidence to `[0, 1]`; NaN becomes 0.
fn clamp_unit(c: f64) -> f64 {
    if c.is_nan() {
        0.0
    } else {
        c.clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile with the given steps per second (`rates[B - 1] = SPS(B)`).
    fn profile(rates: &[f64]) -> SpsProfile {
        let secs: Vec<f64> = rates.iter().map(|r| 1.0 / r).collect();
        SpsProfile::from_secs(&secs).expect("valid test profile")
    }

    fn assert_close(got: f64, want: f64) {
        assert!(
            (got - want).abs() <= 1e-9 * want.abs(),
            "got {got}, want {want}"
        );
    }

    #[test]
    fn regression_single_request_full_block() {
        let c = [0.9, 0.8, 0.7];
        let s = confidence_schedule(&[&c[..]], &profile(&[10.0, 9.0, 8.0, 7.0]));
        assert_eq!(s.lens, vec![3]);
        assert_eq!(s.batch, 4);
        assert_close(s.expected_tokens, 3.124);
        assert_close(s.throughput, 21.868);
    }

    #[test]
    fn regression_early_stop_ignores_later_gain() {
        // ℓ = 2 lowers Θ (2.62 · 5 < 1.9 · 8): the search stops there and never sees that
        // ℓ = 3 would reach 3.124 · 100.
        let c = [0.9, 0.8, 0.7];
        let s = confidence_schedule(&[&c[..]], &profile(&[10.0, 8.0, 5.0, 100.0]));
        assert_eq!(s.lens, vec![1]);
        assert_eq!(s.batch, 2);
        assert_close(s.expected_tokens, 1.9);
        assert_close(s.throughput, 15.2);
    }

    #[test]
    fn regression_two_requests() {
        let (c1, c2) = ([0.9, 0.8], [0.85, 0.5]);
        // SPS(1) is never used with two requests.
        let sps = profile(&[11.0, 10.0, 9.0, 8.0, 7.0, 5.0]);
        let s = confidence_schedule(&[&c1[..], &c2[..]], &sps);
        assert_eq!(s.lens, vec![2, 1]);
        assert_eq!(s.batch, 5);
        assert_close(s.expected_tokens, 4.47);
        assert_close(s.throughput, 31.29);
    }

    #[test]
    fn ties_go_to_the_lower_request() {
        let c = [0.5f32];
        let s = confidence_schedule(&[&c[..], &c[..]], &profile(&[1.0, 10.0, 9.0, 7.0]));
        assert_eq!(s.lens, vec![1, 0]);
        assert_eq!(s.batch, 3);
    }

    #[test]
    fn hostile_confidences_are_clamped() {
        let c = [f32::NAN, 2.0, -1.0];
        let s = confidence_schedule(&[&c[..]], &profile(&[10.0, 9.0, 8.0, 7.0]));
        assert_eq!(s.lens, vec![0]);
        let c = [2.0f32, 0.9];
        let s = confidence_schedule(&[&c[..]], &profile(&[10.0, 9.0, 8.0]));
        assert_eq!(s.lens, vec![2]);
        assert_close(s.expected_tokens, 2.0 + f64::from(0.9f32));
    }

    #[test]
    fn batches_beyond_the_profile_are_never_chosen() {
        let c = [1.0f32; 8];
        let s = confidence_schedule(&[&c[..]], &profile(&[10.0, 10.0, 10.0]));
        assert_eq!(s.lens, vec![2]);
        assert_eq!(s.batch, 3);
        let s = confidence_schedule(&[&c[..], &c[..]], &profile(&[10.0]));
        assert_eq!(s.lens, vec![0, 0]);
        assert_eq!(s.throughput, 0.0);
    }

    #[test]
    fn no_requests() {
        let s = confidence_schedule::<f32>(&[], &profile(&[10.0]));
        assert_eq!(s.lens, Vec::<usize>::new());
        assert_eq!((s.batch, s.expected_tokens, s.throughput), (0, 0.0, 0.0));
    }

    #[test]
    fn profile_errors() {
        assert_eq!(SpsProfile::from_secs(&[]), Err(ScheduleError::EmptyProfile));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-320] {
            assert!(matches!(
                SpsProfile::from_secs(&[0.1, bad]),
                Err(ScheduleError::BadSeconds { batch: 2, .. })
            ));
        }
        let p = profile(&[10.0, 20.0]);
        assert_eq!((p.max_batch(), p.sps(0), p.sps(3)), (2, 0.0, 0.0));
        assert_close(p.sps(2), 20.0);
    }

    #[test]
    fn threshold_is_per_slot() {
        let c = [0.9, 0.6, 0.95, 0.2];
        assert_eq!(threshold_len(&c, 0.5), 3);
        assert_eq!(threshold_len(&c, 0.7), 1);
        assert_eq!(threshold_len(&c, 0.95), 0);
        assert_eq!(threshold_len(&c, 0.0), 4);
        assert_eq!(threshold_len(&c, -1.0), 4);
        assert_eq!(threshold_len(&c, f32::NAN), 4);
        assert_eq!(threshold_len(&[0.9, f32::NAN, 0.9], 0.5), 1);
        assert_eq!(threshold_len(&[], 0.5), 0);
    }
}
