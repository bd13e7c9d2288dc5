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
//! results (the argmax read back), as llama-batched-bench synchronizes after each decode; the
//! steps are the server's (`engine::batch_run`), decode rows held until every prompt ran. A
//! warm-up run of the first test builds the kernels first; `-r` runs each test that many times
//! and reports the run with the median T. With `-md`, every sequence has its drafter and the
//! TG phase drafts, verifies and accepts across the B sequences in each step (the server's
//! step, `engine::batch_run`); `accepted` counts the drafts accepted of those verified. With
//! `--temp T` (> 0) every sequence samples (top-k 40, top-p 0.95, min-p 0.05, its own seed).
//! The TG phase's steps are counted ([`super::host`]): submits, blocking waits and host time
//! per step (one step: one `batch_run::step`, a speculative cycle with drafters).

use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::engine::batch_run::{self, settle, BatchRequest, Ended, SeqState};
use crate::engine::Engine;
use crate::sampling::{Sampler, SamplerParams};
use crate::{Error, Result};

use super::host::StepCost;

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
    /// With drafters: (drafts verified, accepted) over the run's generation.
    pub spec: Option<(u64, u64)>,
    /// The TG phase's steps: submits, waits and host time.
    pub cost: StepCost,
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

/// Text the prompts are cut from (English prose: a drafter's acceptance means something on it).
const PROSE: &str = "The lighthouse stood at the end of a long spit of sand, and for forty years \
    the same family had kept its lamp burning through every storm. Each evening the keeper \
    climbed the one hundred and twelve steps, trimmed the wick, polished the great lens and \
    wrote the weather in a leather book. Ships passed in the night, their crews never knowing \
    the name of the man who kept them off the rocks. When the new electric lamp arrived, the \
    keeper was told that his work was no longer needed, but he kept climbing the stairs anyway, \
    because the sea, he said, does not read letters from the government.";

/// A prompt of `n` tokens: [`PROSE`] tokenized, repeated as needed.
fn prompt(eng: &Engine, n: u32) -> Result<Vec<u32>> {
    let ids = eng.tok.encode(PROSE, true, false)?;
    Ok(ids.iter().copied().cycle().take(n as usize).collect())
}

/// One benchmark sequence: it generates exactly its TG tokens (end tokens included, as
/// llama-batched-bench does), and decodes only once every prompt ran.
struct BenchSeq {
    st: SeqState,
    decode: bool,
}

impl BatchRequest for BenchSeq {
    type End = ();
    fn state(&self) -> &SeqState {
        &self.st
    }
    fn state_mut(&mut self) -> &mut SeqState {
        &mut self.st
    }
    fn on_token(&mut self, token: u32, full: bool) -> Result<Option<()>> {
        self.st.generated.push(token);
        Ok((self.st.generated.len() >= self.st.max_tokens || full).then_some(()))
    }
    fn may_decode(&self) -> bool {
        self.decode
    }
}

/// Sequence `seq`'s sampler at temperature `temp` (none: greedy).
fn sampler(eng: &Engine, temp: f32, seq: usize) -> Result<Option<Sampler>> {
    if temp <= 0.0 {
        return Ok(None);
    }
    let params = SamplerParams {
        temp,
        seed: 42 + seq as u64,
        ..SamplerParams::default()
    };
    Ok(Some(Sampler::new(params, eng.hp().n_vocab)?))
}

/// One run's figures: T_PP, T_TG, drafted, accepted, the TG phase's step cost.
type Run = (f64, f64, u64, u64, StepCost);

/// One run of (pp, tg, b) at temperature `temp`. The prompts run as batched steps (every
/// sequence's first token comes from its last prompt row), then the sequences decode together
/// (with drafters: draft, verify and accept per sequence in the same steps).
fn run_once(eng: &mut Engine, pp: u32, tg: u32, b: u32, temp: f32) -> Result<Run> {
    let prompt = prompt(eng, pp)?;
    let has_drafter = !eng.drafters.is_empty();
    let mut seqs = Vec::with_capacity(b as usize);
    for seq in 0..b as usize {
        let sampler = sampler(eng, temp, seq)?;
        seqs.push(BenchSeq {
            st: SeqState::new(seq, prompt.clone(), 0, tg as usize, sampler, has_drafter),
            decode: false,
        });
    }
    for s in &seqs {
        eng.reset(s.st.seq)?;
        if let Some(d) = eng.drafters.get_mut(s.st.seq) {
            d.reset();
        }
    }
    let t0 = Instant::now();
    while seqs.iter().any(|s| s.st.prompt_left() > 0) {
        step(eng, &mut seqs)?;
    }
    let t_pp = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for s in &mut seqs {
        s.decode = true;
    }
    // The first token came with the prompt; TG - 1 more (a verify may give several).
    let mut running: Vec<BenchSeq> = seqs
        .into_iter()
        .filter(|s| tg > 1 && !s.st.generated.is_empty())
        .collect();
    let (mut drafted, mut accepted) = (0, 0);
    let (c0, mut steps) = (eng.ctx.counters().snapshot(), 0);
    while !running.is_empty() {
        steps += 1;
        let mut ended = step(eng, &mut running)?;
        ended.sort_by_key(|i| std::cmp::Reverse(*i));
        for i in ended {
            let mut s = running.remove(i);
            settle(eng, &mut s.st)?;
            if let Some(p) = &s.st.pending {
                drafted += p.spec.drafted;
                accepted += p.spec.accepted;
            }
        }
    }
    let t_tg = t1.elapsed();
    let mut cost = StepCost::default();
    let counts = eng.ctx.counters().snapshot() - c0;
    cost.add(
        steps,
        u64::try_from(t_tg.as_nanos()).unwrap_or(u64::MAX),
        counts,
    );
    Ok((t_pp, t_tg.as_secs_f64(), drafted, accepted, cost))
}

/// One batched step; a sequence that fails fails the benchmark. The sequences that ended.
fn step(eng: &mut Engine, seqs: &mut [BenchSeq]) -> Result<Vec<usize>> {
    batch_run::step(eng, seqs)?
        .into_iter()
        .map(|(i, end)| match end {
            Ended::End(()) => Ok(i),
            Ended::Failed(e) => Err(e),
        })
        .collect()
}

/// Every (PP, TG, B) test, in the order llama-batched-bench runs them (PP, then TG, then B),
/// sequences sampling at `temp` (0: greedy).
pub fn measure(
    eng: &mut Engine,
    (npp, ntg, npl): (&[u32], &[u32], &[u32]),
    reps: u32,
    temp: f32,
) -> Result<Vec<BatchedRow>> {
    let (seqs, ctx) = needs(npp, ntg, npl)?;
    if eng.n_seq() < seqs as usize || eng.capacity() < ctx {
        return Err(Error::Usage(format!(
            "the engine holds {} sequences of {} rows; the tests need {seqs} of {ctx}",
            eng.n_seq(),
            eng.capacity()
        )));
    }
    // Warm-up: the first test once, untimed (kernels, dispatch sets).
    run_once(eng, npp[0], ntg[0].min(4), npl[0], temp)?;
    let mut rows = Vec::new();
    for &pp in npp {
        for &tg in ntg {
            for &b in npl {
                let mut runs = Vec::new();
                for _ in 0..reps.max(1) {
                    runs.push(run_once(eng, pp, tg, b, temp)?);
                }
                runs.sort_by(|x, y| (x.0 + x.1).total_cmp(&(y.0 + y.1)));
                let (t_pp, t_tg, drafted, accepted, cost) = runs[runs.len() / 2];
                rows.push(BatchedRow {
                    pp,
                    tg,
                    b,
                    t_pp,
                    t_tg,
                    gain: None,
                    spec: (!eng.drafters.is_empty()).then_some((drafted, accepted)),
                    cost,
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
                "draft_n": r.spec.map(|s| s.0), "draft_n_accepted": r.spec.map(|s| s.1),
            });
            match v {
                Value::Object(mut m) => {
                    r.cost.put(&mut m);
                    m
                }
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
        ("accepted", true),
        ("host µs/step", true),
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
                r.spec.map_or("-".into(), |(d, a)| format!("{a}/{d}")),
                format!("{:.0}", r.cost.host_us_per_step()),
            ]
        })
        .collect();
    format!(
        "adapter: {adapter}\n\n{}",
        super::output::table(&head, &body)
    )
}
