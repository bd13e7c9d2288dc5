//! Counters of a speculative generation and what `generate`'s stats line and `--stats-json`
//! derive from them (acceptance rate, τ, tokens per target forward, time split).

use serde_json::{json, Value};

/// Counters of one speculative generation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecStats {
    /// Cycles that drafted (plain steps are not cycles).
    pub cycles: u64,
    /// Drafts the drafter produced.
    pub proposed: u64,
    /// Drafts sent to verification (ℓ summed over cycles).
    pub drafted: u64,
    /// Drafts the target accepted.
    pub accepted: u64,
    /// Plain steps taken because drafting did not pay (bypass).
    pub bypassed: u64,
    /// Target forwards after the prefill (verify batches and plain steps).
    pub target_forwards: u64,
    /// Per slot j: cycles that verified slot j, and those that accepted it.
    pub slot_drafted: Vec<u64>,
    pub slot_accepted: Vec<u64>,
    pub inject_secs: f64,
    /// Injection submits (rows committed by plain steps wait and go in one chunk).
    pub injections: u64,
    pub draft_secs: f64,
    pub verify_secs: f64,
}

impl SpecStats {
    pub fn new(max_drafts: u32) -> SpecStats {
        SpecStats {
            slot_drafted: vec![0; max_drafts as usize],
            slot_accepted: vec![0; max_drafts as usize],
            ..SpecStats::default()
        }
    }

    /// A cycle verified `len` drafts and accepted the first `accepted`.
    pub fn record(&mut self, len: usize, accepted: usize) {
        self.drafted += len as u64;
        self.accepted += accepted as u64;
        for j in 0..len.min(self.slot_drafted.len()) {
            self.slot_drafted[j] += 1;
            if j < accepted {
                self.slot_accepted[j] += 1;
            }
        }
    }

    /// Adds the counters of another generation (the slot vectors grow to the longer one).
    pub fn add(&mut self, o: &SpecStats) {
        self.cycles += o.cycles;
        self.proposed += o.proposed;
        self.drafted += o.drafted;
        self.accepted += o.accepted;
        self.bypassed += o.bypassed;
        self.target_forwards += o.target_forwards;
        for (mine, theirs) in [
            (&mut self.slot_drafted, &o.slot_drafted),
            (&mut self.slot_accepted, &o.slot_accepted),
        ] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m += t;
            }
        }
        self.inject_secs += o.inject_secs;
        self.injections += o.injections;
        self.draft_secs += o.draft_secs;
        self.verify_secs += o.verify_secs;
    }

    /// Accepted / verified drafts.
    pub fn acceptance_rate(&self) -> f64 {
        ratio(self.accepted, self.drafted)
    }

    /// Mean accepted length per drafting cycle, the `+1` of the target's own token included.
    pub fn tau(&self) -> f64 {
        ratio(self.accepted + self.cycles, self.cycles)
    }

    /// Generated tokens per target forward after the prefill (the first token comes from it).
    pub fn tokens_per_target_forward(&self, generated: usize) -> f64 {
        ratio(generated.saturating_sub(1) as u64, self.target_forwards)
    }

    /// Per slot acceptance, conditional on the slot being verified.
    pub fn slot_acceptance(&self) -> Vec<f64> {
        self.slot_drafted
            .iter()
            .zip(&self.slot_accepted)
            .map(|(&d, &a)| ratio(a, d))
            .collect()
    }

    /// The `spec` object of `--stats-json`.
    pub fn to_json(&self, generated: usize) -> Value {
        json!({
            "cycles": self.cycles,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "proposed": self.proposed,
            "acceptance_rate": self.acceptance_rate(),
            "tau": self.tau(),
            "tokens_per_target_forward": self.tokens_per_target_forward(generated),
            "target_forwards": self.target_forwards,
            "bypassed": self.bypassed,
            "slot_acceptance": self.slot_acceptance(),
            "inject_ms": self.inject_secs * 1e3,
            "injections": self.injections,
            "draft_ms": self.draft_secs * 1e3,
            "verify_ms": self.verify_secs * 1e3,
        })
    }

    /// One line for stderr.
    pub fn summary(&self, generated: usize) -> String {
        format!(
            "spec: {} cycles ({} plain steps bypassed), {} drafted, {} accepted ({:.1} %), tau {:.2}, {:.2} tokens/target \
             forward; inject {:.0} ms ({} submits), draft {:.0} ms, verify {:.0} ms",
            self.cycles,
            self.bypassed,
            self.drafted,
            self.accepted,
            100.0 * self.acceptance_rate(),
            self.tau(),
            self.tokens_per_target_forward(generated),
            self.inject_secs * 1e3,
            self.injections,
            self.draft_secs * 1e3,
            self.verify_secs * 1e3
        )
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Median (the mean of the two middle values for an even count); NaN for no samples.
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}
