//! How a speculative generation chooses what to verify: the verify policy (every draft, a
//! confidence threshold, or the paper's Algorithm 1 over measured step speeds) and the
//! speculation settings of one generation. The loops that apply them belong to the engine
//! (`engine::speculate` for one request, `engine::batch_run` across requests).

use super::bypass::BypassConfig;
use super::schedule::{confidence_schedule, threshold_len, SpsProfile};

/// How many drafts each cycle verifies.
#[derive(Debug, Clone, PartialEq)]
pub enum VerifyPolicy {
    /// Every draft (up to `n_max`).
    Fixed,
    /// Up to the first draft whose confidence is below `p_min` (`--spec-draft-p-min`).
    Threshold(f32),
    /// The paper's Algorithm 1 over target steps per second measured at start-up.
    Schedule(SpsProfile),
}

/// Speculation settings of one generation.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecOptions {
    /// `--spec-draft-n-max`: drafts verified per cycle at most.
    pub n_max: u32,
    pub policy: VerifyPolicy,
    /// Fall back to plain decoding while drafting does not pay (`None`: always draft).
    pub bypass: Option<BypassConfig>,
}

/// The verify length for confidences `conf` under `policy`, at most `max`.
pub fn verify_len(policy: &VerifyPolicy, conf: &[f32], max: usize) -> usize {
    let conf = &conf[..conf.len().min(max)];
    match policy {
        VerifyPolicy::Fixed => conf.len(),
        VerifyPolicy::Threshold(p) => threshold_len(conf, *p),
        VerifyPolicy::Schedule(sps) => confidence_schedule(&[conf], sps)
            .lens
            .first()
            .copied()
            .unwrap_or(0),
    }
}
