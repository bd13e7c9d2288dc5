//! What the host costs per step: queue submissions, blocking waits for the device and the
//! time the recording thread spends outside those waits, over a timed part of a benchmark
//! (counted in `src/gpu/`: [`crate::gpu::Counters`]).
//!
//! `host_us_per_step` is the wall time of the timed part less the time spent blocked in
//! device waits, per step. With `FLINT_BACKEND=noop` (kernels do nothing) the waits return at
//! once and it is the host's whole cost: the ceiling the host puts on tokens/s on any GPU.

use serde_json::{json, Map, Value};

use crate::gpu::CounterSnapshot;

/// Counters over the timed steps of a test (summed over its repetitions).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepCost {
    /// Steps run: a decode step, a prompt ubatch, a speculative cycle (`-npl`: one
    /// `batch_run::step` call, every sequence's rows in it).
    pub steps: u64,
    /// Wall nanoseconds of those steps.
    pub wall_ns: u64,
    pub counts: CounterSnapshot,
}

impl StepCost {
    /// Adds `steps` steps that took `wall_ns` and moved the counters by `counts`.
    pub fn add(&mut self, steps: u64, wall_ns: u64, counts: CounterSnapshot) {
        self.steps += steps;
        self.wall_ns += wall_ns;
        let c = &mut self.counts;
        c.submits += counts.submits;
        c.readbacks += counts.readbacks;
        c.waits += counts.waits;
        c.wait_nanos += counts.wait_nanos;
    }

    fn per_step(&self, v: u64) -> f64 {
        v as f64 / self.steps.max(1) as f64
    }

    pub fn submits_per_step(&self) -> f64 {
        self.per_step(self.counts.submits)
    }

    /// Blocking host waits for the device per step.
    pub fn waits_per_step(&self) -> f64 {
        self.per_step(self.counts.waits)
    }

    /// Host microseconds per step outside the device waits.
    pub fn host_us_per_step(&self) -> f64 {
        self.per_step(self.wall_ns.saturating_sub(self.counts.wait_nanos)) / 1e3
    }

    /// The figures as benchmark record fields (`steps`, `submits_per_step`, `waits_per_step`,
    /// `readbacks_per_step`, `host_us_per_step`).
    pub fn put(&self, m: &mut Map<String, Value>) {
        m.insert("steps".into(), json!(self.steps));
        m.insert("submits_per_step".into(), json!(self.submits_per_step()));
        m.insert("waits_per_step".into(), json!(self.waits_per_step()));
        let readbacks = self.per_step(self.counts.readbacks);
        m.insert("readbacks_per_step".into(), json!(readbacks));
        m.insert("host_us_per_step".into(), json!(self.host_us_per_step()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_step_figures() {
        let mut c = StepCost::default();
        let counts = CounterSnapshot {
            submits: 8,
            readbacks: 4,
            waits: 4,
            wait_nanos: 2_000_000,
        };
        c.add(4, 3_000_000, counts);
        assert_eq!(c.submits_per_step(), 2.0);
        assert_eq!(c.waits_per_step(), 1.0);
        assert!((c.host_us_per_step() - 250.0).abs() < 1e-9);
        let mut m = Map::new();
        c.put(&mut m);
        assert_eq!(m["steps"], json!(4));
        // No steps: figures are 0, not NaN.
        assert_eq!(StepCost::default().host_us_per_step(), 0.0);
    }
}
