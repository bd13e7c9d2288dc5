//! Whether to draft at all (docs/DSPARK.md): speculation loses when the target step is
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
//!
//! Speculation that never loses: with [`BypassConfig::costs`] (a [`CycleCosts`] profile measured
//! at load: a plain step, a draft, an injection and a verify of B rows) the planner knows what
//! a cycle costs before it drafts. [`drafting_pays`] compares the expected rate
//! `E[τ] / (t_draft + t_inject + t_verify(B))` with `margin / t_step`, `E[τ]` from
//! [`estimate_tau`] (observed cycles behind a prior of [`TauPrior::weight`] pseudo-cycles at
//! [`TauPrior::tau`]). When the profile loses at the prior, the planner never drafts (no
//! warm-up, no probe); otherwise it seeds every average with the profile and the prior, so a
//! drafter that accepts less than the prior stops after the first probe of `probe_cycles`.

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

/// Seconds of a plain decode step and of the parts of one speculative cycle on this device,
/// measured at load (`Engine::load`, with the SPS profile): what a cycle costs before any
/// cycle ran. The draft's own cost is here, which a profile of verify steps alone misses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CycleCosts {
    /// One plain decode step (a verify of 1 row).
    pub step: f64,
    /// One draft block.
    pub draft: f64,
    /// Injecting one cycle's committed rows into the drafter.
    pub inject: f64,
    /// One verify step of B = `n_max + 1` rows (every row's argmax read back).
    pub verify: f64,
    /// B: the rows of that verify step (a cycle commits at most B tokens).
    pub verify_rows: u32,
}

impl CycleCosts {
    /// Seconds of one speculative cycle: draft, inject, verify.
    pub fn cycle(&self) -> f64 {
        self.draft + self.inject + self.verify
    }

    /// All four finite, `step > 0` and the others `>= 0`.
    pub fn is_valid(&self) -> bool {
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        ok(self.draft) && ok(self.inject) && ok(self.verify) && ok(self.step) && self.step > 0.0
    }
}

/// What the planner assumes of a drafter's accepted length τ (tokens committed per cycle, the
/// bonus included) before it has seen a cycle: `tau`, worth `weight` observed cycles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TauPrior {
    pub tau: f64,
    pub weight: f64,
}

impl Default for TauPrior {
    /// τ = 2 (one accepted draft a cycle; the shipped DSpark drafter measures 2.1 on the builtin
    /// prompts, γ = 7) worth 4 cycles: a probe's worth of evidence outweighs it.
    fn default() -> Self {
        Self {
            tau: 2.0,
            weight: 4.0,
        }
    }
}

/// The posterior-mean accepted length after `cycles` cycles that committed `committed` tokens
/// in all: `(w·τ₀ + committed) / (w + cycles)`; the prior alone before any cycle.
pub fn estimate_tau(prior: TauPrior, cycles: u64, committed: u64) -> f64 {
    let w = prior.weight.max(0.0);
    let n = cycles as f64;
    if w + n <= 0.0 {
        return prior.tau;
    }
    (w * prior.tau + committed as f64) / (w + n)
}

/// Expected speed-up of drafting over plain decoding at accepted length `tau`:
/// `(τ / t_cycle) / (1 / t_step)`. 0 for an invalid profile.
pub fn expected_speedup(costs: &CycleCosts, tau: f64) -> f64 {
    let cycle = costs.cycle();
    if !costs.is_valid() || !tau.is_finite() {
        return 0.0;
    }
    if cycle <= 0.0 {
        return f64::INFINITY;
    }
    tau * costs.step / cycle
}

/// The decision: draft while the expected speed-up is at least `margin` (drafting must beat
/// plain decoding by that factor; `margin <= 1` drafts at break-even).
pub fn drafting_pays(costs: &CycleCosts, tau: f64, margin: f64) -> bool {
    expected_speedup(costs, tau) >= margin
}

/// Whether drafting can pay with `config`'s load-time profile at all: the planner itself is
/// run through the start of a generation at the profiled costs (a plain step, then cycles) in
/// the best case, every draft of every cycle accepted (τ = the verify rows). `false` when
/// even then it rules drafting out after the one probe cycle a profile that loses at the prior
/// allows, so a drafter can only cost time; `true` without a profile.
pub fn drafting_can_pay(config: BypassConfig) -> Result<bool, BypassError> {
    let Some(c) = config.costs else {
        return Ok(true);
    };
    let mut b = Bypass::new(config)?;
    b.record_plain(c.step);
    let drafts = c.verify_rows.saturating_sub(1);
    for _ in 0..=config.probe_cycles {
        if !b.should_draft() {
            break;
        }
        b.record_cycle(c.draft + c.inject, c.verify, drafts, drafts);
    }
    Ok(!b.never_drafts())
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
    /// reports 0.23–0.33 at 1.7–2.1×, docs/DSPARK.md), so only a useless drafter is cut
    /// here and the cost model judges the rest.
    pub min_acceptance: f64,
    /// The cycle's costs on this device, measured at load (`None`: learnt from the first
    /// cycles and plain steps only).
    pub costs: Option<CycleCosts>,
    /// The accepted length assumed before any cycle (used with `costs`).
    pub prior: TauPrior,
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
            costs: None,
            prior: TauPrior::default(),
        }
    }
}

impl BypassConfig {
    /// Never bypass: both rules off.
    pub fn never() -> Self {
        Self {
            margin: 0.0,
            min_acceptance: 0.0,
            costs: None,
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
        if let Some(c) = &self.costs {
            if !c.is_valid() {
                return invalid("costs.step", c.step, "costs must be finite, >= 0, step > 0");
            }
        }
        if !(self.prior.tau.is_finite() && self.prior.tau >= 1.0) {
            return invalid("prior.tau", self.prior.tau, "it must be finite and >= 1");
        }
        if !(self.prior.weight.is_finite() && self.prior.weight >= 0.0) {
            let w = self.prior.weight;
            return invalid("prior.weight", w, "it must be finite and >= 0");
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

    /// A value worth `n` samples.
    fn seeded(x: f64, n: u32) -> Self {
        Self { value: Some(x), n }
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
    /// Never draft again: the load-time profile lost at the prior and so did the one probe
    /// cycle it allowed.
    never_draft: bool,
    /// The current probe is the one cycle a profile that loses at the prior allows.
    last_chance: bool,
}

impl Bypass {
    /// A planner that starts by drafting (a warm-up of `probe_cycles` cycles). With
    /// [`BypassConfig::costs`]: that warm-up where [`drafting_pays`] at the prior; else a
    /// probe of one cycle, after which it never drafts again unless that cycle made the
    /// estimate pay.
    pub fn new(config: BypassConfig) -> Result<Self, BypassError> {
        config.validate()?;
        let mut b = Self {
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
            never_draft: false,
            last_chance: false,
        };
        if let Some(c) = config.costs {
            let prior = config.prior;
            let margin = config.margin;
            if !drafting_pays(&c, estimate_tau(prior, 0, 0), margin) {
                b.probe_left = 1;
                b.last_chance = true;
            }
            b.t_plain = Ema::seeded(c.step, 1);
            b.t_draft = Ema::seeded(c.draft + c.inject, 1);
            b.t_verify = Ema::seeded(c.verify, 1);
            let w = prior.weight.round().clamp(0.0, f64::from(u32::MAX)) as u32;
            if w > 0 {
                b.tau = Ema::seeded(prior.tau, w);
            }
        }
        Ok(b)
    }

    /// Whether the planner has ruled drafting out for the rest of the generation.
    pub fn never_drafts(&self) -> bool {
        self.never_draft
    }

    /// Whether this decode step should be a speculative cycle (`false`: a plain step). Each
    /// `false` counts as one plain step of the current bypass.
    pub fn should_draft(&mut self) -> bool {
        if self.never_draft {
            return false;
        }
        if self.plain_left > 0 {
            self.plain_left -= 1;
            return false;
        }
        if self.probe_left > 0 {
            return true;
        }
        let bypass = self.breaker_trips() || self.plain_is_faster();
        if std::mem::take(&mut self.last_chance) && bypass {
            self.never_draft = true;
            return false;
        }
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
        let costs = CycleCosts {
            step: t_plain,
            draft: t_draft,
            inject: 0.0,
            verify: t_verify,
            verify_rows: 0,
        };
        !drafting_pays(&costs, tau, self.config.margin)
    }
}

#[cfg(test)]
#[path = "bypass_tests.rs"]
mod tests;
