//! `flint bench -npp PP,… -ntg TG,… -npl B,…`: batched decoding, modelled on llama.cpp's
//! `llama-batched-bench`. For each (PP, TG, B): B sequences each take a PP-token prompt (the
//! prompts run as batched steps of at most `-ub` rows), then TG steps of B rows (one token per
//! sequence, each computing its logits and argmax). Columns as llama-batched-bench's:
//!
//! ```text
//! PP, TG, B      prompt tokens, generated tokens per sequence, sequences
//! N_KV           cache rows at the end: B · (PP + TG)
//! T_PP, S_PP     prompt time (s) and rate B · PP / T_PP (t/s)
//! T_TG, S_TG     generation time (s) and aggregate rate B · TG / T_TG (t/s)
//! T, S           T_PP + T_TG and N_KV / T
//! ```
//! plus flint's `S_TG / S_TG(B=1)`: the aggregate generation rate over the one-sequence rate of
//! the same PP and TG measured in the same run (the batching gain). Every step waits for its
//! results (the argmax read back), as llama-batched-bench synchronizes after each decode. A
//! warm-up run of the first test builds the kernels first; `-r` runs each test that many times
//! and reports the run with the median T.

use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::engine::batch::BatchEngine;
use crate::engine::batching::{plan_step, Work};
use crate::model::forward::batch::Segment;
use crate::{Error, Result};

/// One test's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchedRow {
    pub pp: u32,
    pub tg: u32,
    pub b: u32,
    pub t_pp: f64,
    pub t_tg: f64,
    /// S_TG over S_TG at B = 1 for the same PP and TG (`None` without a B = 1 test).
    pub gain: Option<f64>,
}

impl BatchedRow {
    pub fn n_kv(&self) -> u64 {
        u64::from(self.b) * u64::from(self.pp + self.tg)
    }
    pub fn s_pp(&self) -> f64 {
        rate(u64::from(self.b) * u64::from(self.pp), self.t_pp)
    }
    pub fn s_tg(&self) -> f64 {
        rate(u64::from(self.b) * u64::from(self.tg), self.t_tg)
    }
    pub fn t(&self) -> f64 {
        self.t_pp + self.t_tg
    }
    pub fn s(&self) -> f64 {
        rate(self.n_kv(), self.t())
    }
}

fn rate(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

/// Sequences needed, and context rows per sequence, for these tests.
pub fn needs(npp: &[u32], ntg: &[u32], npl: &[u32]) -> Result<(u32, u32)> {
    if npp.is_empty() || ntg.is_empty() || npl.is_empty() {
        return Err(Error::Usage("-npp, -ntg and -npl each need a value".into()));
    }
    if let Some(b) = npl.iter().find(|&&b| b == 0) {
        return Err(Error::Usage(format!("-npl {b}: at least one sequence")));
    }
    if let Some(p) = npp.iter().find(|&&p| p == 0) {
        return Err(Error::Usage(format!("-npp {p}: at least one prompt token")));
    }
    let seqs = npl.iter().copied().max().unwrap_or(1);
    let ctx = npp.iter().max().unwrap_or(&1) + ntg.iter().max().unwrap_or(&0);
    Ok((seqs, ctx))
}

/// A prompt of `n` tokens (a fixed, varied sequence of ids below `n_vocab`).
fn prompt(n: u32, n_vocab: u32) -> Vec<u32> {
    (0..n).map(|i| (i * 7919 + 13) % n_vocab.max(1)).collect()
}

/// One run of (pp, tg, b): (T_PP, T_TG).
fn run_once(eng: &mut BatchEngine, pp: u32, tg: u32, b: u32) -> Result<(f64, f64)> {
    let n_vocab = eng.fwd.hp().n_vocab;
    let b = b as usize;
    for seq in 0..b {
        eng.fwd.kv().reset(seq)?;
    }
    let prompt = prompt(pp, n_vocab);
    let mut fed = vec![0usize; b];
    let t0 = Instant::now();
    loop {
        let work: Vec<Work> = (0..b)
            .filter(|&s| fed[s] < prompt.len())
            .map(|s| Work {
                seq: s,
                prompt_left: prompt.len() - fed[s],
            })
            .collect();
        if work.is_empty() {
            break;
        }
        let rows = plan_step(&work, eng.fwd.max_rows() as usize);
        let segs: Vec<Segment<'_>> = rows
            .iter()
            .map(|&(seq, m)| Segment {
                seq,
                tokens: &prompt[fed[seq]..fed[seq] + m],
                n_logits: u32::from(fed[seq] + m == prompt.len()),
            })
            .collect();
        eng.step(&segs)?;
        eng.fwd.argmax(&eng.ctx)?;
        for &(seq, m) in &rows {
            fed[seq] += m;
        }
    }
    let t_pp = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut next = vec![0u32; b];
    for _ in 0..tg {
        let segs: Vec<Segment<'_>> = next
            .iter()
            .enumerate()
            .map(|(seq, t)| Segment {
                seq,
                tokens: std::slice::from_ref(t),
                n_logits: 1,
            })
            .collect();
        eng.step(&segs)?;
        next = eng.fwd.argmax(&eng.ctx)?;
    }
    Ok((t_pp, t1.elapsed().as_secs_f64()))
}

/// Every (PP, TG, B) test, in the order llama-batched-bench runs them (PP, then TG, then B).
pub fn measure(
    eng: &mut BatchEngine,
    npp: &[u32],
    ntg: &[u32],
    npl: &[u32],
    reps: u32,
) -> Result<Vec<BatchedRow>> {
    let (seqs, ctx) = needs(npp, ntg, npl)?;
    if eng.fwd.n_seq() < seqs as usize || eng.fwd.capacity() < ctx {
        return Err(Error::Usage(format!(
            "the engine holds {} sequences of {} rows; the tests need {seqs} of {ctx}",
            eng.fwd.n_seq(),
            eng.fwd.capacity()
        )));
    }
    // Warm-up: the first test once, untimed (kernels, dispatch sets).
    run_once(eng, npp[0], ntg[0].min(4), npl[0])?;
    let mut rows = Vec::new();
    for &pp in npp {
        for &tg in ntg {
            for &b in npl {
                let mut runs = Vec::new();
                for _ in 0..reps.max(1) {
                    runs.push(run_once(eng, pp, tg, b)?);
                }
                runs.sort_by(|x, y| (x.0 + x.1).total_cmp(&(y.0 + y.1)));
                let (t_pp, t_tg) = runs[runs.len() / 2];
                rows.push(BatchedRow {
                    pp,
                    tg,
                    b,
                    t_pp,
                    t_tg,
                    gain: None,
                });
            }
        }
    }
    let base: Vec<(u32, u32, f64)> = rows
        .iter()
        .filter(|r| r.b == 1)
        .map(|r| (r.pp, r.tg, r.s_tg()))
        .collect();
    for r in &mut rows {
        r.gain = base
            .iter()
            .find(|(pp, tg, _)| *pp == r.pp && *tg == r.tg)
            .filter(|(_, _, s)| *s > 0.0)
            .map(|(_, _, s)| r.s_tg() / s);
    }
    Ok(rows)
}

/// The rows as objects, llama-batched-bench's names (for csv, json, jsonl, sql).
pub fn records(rows: &[BatchedRow]) -> Vec<Map<String, Value>> {
    rows.iter()
        .map(|r| {
            let v = json!({
                "pp": r.pp, "tg": r.tg, "pl": r.b, "n_kv": r.n_kv(),
                "t_pp": r.t_pp, "speed_pp": r.s_pp(), "t_tg": r.t_tg, "speed_tg": r.s_tg(),
                "t": r.t(), "speed": r.s(), "speed_tg_over_b1": r.gain,
            });
            match v {
                Value::Object(m) => m,
                _ => Map::new(),
            }
        })
        .collect()
}

/// llama-batched-bench's table, plus the gain column.
pub fn render_md(rows: &[BatchedRow], adapter: &str) -> String {
    let head = [
        ("PP", true),
        ("TG", true),
        ("B", true),
        ("N_KV", true),
        ("T_PP s", true),
        ("S_PP t/s", true),
        ("T_TG s", true),
        ("S_TG t/s", true),
        ("T s", true),
        ("S t/s", true),
        ("S_TG / B=1", true),
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.pp.to_string(),
                r.tg.to_string(),
                r.b.to_string(),
                r.n_kv().to_string(),
                format!("{:.3}", r.t_pp),
                format!("{:.2}", r.s_pp()),
                format!("{:.3}", r.t_tg),
                format!("{:.2}", r.s_tg()),
                format!("{:.3}", r.t()),
                format!("{:.2}", r.s()),
                r.gain.map_or("-".into(), |g| format!("{g:.2}x")),
            ]
        })
        .collect();
    format!(
        "adapter: {adapter}\n\n{}",
        super::output::table(&head, &body)
    )
}
