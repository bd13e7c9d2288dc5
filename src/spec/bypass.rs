//! Whether to draft at all (dspark-spec.md §3.6): speculation loses when the target step is
//! already cheap, drafts are expensive, or acceptance collapses. [`Bypass`] decides per step
//! from measured costs; it holds no clock (the caller passes seconds it measured), so it is
//! deterministic and testable.
//!
//! Two rules, both leading to `plain_steps` plain decode steps and then a probe of
//! `probe_cycles` speculative cycles that refreshes the estimates before the next decision
//! (each probe that ends in a bypass again doubles the plain stretch, up to `max_plain_steps`,
//! so a drafter that never pays costs ever less; a longer run of drafting resets it):
//! - cost model (vllm-metal #766, sparkinfer): draft while the expected speculative rate
//!   `τ / (t_draft + t_verify)` is at least `margin / t_plain`, from exponential moving averages
//!   of the accepted length τ (tokens committed per cycle, the bonus included), the draft and
//!   verify seconds per cycle and the seconds per plain step;
//! - circuit breaker (FreeToken #71): once `window` drafts have been verified since the last
//!   decision point, a windowed acceptance below `min_acceptance` bypasses. It needs no timing,
//!   so it also works before any plain step was measured.
//!
//! The cost model needs `t_plain`: seed it with the profiled single-row step
//! (`record_plain(1 / SPS(1))`); plain steps taken while bypassing refresh it. Until it is
//! known only the breaker acts. While bypassing, the caller must keep the drafter's context
//! current (every committed target row injected, §3.3).

/// A configuration value out of range. Every variant names it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BypassError {
    #[error("{name} = {value} is invalid: {rule}")]
    Invalid {
        name: &'static str,
        value: f64,
        rule: &'static str,
    },
}

/// Thresholds of [`Bypass`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BypassConfig {
    /// Weight of a new sample in the moving averages, in `(0, 1]`. Default 0.2. The first
    /// samples after a reset weigh `1/n` (plain mean) until that falls below this.
    pub ema_alpha: f64,
    /// Draft while `τ · t_plain >= margin · (t_draft + t_verify)`, i.e. speculation must beat
    /// plain decoding by this factor. Default 1.05; 0 turns the cost model off.
    pub margin: f64,
    /// Plain steps per bypass before probing again. Default 64 (FreeToken #71).
    pub plain_steps: u32,
    /// The plain stretch doubles after each probe that ends in a bypass again, up to this.
    /// Default 1024 (a probe of 4 cycles then costs under 0.5 % of the steps with a drafter
    /// that never pays).
    pub max_plain_steps: u32,
    /// Speculative cycles of a probe (and of the warm-up at the start) before the next decision.
    /// Default 4: a wrong call costs in proportion to how far τ is from break-even, so the
    /// close calls a short probe gets wrong are the cheap ones, while every probe of a drafter
    /// that does not pay costs its cycles (on lavapipe, where verifying 7 rows costs 2 decode
    /// steps and a draft 0.8, `flint generate -n 128` with the default drafter ran 17.7 instead
    /// of 16.2 tok/s, medians of four alternating runs, against 8 cycles).
    pub probe_cycles: u32,
    /// Verified drafts the breaker waits for before judging the acceptance. Default 32
    /// (FreeToken #71).
    pub window: u32,
    /// The breaker bypasses when accepted / verified drafts over the window is below this.
    /// Default 0.1; 0 turns the breaker off. FreeToken uses 0.6, but its ratio is over short
    /// drafts: over DSpark's γ = 7 blocks, drafters that pay off measure 0.15–0.5 (llama.cpp
    /// reports 0.23–0.33 at 1.7–2.1×, dspark-spec.md §5.3), so only a useless drafter is cut
    /// here and the cost model judges the rest.
    pub min_acceptance: f64,
}

impl Default for BypassConfig {
    fn default() -> Self {
        Self {
            ema_alpha: 0.2,
            margin: 1.05,
            plain_steps: 64,
            max_plain_steps: 1024,
            probe_cycles: 4,
            window: 32,
            min_acceptance: 0.1,
        }
    }
}

impl BypassConfig {
    /// Never bypass: both rules off.
    pub fn never() -> Self {
        Self {
            margin: 0.0,
            min_acceptance: 0.0,
            ..Self::default()
        }
    }

    /// Checks every value; the error names the first one out of range.
    pub fn validate(&self) -> Result<(), BypassError> {
        let invalid = |name, value, rule| Err(BypassError::Invalid { name, value, rule });
        if !(self.ema_alpha > 0.0 && self.ema_alpha <= 1.0) {
            return invalid("ema_alpha", self.ema_alpha, "it must be in (0, 1]");
        }
        if !(self.margin.is_finite() && self.margin >= 0.0) {
            return invalid("margin", self.margin, "it must be finite and >= 0");
        }
        if self.plain_steps == 0 {
            return invalid("plain_steps", 0.0, "it must be >= 1");
        }
        if self.max_plain_steps < self.plain_steps {
            let v = f64::from(self.max_plain_steps);
            return invalid("max_plain_steps", v, "it must be >= plain_steps");
        }
        if !(0.0..=1.0).contains(&self.min_acceptance) {
            return invalid(
                "min_acceptance",
                self.min_acceptance,
                "it must be in [0, 1]",
            );
        }
        Ok(())
    }
}

/// An exponential moving average whose first `n` samples after a restart weigh `1/n`.
#[derive(Debug, Clone, Copy, Default)]
struct Ema {
    value: Option<f64>,
    n: u32,
}

impl Ema {
    /// Adds a sample; non-finite and negative ones are ignored.
    fn update(&mut self, x: f64, alpha: f64) {
        if !(x.is_finite() && x >= 0.0) {
            return;
        }
        self.n = self.n.saturating_add(1);
        let w = alpha.max(1.0 / f64::from(self.n));
        self.value = Some(self.value.map_or(x, |v| v + w * (x - v)));
    }

    /// The next sample replaces the value (which is kept until then).
    fn restart(&mut self) {
        self.n = 0;
    }
}

/// The per-sequence bypass planner. Call [`Bypass::should_draft`] once per decode step, then
/// report what ran: [`Bypass::record_cycle`] or [`Bypass::record_plain`].
#[derive(Debug, Clone)]
pub struct Bypass {
    config: BypassConfig,
    t_plain: Ema,
    t_draft: Ema,
    t_verify: Ema,
    tau: Ema,
    /// Drafts verified and accepted since the last decision point (the breaker's window).
    proposed: u64,
    accepted: u64,
    /// Plain steps left in the current bypass.
    plain_left: u32,
    /// Cycles left in the current probe (or warm-up) before the rules are consulted.
    probe_left: u32,
    /// Whether any bypass happened yet, the cycles drafted since the last one ended, and how
    /// many times the plain stretch has doubled.
    bypassed: bool,
    drafted_since: u32,
    doublings: u32,
}

impl Bypass {
    /// A planner that starts by drafting (a warm-up of `probe_cycles` cycles).
    pub fn new(config: BypassConfig) -> Result<Self, BypassError> {
        config.validate()?;
        Ok(Self {
            config,
            t_plain: Ema::default(),
            t_draft: Ema::default(),
            t_verify: Ema::default(),
            tau: Ema::default(),
            proposed: 0,
            accepted: 0,
            plain_left: 0,
            probe_left: config.probe_cycles,
            bypassed: false,
            drafted_since: 0,
            doublings: 0,
        })
    }

    /// Whether this decode step should be a speculative cycle (`false`: a plain step). Each
    /// `false` counts as one plain step of the current bypass.
    pub fn should_draft(&mut self) -> bool {
        if self.plain_left > 0 {
            self.plain_left -= 1;
            return false;
        }
        if self.probe_left > 0 {
            return true;
        }
        let bypass = self.breaker_trips() || self.plain_is_faster();
        if self.proposed >= self.window() {
            // A tumbling window: judge each `window` drafts afresh.
            self.proposed = 0;
            self.accepted = 0;
        }
        if !bypass {
            return true;
        }
        // Bypass: this step is the first plain one; then probe with fresh estimates. A probe
        // that lost again (no more than twice its cycles drafted since the last bypass)
        // doubles the stretch; a longer run of drafting resets it.
        let lost_probe = self.bypassed && self.drafted_since <= 2 * self.config.probe_cycles;
        self.doublings = if lost_probe {
            (self.doublings + 1).min(31)
        } else {
            0
        };
        let stretch = u64::from(self.config.plain_steps) << self.doublings;
        let stretch = stretch.min(u64::from(self.config.max_plain_steps));
        self.plain_left = u32::try_from(stretch).unwrap_or(u32::MAX).saturating_sub(1);
        self.bypassed = true;
        self.drafted_since = 0;
        self.probe_left = self.config.probe_cycles;
        self.proposed = 0;
        self.accepted = 0;
        for ema in [&mut self.t_draft, &mut self.t_verify, &mut self.tau] {
            ema.restart();
        }
        self.t_plain.restart();
        false
    }

    /// Reports a plain decode step that took `secs` seconds (also the way to seed `t_plain`).
    pub fn record_plain(&mut self, secs: f64) {
        self.t_plain.update(secs, self.config.ema_alpha);
    }

    /// Reports a speculative cycle: `draft_secs` drafting, `verify_secs` verifying `proposed`
    /// drafts (ℓ, 0 allowed) of which `accepted` were accepted (committing `accepted + 1`
    /// tokens). `accepted` above `proposed` counts as `proposed`.
    pub fn record_cycle(
        &mut self,
        draft_secs: f64,
        verify_secs: f64,
        proposed: u32,
        accepted: u32,
    ) {
        let alpha = self.config.ema_alpha;
        let accepted = accepted.min(proposed);
        self.t_draft.update(draft_secs, alpha);
        self.t_verify.update(verify_secs, alpha);
        self.tau.update(f64::from(accepted) + 1.0, alpha);
        self.proposed = self.proposed.saturating_add(u64::from(proposed));
        self.accepted = self.accepted.saturating_add(u64::from(accepted));
        self.probe_left = self.probe_left.saturating_sub(1);
        self.drafted_since = self.drafted_since.saturating_add(1);
    }

    /// Whether the planner is in a bypass (plain steps left).
    pub fn bypassing(&self) -> bool {
        self.plain_left > 0
    }

    /// The breaker's window in drafts (at least 1).
    fn window(&self) -> u64 {
        u64::from(self.config.window.max(1))
    }

    /// The circuit breaker: a full window with too low an acceptance.
    fn breaker_trips(&self) -> bool {
        self.proposed >= self.window()
            && (self.accepted as f64) < self.config.min_acceptance * self.proposed as f64
    }

    /// The cost model: plain decoding is expected to be faster than speculation by the margin.
    fn plain_is_faster(&self) -> bool {
        let (Some(t_plain), Some(t_draft), Some(t_verify), Some(tau)) = (
            self.t_plain.value,
            self.t_draft.value,
            self.t_verify.value,
            self.tau.value,
        ) else {
            return false;
        };
        tau * t_plain < self.config.margin * (t_draft + t_verify)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `steps` decode steps against a drafter with fixed costs and acceptance; returns
    /// the decision of each step.
    fn run(
        bypass: &mut Bypass,
        steps: usize,
        cycle: (f64, f64, u32, u32),
        plain: f64,
    ) -> Vec<bool> {
        (0..steps)
            .map(|_| {
                let draft = bypass.should_draft();
                if draft {
                    bypass.record_cycle(cycle.0, cycle.1, cycle.2, cycle.3);
                } else {
                    bypass.record_plain(plain);
                }
                draft
            })
            .collect()
    }

    fn seeded(config: BypassConfig, t_plain: f64) -> Bypass {
        let mut b = Bypass::new(config).expect("valid config");
        b.record_plain(t_plain);
        b
    }

    /// The indices of steps that start a run of drafting steps.
    fn probe_starts(decisions: &[bool]) -> Vec<usize> {
        (1..decisions.len())
            .filter(|&i| decisions[i] && !decisions[i - 1])
            .collect()
    }

    #[test]
    fn expensive_useless_drafter_is_bypassed_and_probed() {
        // τ = 1 (nothing accepted), drafting + verifying 17 ms against a 10 ms plain step.
        let config = BypassConfig::default();
        let mut b = seeded(config, 0.010);
        let d = run(&mut b, 1000, (0.005, 0.012, 7, 0), 0.010);
        // Warm-up of p cycles, then bypasses of 64, 128, 256, 512 plain steps (each probe
        // lost again), each followed by a p-cycle probe.
        let p = config.probe_cycles as usize;
        assert!(d[..p].iter().all(|&x| x));
        assert!(d[p..p + 64].iter().all(|&x| !x));
        let starts = probe_starts(&d);
        let first = p + 64;
        let want = [
            first,
            first + 128 + p,
            first + 128 + 256 + 2 * p,
            first + 128 + 256 + 512 + 3 * p,
        ];
        assert_eq!(starts, want);
        assert_eq!(d.iter().filter(|&&x| x).count(), p * (1 + starts.len()));
        // The stretch stops doubling at max_plain_steps.
        let mut b = seeded(config, 0.010);
        let d = run(&mut b, 12000, (0.005, 0.012, 7, 0), 0.010);
        let starts = probe_starts(&d);
        let gaps: Vec<usize> = starts.windows(2).map(|p| p[1] - p[0]).collect();
        assert_eq!(
            gaps[..5],
            [128 + p, 256 + p, 512 + p, 1024 + p, 1024 + p],
            "probes at {starts:?}"
        );
    }

    #[test]
    fn good_drafter_is_never_bypassed() {
        // τ = 4 for 14 ms against a 10 ms plain step.
        let mut b = seeded(BypassConfig::default(), 0.010);
        let d = run(&mut b, 2000, (0.002, 0.012, 7, 3), 0.010);
        assert!(d.iter().all(|&x| x));
        assert!(!b.bypassing());
    }

    #[test]
    fn breaker_needs_no_timing() {
        // t_plain never measured: only the breaker can act. 1 of 7 per cycle is 0.14 >= 0.1:
        // kept; 0 of 7: bypassed once the 32-draft window is full (5 cycles), then probed.
        let mut b = Bypass::new(BypassConfig::default()).expect("valid config");
        let d = run(&mut b, 500, (0.005, 0.012, 7, 1), f64::NAN);
        assert!(d.iter().all(|&x| x));
        let config = BypassConfig {
            probe_cycles: 0,
            ..BypassConfig::default()
        };
        let mut b = Bypass::new(config).expect("valid config");
        let d = run(&mut b, 500, (0.005, 0.012, 7, 0), f64::NAN);
        assert!(d[..5].iter().all(|&x| x) && !d[5]);
        assert_eq!(probe_starts(&d)[..2], [69, 69 + 69]);
    }

    #[test]
    fn drafter_that_recovers_is_picked_up_by_the_next_probe() {
        let mut b = seeded(BypassConfig::default(), 0.010);
        let bad = run(&mut b, 100, (0.005, 0.012, 7, 0), 0.010);
        assert!(bad.iter().any(|&x| !x));
        let mut good = run(&mut b, 500, (0.002, 0.012, 7, 3), 0.010);
        let first = good.iter().position(|&x| x).expect("a probe");
        assert!(good.drain(first..).all(|x| x));
    }

    #[test]
    fn never_does_not_bypass() {
        let mut b = seeded(BypassConfig::never(), 0.001);
        let d = run(&mut b, 1000, (0.050, 0.050, 7, 0), 0.001);
        assert!(d.iter().all(|&x| x));
    }

    #[test]
    fn config_errors_name_the_value() {
        let bad = [
            BypassConfig {
                ema_alpha: 0.0,
                ..BypassConfig::default()
            },
            BypassConfig {
                margin: f64::NAN,
                ..BypassConfig::default()
            },
            BypassConfig {
                plain_steps: 0,
                ..BypassConfig::default()
            },
            BypassConfig {
                min_acceptance: 1.5,
                ..BypassConfig::default()
            },
            BypassConfig {
                max_plain_steps: 8,
                ..BypassConfig::default()
            },
        ];
        let names: Vec<_> = bad
            .iter()
            .map(|c| match Bypass::new(*c) {
                Err(BypassError::Invalid { name, .. }) => name,
                Ok(_) => "accepted",
            })
            .collect();
        assert_eq!(
            names,
            [
                "ema_alpha",
                "margin",
                "plain_steps",
                "min_acceptance",
                "max_plain_steps"
            ]
        );
    }
}
