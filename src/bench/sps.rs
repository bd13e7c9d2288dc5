//! `flint bench --sps B,…`: the SPS(B) curve (docs/DSPARK.md), target steps per
//! second for a step of B rows that computes the logits and argmax of every row, as a verify
//! step does (a `-p B` test computes the last row's logits only), after `-d` cached tokens.
//!
//! Rounds are interleaved: a round times one step of every B in turn, so a slow spell of a
//! noisy machine falls on all batch sizes alike, and SPS(B) / SPS(1) is taken within each round
//! (the median over rounds is reported). The timing loop is the scheduler's start-up profile's
//! ([`crate::speculative::profile::verify_step_rounds`]).

use serde_json::{json, Value};

use super::stats::median;
use crate::engine::Engine;
use crate::speculative::profile::verify_step_rounds;
use crate::{Error, Result};

/// Timed steps of one batch size.
#[derive(Debug, Clone, PartialEq)]
pub struct SpsPoint {
    pub batch: u32,
    /// Seconds of each round's step.
    pub secs: Vec<f64>,
}

/// The curve: batch sizes in the order given, 1 first.
#[derive(Debug, Clone, PartialEq)]
pub struct SpsCurve {
    pub depth: u32,
    pub rounds: u32,
    pub points: Vec<SpsPoint>,
}

/// The batch sizes to time: `batches` with 1 put first (the ratios' base), duplicates dropped.
pub fn batch_list(batches: &[u32]) -> Result<Vec<u32>> {
    if let Some(&b) = batches.iter().find(|&&b| b == 0) {
        return Err(Error::Usage(format!("--sps {b}: batch sizes start at 1")));
    }
    let mut out = vec![1];
    for &b in batches {
        if !out.contains(&b) {
            out.push(b);
        }
    }
    Ok(out)
}

impl SpsPoint {
    /// SPS(B): steps per second of the median step.
    pub fn sps(&self) -> f64 {
        1.0 / median(&self.secs)
    }
}

impl SpsCurve {
    /// Median over rounds of SPS(B) / SPS(1) = t(1) / t(B) within the round.
    pub fn ratio(&self, i: usize) -> f64 {
        let (Some(base), Some(p)) = (self.points.first(), self.points.get(i)) else {
            return f64::NAN;
        };
        let ratios: Vec<f64> = base.secs.iter().zip(&p.secs).map(|(a, b)| a / b).collect();
        median(&ratios)
    }
}

/// Times `rounds` interleaved rounds of verify steps
/// ([`crate::speculative::profile::verify_step_rounds`]) of every batch size of
/// [`batch_list`]`(batches)` after `depth` random cached tokens.
pub fn measure(engine: &mut Engine, batches: &[u32], depth: u32, rounds: u32) -> Result<SpsCurve> {
    let batches = batch_list(batches)?;
    let max_b = batches.iter().copied().max().unwrap_or(1);
    let limit = crate::memory::batch::logit_rows(engine.params()).min(engine.max_rows());
    if max_b > limit {
        return Err(Error::Usage(format!(
            "--sps {max_b}: this engine computes logits of at most {limit} rows per step"
        )));
    }
    super::fill_depth(engine, depth, &mut super::TokenRng::new(0x5B5B))?;
    let rounds = rounds.max(1);
    let ctx = std::sync::Arc::clone(&engine.ctx);
    let secs = verify_step_rounds(&ctx, &mut engine.seq(0), &batches, rounds as usize)?;
    let points = batches
        .into_iter()
        .zip(secs)
        .map(|(batch, secs)| SpsPoint { batch, secs })
        .collect();
    Ok(SpsCurve {
        depth,
        rounds,
        points,
    })
}

/// A markdown table: B, ms per step (median, min, max), SPS(B), SPS(B)/SPS(1), tokens/s.
pub fn render_md(c: &SpsCurve, adapter: &str) -> String {
    let mut s = format!(
        "adapter: {adapter}; verify steps (logits and argmax of every row) at depth {}, {} \
         interleaved rounds\n\n",
        c.depth, c.rounds
    );
    s.push_str("| B | ms / step (median) | min | max | SPS(B) | SPS(B) / SPS(1) | rows / s |\n");
    s.push_str("|---:|---:|---:|---:|---:|---:|---:|\n");
    for (i, p) in c.points.iter().enumerate() {
        let min = p.secs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = p.secs.iter().copied().fold(0.0, f64::max);
        s.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {:.2} |\n",
            p.batch,
            1e3 / p.sps(),
            min * 1e3,
            max * 1e3,
            p.sps(),
            c.ratio(i),
            p.sps() * f64::from(p.batch)
        ));
    }
    s
}

/// One JSON object per batch size (`-o json`).
pub fn to_json(c: &SpsCurve) -> Value {
    let rows: Vec<Value> = c
        .points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            json!({
                "batch": p.batch,
                "n_depth": c.depth,
                "samples_s": p.secs,
                "sps": p.sps(),
                "sps_ratio_to_b1": c.ratio(i),
            })
        })
        .collect();
    Value::Array(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_list_puts_one_first_and_drops_repeats() {
        assert_eq!(batch_list(&[8, 2, 8, 1]).unwrap(), vec![1, 8, 2]);
        assert!(batch_list(&[0, 4]).is_err());
    }

    #[test]
    fn ratio_is_taken_within_rounds() {
        // Round 2 is slow for every batch: per-round ratios stay 0.5.
        let c = SpsCurve {
            depth: 0,
            rounds: 3,
            points: vec![
                SpsPoint {
                    batch: 1,
                    secs: vec![0.01, 0.03, 0.01],
                },
                SpsPoint {
                    batch: 8,
                    secs: vec![0.02, 0.06, 0.02],
                },
            ],
        };
        assert!((c.ratio(1) - 0.5).abs() < 1e-12);
        assert!((c.ratio(0) - 1.0).abs() < 1e-12);
    }
}
