//! Whether a run loads its drafter, decided before the load from what earlier runs kept
//! ([`super::cost_cache`]): the cycle costs measured on this device and the acceptance the
//! drafter showed, as pure functions of those figures so the decision can be tested on
//! synthetic profiles.
//!
//! - Each cycle is charged the verify the policy actually runs: the fixed block verifies
//!   `n_draft + 1` rows, the threshold and schedule policies the mean rows their earlier cycles
//!   verified ([`charged_costs`]), priced from the SPS(B) step times where they were measured,
//!   else between a plain step (1 row) and the full verify.
//! - The acceptance is an exponentially decaying sum ([`Observed`]): every cycle weighs
//!   `0.5^(1 / HALF_LIFE)` of the next one, so the figure follows the drafter's recent use, and
//!   one generation weighs at most [`RUN_WEIGHT_CAP`] cycles. It decides only after
//!   [`OBSERVED_MIN_RUNS`] generations and [`OBSERVED_MIN`] cycles of weight: one short prompt
//!   the drafter does not suit no longer switches it off for every later prompt.
//! - A "leave it out" verdict is not for good: every [`PROBE_EVERY`]th run it would leave the
//!   drafter out loads it instead, with its costs measured again (a probe: the bypass drafts a
//!   few cycles and stops if they do not pay). A probe whose acceptance pays at the costs it
//!   measured replaces the history, which reverses the verdict ([`record_run`]).

use crate::speculative::bypass::{drafting_can_pay, drafting_pays, BypassConfig, CycleCosts};

/// Half-life of the observed acceptance, in drafting cycles.
pub const HALF_LIFE: f64 = 256.0;

/// Cycles of weight observed before the acceptance decides whether a drafter is loaded.
pub const OBSERVED_MIN: f64 = 32.0;

/// Generations observed before the acceptance decides whether a drafter is loaded.
pub const OBSERVED_MIN_RUNS: u32 = 3;

/// The most cycles one generation weighs (a longer one counts at its mean).
pub const RUN_WEIGHT_CAP: f64 = 64.0;

/// Every this many runs that would leave the drafter out, one loads it as a probe.
pub const PROBE_EVERY: u32 = 8;

/// The acceptance the drafter showed in earlier generations, as decaying sums over cycles.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Observed {
    /// Weight of the cycles observed (each counts 1 when new, less as later ones come).
    pub cycles: f64,
    /// Tokens those cycles committed (the bonus included), under the same weights.
    pub committed: f64,
    /// Rows those cycles verified (drafts verified plus the bonus row), same weights.
    pub verify_rows: f64,
    /// Positions those cycles drafted at, same weights.
    pub position: f64,
    /// Generations recorded.
    pub runs: u32,
}

impl Observed {
    /// Committed tokens per cycle (the observed accepted length τ), without a prior.
    pub fn tau(&self) -> f64 {
        self.committed / self.cycles.max(f64::MIN_POSITIVE)
    }

    /// Rows verified per cycle.
    pub fn mean_rows(&self) -> f64 {
        self.verify_rows / self.cycles.max(f64::MIN_POSITIVE)
    }

    /// The mean position cycles drafted at.
    pub fn mean_position(&self) -> f64 {
        self.position / self.cycles.max(f64::MIN_POSITIVE)
    }

    /// The posterior-mean τ with the bypass's prior (`config.prior`).
    pub fn tau_with_prior(&self, config: &BypassConfig) -> f64 {
        let w = config.prior.weight.max(0.0);
        if w + self.cycles <= 0.0 {
            return config.prior.tau;
        }
        (w * config.prior.tau + self.committed) / (w + self.cycles)
    }

    /// Whether there is enough of it to decide.
    pub fn decides(&self) -> bool {
        self.runs >= OBSERVED_MIN_RUNS && self.cycles >= OBSERVED_MIN
    }
}

/// One generation's drafting: its cycles, the tokens they committed, the rows verified and
/// the mean position of its cycles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunObserved {
    pub cycles: u64,
    pub committed: u64,
    pub verify_rows: u64,
    pub position: f64,
}

impl RunObserved {
    /// As an [`Observed`] of one run, at most [`RUN_WEIGHT_CAP`] cycles of weight.
    fn weighed(&self) -> Observed {
        let c = self.cycles as f64;
        let scale = if c > RUN_WEIGHT_CAP {
            RUN_WEIGHT_CAP / c
        } else {
            1.0
        };
        Observed {
            cycles: c * scale,
            committed: self.committed as f64 * scale,
            verify_rows: self.verify_rows as f64 * scale,
            position: self.position.max(0.0) * c * scale,
            runs: 1,
        }
    }
}

/// A plain step and a full verify timed again at position `pos` (the [`CycleCosts`] are at
/// position 0): attention grows with the rows before, so a cycle costs more deeper in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeepCosts {
    pub pos: u32,
    pub step: f64,
    pub verify: f64,
}

impl DeepCosts {
    /// `costs` (at position 0, their verify possibly charged at fewer rows already) at
    /// position `at`: the step and the verify each scaled by the growth measured between 0 and
    /// `pos`, linearly in the position (and beyond `pos` too). Unchanged at 0 or when the
    /// figures are not usable.
    pub fn at(&self, costs: &CycleCosts, full_verify: f64, at: f64) -> CycleCosts {
        let ok = |x: f64| x.is_finite() && x > 0.0;
        if self.pos == 0 || !(at.is_finite() && at > 0.0) {
            return *costs;
        }
        if !(ok(self.step) && ok(self.verify) && ok(costs.step) && ok(full_verify)) {
            return *costs;
        }
        let f = at / f64::from(self.pos);
        let grow = |deep: f64, base: f64| (1.0 + (deep / base - 1.0) * f).max(0.0);
        CycleCosts {
            step: costs.step * grow(self.step, costs.step),
            verify: costs.verify * grow(self.verify, full_verify),
            ..*costs
        }
    }
}

/// What earlier runs left that the decision reads (and [`record_run`] updates).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// The acceptance observed so far.
    pub observed: Option<Observed>,
    /// Runs left out since the last probe.
    pub left_out: u32,
    /// The next generation recorded is a probe's: its acceptance decides anew.
    pub probe: bool,
}

/// The verify length a policy runs: the block (`n_draft + 1` rows) for the fixed policy, else
/// the mean rows earlier cycles verified (the block until some were observed).
pub fn policy_rows(fixed: bool, n_draft: u32, observed: Option<&Observed>) -> f64 {
    let full = f64::from(n_draft) + 1.0;
    match observed {
        Some(o) if !fixed && o.cycles > 0.0 => o.mean_rows().clamp(1.0, full),
        _ => full,
    }
}

/// `costs` (a verify of `costs.verify_rows` rows) with the verify charged at `rows` rows: from
/// the SPS(B) step times `step_secs` (index B − 1) where they reach, else linearly between a
/// plain step (1 row) and the full verify; fractional rows interpolate. `verify_rows` becomes
/// `rows` rounded (the most a cycle commits then).
pub fn charged_costs(costs: &CycleCosts, rows: f64, step_secs: Option<&[f64]>) -> CycleCosts {
    let full = f64::from(costs.verify_rows.max(1));
    let rows = if rows.is_finite() {
        rows.clamp(1.0, full)
    } else {
        full
    };
    let at = |b: usize| -> Option<f64> {
        let s = step_secs?;
        (s.len() >= costs.verify_rows as usize).then(|| s.get(b - 1).copied())?
    };
    let lo = rows.floor() as usize;
    let hi = rows.ceil() as usize;
    let frac = rows - rows.floor();
    let verify = match (at(lo), at(hi)) {
        _ if rows >= full => costs.verify,
        (Some(a), Some(b)) => a + (b - a) * frac,
        _ if full > 1.0 => costs.step + (costs.verify - costs.step) * (rows - 1.0) / (full - 1.0),
        _ => costs.verify,
    };
    CycleCosts {
        verify,
        verify_rows: rows.round() as u32,
        ..*costs
    }
}

/// What was measured for a drafter on this device, and its policy: what a cycle is charged
/// from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile<'a> {
    /// A cycle's costs at position 0, a verify of the full block.
    pub costs: CycleCosts,
    /// The SPS(B) step times, where measured.
    pub step_secs: Option<&'a [f64]>,
    /// A step and a full verify at a deeper position, where measured.
    pub deep: Option<DeepCosts>,
    /// The policy verifies the full block every cycle.
    pub fixed: bool,
}

impl Profile<'_> {
    /// A cycle charged at the verify rows the policy runs ([`policy_rows`], [`charged_costs`])
    /// and at the mean position the observed cycles drafted at ([`DeepCosts::at`]).
    pub fn charged(&self, observed: Option<&Observed>) -> CycleCosts {
        let n_draft = self.costs.verify_rows.saturating_sub(1);
        let rows = policy_rows(self.fixed, n_draft, observed);
        let c = charged_costs(&self.costs, rows, self.step_secs);
        match (self.deep, observed) {
            (Some(d), Some(o)) if o.cycles > 0.0 => d.at(&c, self.costs.verify, o.mean_position()),
            _ => c,
        }
    }
}

/// Why a run would leave its drafter out: the costs it was charged and, where the observed
/// acceptance ruled it out, that acceptance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unpaying {
    pub costs: CycleCosts,
    pub observed: Option<Observed>,
}

/// What the next run does with its drafter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Load it: it can pay, or too little is known to say it cannot.
    Load,
    /// Leave it out.
    LeaveOut(Unpaying),
    /// It would be left out, but this run probes: load it, measure its costs again and let its
    /// acceptance decide anew.
    Probe(Unpaying),
}

/// The decision from `profile` (charged at the rows and depth earlier cycles ran) and the
/// history: left out where even accepting every draft
/// the bypass would stop after its first probe cycle ([`drafting_can_pay`]), or where enough
/// observed acceptance ([`Observed::decides`], with the prior) does not pay at the charged
/// costs; every [`PROBE_EVERY`]th such run probes instead.
pub fn decide(profile: &Profile, history: &History, config: BypassConfig) -> Verdict {
    let charged = profile.charged(history.observed.as_ref());
    let config = BypassConfig {
        costs: Some(charged),
        ..config
    };
    let why = if let Ok(false) = drafting_can_pay(config) {
        Unpaying {
            costs: charged,
            observed: None,
        }
    } else {
        match history.observed {
            Some(o)
                if o.decides()
                    && !drafting_pays(&charged, o.tau_with_prior(&config), config.margin) =>
            {
                Unpaying {
                    costs: charged,
                    observed: Some(o),
                }
            }
            _ => return Verdict::Load,
        }
    };
    if history.left_out + 1 >= PROBE_EVERY {
        Verdict::Probe(why)
    } else {
        Verdict::LeaveOut(why)
    }
}

/// Adds one generation to `history`. A probe's generation whose acceptance (with the prior)
/// pays at the costs `profile` charges replaces the history (the verdict is reversed: the next runs
/// load the drafter until enough is observed again); any other is added to the decaying sums.
pub fn record_run(
    history: &mut History,
    run: RunObserved,
    profile: &Profile,
    config: &BypassConfig,
) {
    let probe = std::mem::take(&mut history.probe);
    if run.cycles == 0 {
        return;
    }
    let new = run.weighed();
    if probe {
        let charged = profile.charged(Some(&new));
        if drafting_pays(&charged, new.tau_with_prior(config), config.margin) {
            history.observed = Some(new);
            history.left_out = 0;
            return;
        }
    }
    let old = history.observed.unwrap_or_default();
    let k = 0.5f64.powf(new.cycles / HALF_LIFE);
    history.observed = Some(Observed {
        cycles: old.cycles * k + new.cycles,
        committed: old.committed * k + new.committed,
        verify_rows: old.verify_rows * k + new.verify_rows,
        position: old.position * k + new.position,
        runs: old.runs.saturating_add(1),
    });
}

#[cfg(test)]
#[path = "verdict_tests.rs"]
mod tests;
