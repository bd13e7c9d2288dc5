//! One step of batched requests (a server's slots, `flint bench -npl`), DSpark across requests
//! included (docs/DSPARK.md):
//!
//! 1. every decoding request with a drafter gives the drafter its waiting committed rows and
//!    drafts a block after its last token (`batch_draft`: every greedy request's draft pass in
//!    one submission);
//! 2. the verify lengths are chosen over all R drafting requests together: the request's fixed
//!    or threshold policy, or Algorithm 1 over the R confidences with the batched SPS(B) curve;
//! 3. one forward runs every drafting request's `[x0, d1..dℓ]` (logits of every row), the other
//!    decoding requests' single rows and, in what is left of the row budget, prompt chunks;
//! 4. each verify is accepted (greedy, or lossless rejection sampling), the request's cache cut
//!    back to its committed rows, and exactly those rows wait for its drafter.
//!
//! Every row a request commits reaches its drafter through its staging (`Pending`, as in the
//! single-request loop): a step's taps land after the rows already waiting, which go in as one
//! chunk before the next draft or when the staging would overflow.
//!
//! Faults stay with their request: an error while planning, drafting or accepting one request
//! ends that request alone ([`Ended::Failed`]; the caller resets its sequence) and the step goes
//! on with the others. Only the forward itself failing fails the step as a whole.

use super::batch::Engine;
use super::batching::{plan_step, Work};
use crate::model::forward::batch::Segment;
use crate::sampling::{Sampler, Xoshiro256StarStar};
use crate::speculative::accept::{accept_greedy, accept_sampled_cut, Bonus};
use crate::speculative::bypass::Bypass;
use crate::speculative::stats::SpecStats;
use crate::{Error, Result};
use std::time::Instant;

use super::batch_draft::{draft_all, flush, make_room};

/// What a step needs of a running request.
#[derive(Debug)]
pub struct SeqState {
    /// Its sequence (slot) in the engine.
    pub seq: usize,
    pub prompt: Vec<u32>,
    /// Prompt rows the sequence's cache already held.
    pub keep: usize,
    /// Prompt rows run so far (from `keep`).
    pub fed: usize,
    pub max_tokens: usize,
    pub sampler: Option<Sampler>,
    /// Tokens emitted so far (the last one is the next row to run).
    pub generated: Vec<u32>,
    /// The drafter's bookkeeping (sequences with a drafter).
    pub pending: Option<Pending>,
    /// Draws sampled drafts.
    pub draft_rng: Xoshiro256StarStar,
    /// The grammar its output must match (`batch_grammar`): one matcher per request, a mask
    /// per logits row.
    pub guide: Option<crate::grammar::steps::Guide>,
    /// Tokens emitted that no step has run yet, run by the next decode step: the last sampled
    /// one and the tokens its grammar forced after it (none yet: the last generated token).
    pub rows_next: Vec<u32>,
    /// Log-probabilities asked for (`super::logprobs`), and the entries of the tokens
    /// committed (and, with `echo`, of the prompt's) that the caller has not taken yet.
    pub logprobs: Option<super::logprobs::Want>,
    pub lp: Vec<super::logprobs::TokenLogprob>,
}

impl SeqState {
    /// Request `prompt` on sequence `seq` whose cache holds its first `keep` rows; `drafter`:
    /// the sequence has a drafter (which holds those rows too).
    pub fn new(
        seq: usize,
        prompt: Vec<u32>,
        keep: usize,
        max_tokens: usize,
        sampler: Option<Sampler>,
        drafter: bool,
    ) -> SeqState {
        let seed = sampler.as_ref().map_or(0, |s| s.params().seed);
        SeqState {
            seq,
            prompt,
            keep,
            fed: 0,
            max_tokens,
            sampler,
            generated: Vec::new(),
            pending: drafter.then(Pending::default),
            draft_rng: Xoshiro256StarStar::new(seed ^ 0x5eed),
            guide: None,
            rows_next: Vec::new(),
            logprobs: None,
            lp: Vec::new(),
        }
    }

    pub fn prompt_left(&self) -> usize {
        self.prompt.len() - self.keep - self.fed
    }
}

/// A running request as [`step`] drives it.
pub trait BatchRequest {
    /// How a request ends.
    type End;
    fn state(&self) -> &SeqState;
    fn state_mut(&mut self) -> &mut SeqState;
    /// A new token, which the request pushes to `generated` unless it ends the request (an end
    /// token); `Some` when the request ends with it. `full`: the sequence's cache has no row
    /// for another step.
    fn on_token(&mut self, token: u32, full: bool) -> Result<Option<Self::End>>;
    /// Called right before each [`BatchRequest::on_token`]: whether that token is a draft the
    /// target accepted (the server marks those in its stream); ignored by default.
    fn note_drafted(&mut self, _drafted: bool) {}
    /// Whether the request may decode now (a benchmark holds decoding until every prompt ran).
    fn may_decode(&self) -> bool {
        true
    }
}

/// A request's drafter bookkeeping: committed rows `at..at + n` wait in staging rows `0..n`;
/// its speculation counters and its own drafter decision.
#[derive(Debug, Default)]
pub struct Pending {
    pub at: u32,
    pub n: u32,
    /// The tokens of those rows (what an MTP drafter pairs with the rows before them).
    pub tokens: Vec<u32>,
    /// Cycles, drafts verified and accepted, bypassed steps and time split (`--stats-json`,
    /// the server's outcome).
    pub spec: SpecStats,
    /// Whether drafting pays for this request, step by step (`None`: `--spec-no-bypass`).
    pub bypass: Option<Bypass>,
    /// The request has taken a decode step (with a bypass, the first one is plain: it
    /// measures what drafting has to beat).
    pub started: bool,
    /// The engine's verdict left the drafter out of this request ([`super::decision`]).
    pub off: bool,
}

/// What one request runs in this step.
pub(super) struct Planned {
    /// Index in `active`.
    pub(super) i: usize,
    pub(super) tokens: Vec<u32>,
    pub(super) n_logits: u32,
    /// The drafts verified (after the anchor) and, when sampling, their distributions.
    pub(super) drafts: Vec<u32>,
    pub(super) dists: Vec<f32>,
    /// Cache rows before the step.
    pub(super) p0: u32,
    /// Prompt rows this step runs (0: decoding).
    pub(super) prompt_rows: usize,
    /// Under a grammar: the mask of each logits row (`[n_logits, words]`), and the
    /// distribution of a draft the grammar refused right after the kept ones.
    pub(super) masks: Vec<u32>,
    pub(super) refused: Option<Vec<f32>>,
    /// Under a grammar: the kept drafts end where tokens are forced (the row after them is
    /// not sampled when all are accepted).
    pub(super) forced_after: bool,
    /// Tokens the grammar forces before the first sampled one, emitted when this (the
    /// prompt's last, without a logits row) chunk has run and run by the next step.
    pub(super) forced0: Vec<u32>,
    /// Drafts the drafter proposed this step (`Some`: a speculative cycle, before the verify
    /// length and the grammar cut them).
    pub(super) proposed: Option<usize>,
}

/// How a request left a step: its own end, or a failure of its own (its sequence's cache and
/// drafter are then in no known state: the caller resets them).
#[derive(Debug)]
pub enum Ended<E> {
    End(E),
    Failed(Error),
}

/// Requests (indices into `active`) that failed in this step, with why.
pub(super) type Failures = Vec<(usize, Error)>;

/// Request `a`'s decode row: its last token at its cache's next position. An error when it has
/// no token to run (no prompt row ran and nothing was generated) or its cache is unreadable.
fn decode_row(eng: &mut Engine, i: usize, a: &SeqState) -> Result<Planned> {
    let Some(&last) = a.generated.last() else {
        return Err(Error::EmptyStep {
            what: format!("sequence {}: no prompt row and no token to decode", a.seq),
        });
    };
    // Forced tokens ride as rows of the step, the logits row being the last one.
    let tokens = if a.rows_next.is_empty() {
        vec![last]
    } else {
        a.rows_next.clone()
    };
    Ok(Planned {
        i,
        tokens,
        n_logits: 1,
        drafts: Vec::new(),
        dists: Vec::new(),
        p0: eng.fwd.kv().len(a.seq)?,
        prompt_rows: 0,
        masks: Vec::new(),
        refused: None,
        forced_after: false,
        forced0: Vec::new(),
        proposed: None,
    })
}

/// This step's rows: every decoding request's (a row, or a verify after drafting), then prompt
/// chunks in what is left of the row budget (each at most its drafter's staging). Requests that
/// cannot be planned are recorded in `failed` and run nothing.
fn plan<R: BatchRequest>(
    eng: &mut Engine,
    active: &mut [R],
    failed: &mut Failures,
) -> Vec<Planned> {
    let mut plans: Vec<Planned> = Vec::new();
    for (i, r) in active.iter().enumerate() {
        let a = r.state();
        if a.prompt_left() == 0 && r.may_decode() {
            match decode_row(eng, i, a) {
                Ok(pl) => plans.push(pl),
                Err(e) => failed.push((i, e)),
            }
        }
    }
    draft_all(eng, active, &mut plans, failed);
    plans.retain(|pl| !failed.iter().any(|(i, _)| *i == pl.i));
    // Rows replayed after a hybrid's rollback ride in the step too.
    let used: usize = plans.iter().map(|p| p.tokens.len()).sum::<usize>()
        + active
            .iter()
            .map(|r| eng.fwd.replay_rows(r.state().seq))
            .sum::<usize>();
    let budget = (eng.fwd.max_rows() as usize).saturating_sub(used);
    // Logits rows an `echo` prompt chunk may take: what the decoding rows leave, less one
    // row for every prompting request.
    let decode_logits: u32 = plans.iter().map(|p| p.n_logits).sum();
    let work: Vec<Work> = active
        .iter()
        .map(R::state)
        .filter(|a| a.prompt_left() > 0)
        .map(|a| Work {
            seq: a.seq,
            prompt_left: a.prompt_left().min(eng.fwd.tap_capacity(a.seq) as usize),
        })
        .collect();
    let mut echo_left =
        (eng.fwd.max_logit_rows() as usize + 1).saturating_sub(decode_logits as usize + work.len());
    for (seq, mut m) in plan_step(&work, budget) {
        let Some(i) = active.iter().position(|a| a.state().seq == seq) else {
            continue;
        };
        let a = active[i].state_mut();
        if super::logprobs::echo_rows(a, m).is_some() {
            m = m.min(echo_left);
            if m == 0 {
                continue;
            }
            echo_left -= m - 1;
        }
        let from = a.keep + a.fed;
        let Some(tokens) = a.prompt.get(from..from + m) else {
            failed.push((
                i,
                Error::EmptyStep {
                    what: format!(
                        "sequence {seq}: prompt rows {from}..{} of {}",
                        from + m,
                        a.prompt.len()
                    ),
                },
            ));
            continue;
        };
        let tokens = tokens.to_vec();
        let last = a.prompt_left() == m;
        let forced0 = match super::batch_grammar::forced0(a, last) {
            Ok(f) => f,
            Err(e) => {
                failed.push((i, e));
                continue;
            }
        };
        match eng.fwd.kv().len(seq) {
            Ok(p0) => plans.push(Planned {
                i,
                n_logits: super::logprobs::echo_rows(a, tokens.len())
                    .unwrap_or(u32::from(last && forced0.is_empty())),
                tokens,
                drafts: Vec::new(),
                dists: Vec::new(),
                p0,
                prompt_rows: m,
                masks: Vec::new(),
                refused: None,
                forced_after: false,
                forced0,
                proposed: None,
            }),
            Err(e) => failed.push((i, e.into())),
        }
    }
    plans
}

/// A planned request's rows checked against its sequence before they reach the device: some
/// rows, each a token of the vocabulary, all within the sequence's cache.
fn check_rows(eng: &mut Engine, seq: usize, pl: &Planned) -> Result<()> {
    let n_vocab = eng.fwd.hp().n_vocab;
    if pl.tokens.is_empty() {
        return Err(Error::EmptyStep {
            what: format!("sequence {seq}: a segment of no rows"),
        });
    }
    if let Some(bad) = pl.tokens.iter().find(|&&t| t >= n_vocab) {
        return Err(Error::Usage(format!(
            "sequence {seq}: token id {bad} is outside the vocabulary of {n_vocab}"
        )));
    }
    let capacity = eng.fwd.capacity();
    let end = u64::from(pl.p0) + pl.tokens.len() as u64;
    if end > u64::from(capacity) {
        return Err(Error::Usage(format!(
            "sequence {seq}: rows {}..{end} are past its cache's {capacity} rows",
            pl.p0
        )));
    }
    Ok(())
}

/// One batched step over `active`, then each request's tokens handed to it. Returns the
/// requests that ended (indices into `active`) and how: their own end, or a failure of their
/// own (the others go on). `Err` only when the forward itself failed, which fails every
/// request of the step. A step with nothing to run (every request held) runs nothing.
pub fn step<R: BatchRequest>(
    eng: &mut Engine,
    active: &mut [R],
) -> Result<Vec<(usize, Ended<R::End>)>> {
    let mut failed: Failures = Vec::new();
    let t_draft = Instant::now();
    let mut plans = plan(eng, active, &mut failed);
    let draft_secs = t_draft.elapsed().as_secs_f64();
    plans.retain(|pl| {
        let a = active[pl.i].state_mut();
        let checked = check_rows(eng, a.seq, pl)
            .and_then(|()| make_room(eng, a, pl.p0, pl.tokens.len() as u32));
        match checked {
            Ok(()) => true,
            Err(e) => {
                failed.push((pl.i, e));
                false
            }
        }
    });
    let mut ended: Vec<(usize, Ended<R::End>)> = failed
        .into_iter()
        .map(|(i, e)| (i, Ended::Failed(e)))
        .collect();
    for (i, e) in super::batch_grammar::set_masks(eng, active, &mut plans)? {
        ended.push((i, Ended::Failed(e)));
    }
    if plans.is_empty() {
        return Ok(ended);
    }
    // A verify may be rolled back: a hybrid's state is checkpointed before its rows.
    for pl in plans.iter().filter(|pl| !pl.drafts.is_empty()) {
        eng.fwd.checkpoint(active[pl.i].state().seq)?;
    }
    let segs: Vec<Segment<'_>> = plans
        .iter()
        .map(|pl| Segment {
            seq: active[pl.i].state().seq,
            tokens: &pl.tokens,
            n_logits: pl.n_logits,
        })
        .collect();
    let t_verify = Instant::now();
    let stepped = eng.step(&segs);
    eng.fwd.clear_mask();
    stepped?;
    drop(segs);
    let sampling = plans
        .iter()
        .any(|pl| pl.n_logits > 0 && active[pl.i].state().sampler.is_some());
    let ids = eng.fwd.argmax(&eng.ctx)?;
    let logits = if sampling {
        eng.fwd.logits(&eng.ctx)?
    } else {
        Vec::new()
    };
    let lp = match plans
        .iter()
        .any(|pl| active[pl.i].state().logprobs.is_some())
    {
        true => {
            let mut targets = Vec::new();
            for pl in &plans {
                let (a, n) = (active[pl.i].state(), pl.n_logits as usize);
                super::logprobs::push_targets(&mut targets, a, n, pl.prompt_rows);
            }
            Some(super::logprobs::read(eng, &targets)?)
        }
        false => None,
    };
    let out = StepOut {
        ids: &ids,
        logits: &logits,
        lp: lp.as_ref(),
        draft_secs,
        verify_secs: t_verify.elapsed().as_secs_f64(),
    };
    let mut row = 0usize;
    for pl in &plans {
        let rows = row..row + pl.n_logits as usize;
        row = rows.end;
        match commit(eng, &mut active[pl.i], pl, &out, rows) {
            Ok(Some(end)) => ended.push((pl.i, Ended::End(end))),
            Ok(None) => {}
            Err(e) => ended.push((pl.i, Ended::Failed(e))),
        }
    }
    Ok(ended)
}

/// What the step's forward gave: every logits row's argmax and, when a request samples, the
/// logits (`[rows, n_vocab]`).
struct StepOut<'a> {
    ids: &'a [u32],
    logits: &'a [f32],
    /// The rows' log-probabilities, when a request asked for them.
    lp: Option<&'a super::logprobs::Rows>,
    /// Seconds the step spent planning (drafting and injecting included) and in its forward
    /// with the read-back: what each request's drafter decision weighs.
    draft_secs: f64,
    verify_secs: f64,
}

/// Request `r`'s part of the step's output (`rows`): its prompt rows counted, its verify
/// accepted and its cache cut back to the committed rows, and its tokens handed to it.
fn commit<R: BatchRequest>(
    eng: &mut Engine,
    r: &mut R,
    pl: &Planned,
    out: &StepOut<'_>,
    rows: std::ops::Range<usize>,
) -> Result<Option<R::End>> {
    let n_vocab = eng.fwd.hp().n_vocab as usize;
    let a = r.state_mut();
    let mut rows = rows;
    if pl.prompt_rows > 0 {
        let from = a.keep + a.fed;
        a.fed += pl.prompt_rows;
        let last = a.prompt_left() == 0;
        rows = super::logprobs::record_prompt(a, out.lp, from, rows, last);
        if !pl.forced0.is_empty() {
            rows = rows.end..rows.end;
        }
        if let Some(p) = &mut a.pending {
            p.n += pl.prompt_rows as u32;
            p.tokens.extend_from_slice(&pl.tokens);
        }
        if a.prompt_left() == 0 {
            // The next request on this sequence can come back to the end of this prompt
            // (a hybrid's prefix reuse; nothing for a dense model).
            eng.fwd.checkpoint(a.seq)?;
        }
        if rows.is_empty() {
            if pl.forced0.is_empty() {
                return Ok(None);
            }
            let full = eng.fwd.kv().len(a.seq)? >= eng.fwd.capacity();
            let tokens = super::batch_grammar::emit_forced0(a, &pl.forced0);
            super::logprobs::record_forced(a, &tokens);
            return hand(r, &tokens, &[], full);
        }
    }
    let Verdict {
        accepted,
        next,
        post,
    } = verdict(a, pl, out, rows.clone(), n_vocab)?;
    // Every kept draft accepted where the grammar forces what follows: the last row's sample
    // is not used, the forced tokens come next.
    let next = (!(pl.forced_after && accepted == pl.drafts.len())).then_some(next);
    let (tokens, drafted) = super::batch_grammar::commit(a, pl, accepted, next)?;
    let with_rows = accepted + usize::from(next.is_some());
    let host = super::logprobs::Host {
        logits: out.logits,
        n_vocab,
        post,
    };
    super::logprobs::record_tokens(a, out.lp, rows.clone(), &tokens, with_rows, host);
    if pl.prompt_rows == 0 {
        // Rows run and kept: a verify's anchor and accepted drafts, or every row of a step
        // without drafts (its last token and the forced ones after it).
        let kept = if pl.drafts.is_empty() {
            pl.tokens.len() as u32
        } else {
            accepted as u32 + 1
        };
        eng.fwd.truncate(a.seq, pl.p0 + kept)?;
        if let Some(p) = &mut a.pending {
            p.n += kept;
            p.tokens.extend_from_slice(&pl.tokens[..kept as usize]);
            count_step(p, pl, out, accepted);
        }
    }
    // The tokens after the accepted drafts have no row yet: the next step runs them.
    a.rows_next = tokens.get(accepted..).unwrap_or_default().to_vec();
    // A full cache ends the request after this step's tokens (the next needs a row).
    let full = eng.fwd.kv().len(a.seq)? >= eng.fwd.capacity();
    hand(r, &tokens, &drafted, full)
}

/// The verdict on a request's rows of the step: `accepted` drafts, then `next` (greedy, a plain
/// sample, or rejection sampling against the drafts' distributions), and the sampler's
/// distribution of a plain sampled row when `post_sampling_probs` asks for it.
fn verdict(
    a: &mut SeqState,
    pl: &Planned,
    out: &StepOut<'_>,
    rows: std::ops::Range<usize>,
    n_vocab: usize,
) -> Result<Verdict> {
    let ids = out
        .ids
        .get(rows.clone())
        .ok_or_else(|| short_output(&rows))?;
    let logits = || {
        out.logits
            .get(rows.start * n_vocab..rows.end * n_vocab)
            .ok_or_else(|| short_output(&rows))
    };
    // The sampler's distribution of a plain sampled row (`post_sampling_probs`).
    let mut post = None;
    let (accepted, next) = match &mut a.sampler {
        None => {
            let v = accept_greedy(&pl.drafts, ids)?;
            (v.accepted, v.next)
        }
        Some(s) if pl.drafts.is_empty() && pl.refused.is_none() => {
            let t = s.sample(logits()?);
            if a.logprobs.is_some_and(|w| w.post) {
                post = Some(s.candidates(logits()?));
            }
            s.accept(t);
            (0, t)
        }
        Some(s) => {
            let bonus = match &pl.refused {
                _ if pl.forced_after => Bonus::Skip,
                Some(pd) => Bonus::Residual(pd),
                None => Bonus::Sample,
            };
            let v = accept_sampled_cut(s, &pl.drafts, &pl.dists, logits()?, n_vocab, bonus)?;
            (v.accepted, v.next)
        }
    };
    Ok(Verdict {
        accepted,
        next,
        post,
    })
}

/// [`verdict`]'s answer.
struct Verdict {
    /// Drafts accepted.
    accepted: usize,
    /// The token after them.
    next: u32,
    /// The sampler's `(id, probability)` of a plainly sampled row, when asked for.
    post: Option<Vec<(u32, f32)>>,
}

/// A decode step's counters and the request's drafter decision: a cycle (drafts proposed,
/// verified, accepted; its draft and verify seconds) or a plain step (its seconds).
fn count_step(p: &mut Pending, pl: &Planned, out: &StepOut<'_>, accepted: usize) {
    let spec = &mut p.spec;
    spec.target_forwards += 1;
    spec.verify_secs += out.verify_secs;
    match pl.proposed {
        Some(n) => {
            spec.cycles += 1;
            spec.proposed += n as u64;
            spec.draft_secs += out.draft_secs;
            if !pl.drafts.is_empty() {
                spec.record(pl.drafts.len(), accepted);
            }
            if let Some(b) = &mut p.bypass {
                let (len, a) = (pl.drafts.len() as u32, accepted as u32);
                b.record_cycle(out.draft_secs, out.verify_secs, len, a);
            }
        }
        None => {
            if let Some(b) = &mut p.bypass {
                b.record_plain(out.verify_secs);
            }
        }
    }
}

/// Hands `tokens` to the request in order; `full` goes with the last one. `drafted[k]`: token
/// `k` is an accepted draft (missing: it is not).
fn hand<R: BatchRequest>(
    r: &mut R,
    tokens: &[u32],
    drafted: &[bool],
    full: bool,
) -> Result<Option<R::End>> {
    for (k, &t) in tokens.iter().enumerate() {
        let last = k + 1 == tokens.len();
        r.note_drafted(drafted.get(k).copied().unwrap_or(false));
        if let Some(end) = r.on_token(t, full && last)? {
            return Ok(Some(end));
        }
    }
    Ok(None)
}

fn short_output(rows: &std::ops::Range<usize>) -> Error {
    Error::Usage(format!(
        "the step's output has no logits rows {}..{}",
        rows.start, rows.end
    ))
}

/// Gives the drafter of a request that ends every committed row (what its sequence's next
/// request reuses).
pub fn settle(eng: &mut Engine, a: &mut SeqState) -> Result<()> {
    flush(eng, a)
}
