//! A Prometheus histogram: fixed upper bounds (seconds), a count per bucket, the sum and the
//! count, rendered in the text exposition format (`NAME_bucket{le="…"}` cumulative, ending
//! with `le="+Inf"`, then `NAME_sum` and `NAME_count`). Observations and renders take one lock,
//! so a scrape never sees a count that its buckets disagree with.

use std::fmt::Write;

use parking_lot::Mutex;

/// Upper bounds for the time to a request's first token, seconds.
pub const TTFT_BOUNDS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Upper bounds for a request's whole time (arrival to its last token), seconds.
pub const E2E_BOUNDS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

#[derive(Debug)]
struct State {
    /// Observations per bucket, not cumulative; one more than the bounds (the `+Inf` bucket).
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

/// One histogram of durations in seconds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    state: Mutex<State>,
}

impl Histogram {
    /// `bounds` ascending.
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            state: Mutex::new(State {
                buckets: vec![0; bounds.len() + 1],
                sum: 0.0,
                count: 0,
            }),
        }
    }

    /// Count one observation of `secs` (in the first bucket whose bound is ≥ it).
    pub fn observe(&self, secs: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(self.bounds.len());
        let mut s = self.state.lock();
        s.buckets[i] += 1;
        s.sum += secs;
        s.count += 1;
    }

    /// Append the family `name` (HELP, TYPE, buckets, sum, count) to `out`.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let s = self.state.lock();
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0u64;
        for (i, n) in s.buckets.iter().enumerate() {
            cumulative += n;
            let le = match self.bounds.get(i) {
                Some(b) => format!("{b}"),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_sum {}", s.sum);
        let _ = writeln!(out, "{name}_count {}", s.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_end_with_the_count() {
        let h = Histogram::new(&[0.1, 1.0]);
        for s in [0.05, 0.1, 0.5, 3.0] {
            h.observe(s);
        }
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "X.");
        assert!(out.contains("x_seconds_bucket{le=\"0.1\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"1\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_seconds_count 4\n"), "{out}");
        let sum: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("x_seconds_sum "))
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN);
        assert!((sum - 3.65).abs() < 1e-9, "{out}");
    }
}
