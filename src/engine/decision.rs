//! Whether a request drafts, decided by the engine for every request it runs and for every
//! step (docs/DSPARK.md, "The drafter decision"):
//!
//! - **Per request**, at its first decode step: the verdict a load makes from the cost cache
//!   ([`super::verdict::decide`]) made again from what the requests of this process showed so
//!   far (the same decaying acceptance, [`super::verdict::record_run`] at each request's end).
//!   A drafter that cannot pay is left out of the request altogether, every
//!   [`super::verdict::PROBE_EVERY`]th such request probing it again; a request that drafts gets
//!   its own [`Bypass`] seeded with the costs charged at the acceptance observed, which turns
//!   drafting off and on step by step as the request goes.
//! - **Per step**, at the step's occupancy: when `r` requests decode together, drafting costs
//!   each step the rows of every verify, `r · (ℓ + 1)` rows against `r` plain ones. With the
//!   batched step curve measured at load (seconds of a step of B rows), a step drafts only
//!   while `τ · t(r) ≥ margin · (t(r · (ℓ + 1)) + t_draft)`, τ the observed accepted length
//!   with its prior: at high occupancy the verify rows stop being nearly free and drafting
//!   turns off for everyone (vLLM turns speculation off at high batch for the same reason).

use super::cost_cache::Measured;
use super::verdict::{self, History, Profile, RunObserved, Verdict};
use crate::speculative::bypass::{BypassConfig, CycleCosts};
use crate::speculative::stats::SpecStats;

/// What a request does with the engine's drafter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admit {
    /// Draft, with a bypass seeded from this config (`None`: no bypass, `--spec-no-bypass`).
    Draft(Option<BypassConfig>),
    /// Leave the drafter out for this whole request (it cannot pay at the costs measured and
    /// the acceptance observed).
    Off,
}

/// The engine's drafter decision: the costs measured at load, the acceptance requests showed,
/// and the step curve over rows.
#[derive(Debug, Clone)]
pub struct Decision {
    costs: CycleCosts,
    step_secs: Option<Vec<f64>>,
    deep: Option<verdict::DeepCosts>,
    fixed: bool,
    history: History,
    config: BypassConfig,
    /// Seconds of a batched step of B rows (index B − 1), where measured.
    curve: Option<Vec<f64>>,
    /// Requests admitted so far: the first drafts (the cost cache's verdict before the load
    /// decided to load the drafter; its bypass probes), later ones as the verdict says.
    admitted: u64,
}

impl Decision {
    /// From the load's measurements; `None` without cycle costs (the bypass is off).
    pub fn new(m: &Measured, fixed: bool, curve: Option<Vec<f64>>) -> Option<Decision> {
        Some(Decision {
            costs: m.costs.filter(CycleCosts::is_valid)?,
            step_secs: m.step_secs.clone(),
            deep: m.deep,
            fixed,
            // A load that probes (the cost cache's verdict) drafts its first request.
            history: m.history.clone(),
            config: BypassConfig::default(),
            curve,
            admitted: 0,
        })
    }

    fn profile(&self) -> Profile<'_> {
        Profile {
            costs: self.costs,
            step_secs: self.step_secs.as_deref(),
            deep: self.deep,
            fixed: self.fixed,
        }
    }

    /// A new request's verdict (counted: a request left out brings the next probe nearer).
    /// The load's first request drafts (the verdict before the load chose to load the
    /// drafter), as do requests while a probe is pending (its request has not ended).
    pub fn admit(&mut self) -> Admit {
        let first = self.admitted == 0;
        self.admitted += 1;
        let profile = self.profile();
        let verdict = if self.history.probe || first {
            Verdict::Load
        } else {
            verdict::decide(&profile, &self.history, self.config)
        };
        let charged = profile.charged(self.history.observed.as_ref());
        let draft = Admit::Draft(Some(BypassConfig {
            costs: charged.is_valid().then_some(charged),
            ..self.config
        }));
        match verdict {
            Verdict::Load => draft,
            Verdict::LeaveOut(_) => {
                self.history.left_out = self.history.left_out.saturating_add(1);
                Admit::Off
            }
            Verdict::Probe(_) => {
                self.history.left_out = 0;
                self.history.probe = true;
                draft
            }
        }
    }

    /// A request's drafting at its end (`generated` tokens, ending at cache row `end`).
    pub fn record(&mut self, spec: &SpecStats, generated: usize, end: u32) {
        let run = RunObserved {
            cycles: spec.cycles,
            committed: spec.accepted + spec.cycles,
            verify_rows: spec.drafted + spec.cycles,
            position: (f64::from(end) - generated as f64 / 2.0).max(0.0),
        };
        let profile = Profile {
            costs: self.costs,
            step_secs: self.step_secs.as_deref(),
            deep: self.deep,
            fixed: self.fixed,
        };
        verdict::record_run(&mut self.history, run, &profile, &self.config);
    }

    /// Whether a step where `decoding` requests decode pays for drafting `n_draft` tokens
    /// each, at the accepted length observed so far (true where the curve does not reach).
    pub fn step_pays(&self, decoding: usize, n_draft: u32) -> bool {
        let Some(curve) = &self.curve else {
            return true;
        };
        if decoding <= 1 {
            return true;
        }
        let t = |rows: usize| curve.get(rows.checked_sub(1)?).copied();
        let rows = decoding * (n_draft as usize + 1);
        let (Some(plain), Some(verify)) = (t(decoding), t(rows)) else {
            return true;
        };
        let tau = self
            .history
            .observed
            .map_or(self.config.prior.tau, |o| o.tau_with_prior(&self.config));
        tau * plain >= self.config.margin * (verify + self.costs.draft + self.costs.inject)
    }

    /// The accepted length the decision currently assumes.
    pub fn tau(&self) -> f64 {
        self.history
            .observed
            .map_or(self.config.prior.tau, |o| o.tau_with_prior(&self.config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> CycleCosts {
        CycleCosts {
            step: 0.010,
            draft: 0.002,
            inject: 0.001,
            verify: 0.012,
            verify_rows: 8,
        }
    }

    fn measured() -> Measured {
        Measured {
            costs: Some(costs()),
            ..Measured::default()
        }
    }

    /// A drafter that accepts nothing is left out once enough requests showed it, and probed
    /// again every PROBE_EVERY-th request.
    #[test]
    fn zero_acceptance_turns_requests_off_then_probes() {
        let mut d = Decision::new(&measured(), true, None).unwrap();
        let run = SpecStats {
            cycles: 16,
            drafted: 16 * 7,
            accepted: 0,
            ..SpecStats::default()
        };
        let mut verdicts = Vec::new();
        for _ in 0..24 {
            let a = d.admit();
            if matches!(a, Admit::Draft(_)) {
                d.record(&run, 64, 64);
            }
            verdicts.push(a);
        }
        // The first requests draft (too little is known), later ones are off.
        assert!(matches!(verdicts[0], Admit::Draft(_)));
        let off = verdicts.iter().filter(|a| **a == Admit::Off).count();
        assert!(off >= 16, "{verdicts:?}");
        // Left out requests are probed again now and then.
        let after: Vec<bool> = verdicts[verdicts.iter().position(|a| *a == Admit::Off).unwrap()..]
            .iter()
            .map(|a| matches!(a, Admit::Draft(_)))
            .collect();
        assert!(after.iter().any(|&x| x), "never probed again: {verdicts:?}");
    }

    /// A drafter that accepts most drafts keeps drafting.
    #[test]
    fn good_acceptance_keeps_drafting() {
        let mut d = Decision::new(&measured(), true, None).unwrap();
        let run = SpecStats {
            cycles: 16,
            drafted: 16 * 7,
            accepted: 16 * 5,
            ..SpecStats::default()
        };
        for _ in 0..24 {
            assert!(matches!(d.admit(), Admit::Draft(_)));
            d.record(&run, 96, 96);
        }
    }

    /// At occupancy, a step whose verify rows cost more than τ plain steps does not draft.
    #[test]
    fn occupancy_gate() {
        // t(B) = 10 ms up to 8 rows (the weights dominate), then 1.25 ms per row.
        let curve: Vec<f64> = (1..=64).map(|b| 0.010f64.max(0.00125 * b as f64)).collect();
        let d = Decision::new(&measured(), true, Some(curve)).unwrap();
        // One request: always (the request's own bypass weighs it).
        assert!(d.step_pays(1, 7));
        // 2 requests × 2 rows cost what 2 plain rows do (10 ms): τ = 2 pays.
        assert!(d.step_pays(2, 1));
        // 8 requests × 8 rows = 64 rows = 80 ms against 10 ms plain: τ = 2 does not pay.
        assert!(!d.step_pays(8, 7));
        // Beyond the curve: no opinion.
        assert!(d.step_pays(16, 7));
    }
}
