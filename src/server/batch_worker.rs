//! The batched server loop (continuous batching): one thread owns the [`Engine`] and runs
//! every active request's rows in one forward per step. Between steps it admits waiting jobs
//! into free slots (reusing a slot's cached prefix), drops requests whose client left, and plans
//! the next step with [`plan_step`]: each decoding request's row first, then prompt chunks
//! under the row budget, so a long prompt never stalls the running streams. Sampling, stop
//! strings, streaming and finish reasons are per request, as in the turn-taking worker.
//!
//! Panics are charged to the requests they came from ([`super::batch_recover`]): admitting,
//! stepping and retiring each run inside a guard; after a panicked step every request of it is
//! rebuilt from its text so far and runs alone until it has given a token; one that panics
//! alone is failed and the others go on.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use super::metrics::Metrics;
use super::reqlog::JobClock;
use super::slots::{Event, Job, Outcome, Slots};
use super::stop::{StopMatcher, StopState};
use crate::engine::batch_run::{self, BatchRequest, Ended, SeqState};
use crate::engine::Engine;
use crate::engine::GenStats;
use crate::grammar::steps::Guide;
use crate::grammar::Grammars;
use crate::tokenizer::{StreamDecoder, Tokenizer};
use crate::Result;

/// What the batched worker shares with the server.
pub struct Shared {
    pub slots: Arc<Slots>,
    pub metrics: Arc<Metrics>,
    /// Called once when the device is lost.
    pub on_device_lost: Arc<dyn Fn(String) + Send + Sync>,
    /// Called when the worker cannot go on (the server then reports the failure and exits).
    pub on_fatal: Arc<dyn Fn(String) + Send + Sync>,
}

/// One running request: what a step needs ([`SeqState`]) and what its client is sent.
pub(super) struct Active<'t> {
    pub(super) st: SeqState,
    pub(super) job: Job,
    tok: &'t Tokenizer,
    slots: &'t Slots,
    decoder: StreamDecoder<'t>,
    stop: StopMatcher,
    /// Which of the text in the stop matcher came from accepted drafts.
    marks: super::drafted::Marks,
    /// The token `on_token` gets next is an accepted draft.
    drafted: bool,
    started: Instant,
    first_token: Option<Instant>,
    /// Its request's timing and log trace.
    pub(super) clock: JobClock,
    /// How it stands after panics ([`super::batch_recover`]).
    pub(super) recovery: super::batch_recover::Recovery,
}

/// How a request ended.
#[derive(Debug, Clone, Copy)]
pub(super) enum End {
    /// An end-of-generation token.
    Eog,
    StopString,
    /// `max_tokens` reached, or the slot's context is full.
    Length,
    ClientGone,
    Shutdown,
}

/// Steps in a row that may panic, with no good step between them, before the worker gives up
/// (a fault that every step hits, whatever runs in it).
const MAX_PANICS: u32 = 8;

/// Serve jobs in batched steps until shutdown. A per-request failure ends that request alone; a
/// panic is charged to the requests it came from and the worker goes on; when it cannot go on
/// (panics in a row, a panic outside the guards), `on_fatal` is told why.
pub fn run(eng: Engine, shared: Shared) {
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| serve(eng, &shared)));
    let why = match outcome {
        Ok(Ok(())) => return,
        Ok(Err(why)) => why,
        Err(panic) => format!("the batched worker panicked: {}", panic_text(&*panic)),
    };
    (shared.on_fatal)(why);
}

/// The text of a panic's payload.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// The worker's loop; `Err` when it cannot go on.
fn serve(mut eng: Engine, shared: &Shared) -> std::result::Result<(), String> {
    let tok = eng.tok.clone();
    let n_seq = eng.n_seq();
    // Token ids whose K/V rows each slot's cache holds, in order.
    let mut cached: Vec<Vec<u32>> = vec![Vec::new(); n_seq];
    let mut active: Vec<Active<'_>> = Vec::new();
    let mut panics = 0u32;
    // The model's grammar compiler, built by the first request with a grammar.
    let mut grammars: Option<Grammars> = None;
    loop {
        if active.is_empty() && !shared.slots.wait_for_job() {
            return Ok(());
        }
        if shared.slots.is_shutting_down() {
            for a in active.drain(..) {
                let _ = a.job.tx.send(Event::Shutdown);
                shared.slots.release(a.st.seq);
            }
            return Ok(());
        }
        #[cfg(feature = "fault")]
        super::batch_recover::fault_worker(&active);
        admit(
            &mut eng,
            &tok,
            &mut cached,
            &mut active,
            shared,
            &mut grammars,
        );
        if active.is_empty() {
            continue;
        }
        // Requests under suspicion after a panic run alone; the others together.
        let (alone, together): (Vec<_>, Vec<_>) = std::mem::take(&mut active)
            .into_iter()
            .partition(|a| a.recovery.alone);
        let groups = std::iter::once(together).chain(alone.into_iter().map(|a| vec![a]));
        for mut group in groups.filter(|g| !g.is_empty()) {
            match run_group(&mut eng, &mut cached, &mut group, shared) {
                true => panics += 1,
                false => panics = 0,
            }
            active.append(&mut group);
            if panics >= MAX_PANICS {
                return Err(format!(
                    "{MAX_PANICS} batched steps in a row panicked, whatever ran in them"
                ));
            }
        }
    }
}

/// One step of `group` (all of it, or one request alone), its ended requests retired; whether
/// the step panicked.
fn run_group<'t>(
    eng: &mut Engine,
    cached: &mut [Vec<u32>],
    group: &mut Vec<Active<'t>>,
    shared: &'t Shared,
) -> bool {
    shared.metrics.record_decodes(1, group.len() as u64);
    let stepped =
        std::panic::catch_unwind(AssertUnwindSafe(|| batch_run::step(eng, &mut group[..])));
    match stepped {
        Ok(Ok(ended)) => {
            retire(eng, cached, group, ended, shared);
            super::batch_recover::cleared(group);
            false
        }
        Ok(Err(e)) => {
            // The forward itself failed: every request of the step fails with it.
            let why = format!("the batched step failed: {e}");
            for a in std::mem::take(group) {
                fail(eng, cached, a, &why, shared);
            }
            if let Some(lost) = eng.ctx.lost() {
                (shared.on_device_lost)(format!("{lost:?}"));
            }
            false
        }
        Err(panic) => {
            let why = format!(
                "internal error in the batched step: {}",
                panic_text(&*panic)
            );
            super::batch_recover::after_panic(eng, cached, group, &why, shared);
            true
        }
    }
}

/// Ends request `a` with an error: the client is told what failed, its slot's cache and drafter
/// are reset (their rows are in no known state) and the slot is freed.
pub(super) fn fail(
    eng: &mut Engine,
    cached: &mut [Vec<u32>],
    a: Active<'_>,
    why: &str,
    shared: &Shared,
) {
    Metrics::inc(&shared.metrics.errors);
    let seq = a.st.seq;
    a.clock.failed(why);
    let _ = a.job.tx.send(Event::Error(why.to_string()));
    if let Some(c) = cached.get_mut(seq) {
        c.clear();
    }
    shared.metrics.set_kv_used(seq, 0);
    // The slot's cache and its drafter's.
    let _ = eng.reset(seq);
    shared.slots.release(seq);
}

/// Takes the requests that ended in a step (and those whose client left meanwhile) out of
/// `active`, each drafter given its committed rows, and finishes them; a request that failed is
/// failed alone.
fn retire(
    eng: &mut Engine,
    cached: &mut [Vec<u32>],
    active: &mut Vec<Active<'_>>,
    mut ended: Vec<(usize, Ended<End>)>,
    shared: &Shared,
) {
    for (i, a) in active.iter().enumerate() {
        if a.job.tx.is_closed() && !ended.iter().any(|(k, _)| *k == i) {
            ended.push((i, Ended::End(End::ClientGone)));
        }
    }
    // Highest index first, so the others stay put; `remove` keeps the admission order.
    ended.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
    ended.dedup_by_key(|(i, _)| *i);
    for (i, end) in ended {
        let a = active.remove(i);
        let end = match end {
            Ended::End(end) => end,
            Ended::Failed(e) => {
                fail(eng, cached, a, &e.to_string(), shared);
                continue;
            }
        };
        // A panic while settling or finishing is this request's alone.
        let (seq, tx, clock) = (a.st.seq, a.job.tx.clone(), a.clock.clone());
        let settled = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut a = a;
            if let Err(e) = batch_run::settle(eng, &mut a.st) {
                fail(eng, cached, a, &e.to_string(), shared);
                return;
            }
            let run = eng.rows(a.st.seq).ok();
            // What its drafting showed feeds the drafter decision, as `generate`'s does.
            if let (Some(p), Some(end_row)) = (&a.st.pending, run) {
                eng.record_acceptance(&p.spec, a.st.generated.len(), end_row);
            }
            finish(a, end, run, cached, shared);
        }));
        if let Err(panic) = settled {
            let why = format!("internal error ending the request: {}", panic_text(&*panic));
            super::batch_recover::lost(eng, cached, seq, &tx, &clock, &why, shared);
        }
    }
}

/// Takes waiting jobs into free slots, truncating each slot's cache to the prefix it shares
/// with the new prompt. A panic while admitting a job fails that job alone.
fn admit<'t>(
    eng: &mut Engine,
    tok: &'t Tokenizer,
    cached: &mut [Vec<u32>],
    active: &mut Vec<Active<'t>>,
    shared: &'t Shared,
    grammars: &mut Option<Grammars>,
) {
    for seq in 0..cached.len() {
        if active.iter().any(|a| a.st.seq == seq) {
            continue;
        }
        let Some(job) = shared.slots.try_next(seq) else {
            return;
        };
        shared.metrics.record_wait(job.queued_at.elapsed());
        let clock = JobClock::new(shared.slots.trace(job.id), job.queued_at, seq);
        let (tx, clock2) = (job.tx.clone(), clock.clone());
        let admitted = std::panic::catch_unwind(AssertUnwindSafe(|| {
            admit_one(eng, tok, cached, seq, job, clock, shared, grammars)
        }));
        match admitted {
            Ok(Some(a)) => active.push(a),
            Ok(None) => {}
            Err(panic) => {
                let why = format!(
                    "internal error admitting the request: {}",
                    panic_text(&*panic)
                );
                super::batch_recover::lost(eng, cached, seq, &tx, &clock2, &why, shared);
            }
        }
    }
}

/// Admits `job` into free slot `seq`: `None` when it ended there (refused, or an embedding).
#[allow(clippy::too_many_arguments)]
fn admit_one<'t>(
    eng: &mut Engine,
    tok: &'t Tokenizer,
    cached: &mut [Vec<u32>],
    seq: usize,
    mut job: Job,
    clock: JobClock,
    shared: &'t Shared,
    grammars: &mut Option<Grammars>,
) -> Option<Active<'t>> {
    #[cfg(feature = "fault")]
    super::batch_recover::fault(&job, "FLINT_FAULT_ADMIT");
    let refuse = |job: Job, clock: JobClock, why: String| {
        clock.failed(&why);
        let _ = job.tx.send(Event::Error(why));
        shared.slots.release(seq);
        None
    };
    if job.prompt.is_empty() {
        // The handler refuses these with a 400; never a step without rows.
        return refuse(job, clock, "the prompt has no tokens".into());
    }
    let slot_ids = &mut cached[seq];
    if job.embed.is_some() {
        super::embed_job::serve_batched(eng, seq, slot_ids, job, shared);
        return None;
    }
    let ids = &job.prompt;
    let common = slot_ids.iter().zip(ids).take_while(|(a, b)| a == b).count();
    let mut keep = common.min(ids.len().saturating_sub(1));
    let sampler = match job.sampler(eng.hp().n_vocab) {
        Ok(s) => s,
        Err(e) => return refuse(job, clock, e.to_string()),
    };
    // The grammar compiled when the request was prepared; else compiled here (a grammar that
    // does not compile ends this request alone, before it takes a row).
    let guide = match job.guide.take() {
        Some(g) => Some(g),
        None => match compile_job(&job, eng, grammars) {
            Ok(g) => g,
            Err(e) => return refuse(job, clock, e.to_string()),
        },
    };
    // Ring caches (Gemma 3's sliding layers) keep only what a short cut can come back to;
    // an echo's log-probabilities need every prompt row's logits.
    if !eng.can_truncate(seq, keep as u32) || job.logprobs.is_some_and(|w| w.echo) {
        keep = 0;
    }
    let drafter = match eng.drafters.get_mut(seq) {
        Some(d) => {
            // The drafter's rows are a function of the prefix: keep those of the kept one
            // (none where its position window moved past it).
            if (keep as u32) < d.base() {
                keep = 0;
            }
            if keep == 0 {
                d.reset();
            }
            d.truncate(keep as u32);
            if d.next_position() != keep as u32 {
                keep = 0;
                d.reset();
            }
            true
        }
        None => false,
    };
    if let Err(e) = eng.truncate(seq, keep as u32) {
        return refuse(job, clock, e.to_string());
    }
    slot_ids.truncate(keep);
    let mut st = SeqState::new(
        seq,
        job.prompt.clone(),
        keep,
        job.max_tokens,
        sampler,
        drafter,
    );
    st.guide = guide;
    st.logprobs = job.logprobs;
    Some(Active {
        st,
        stop: StopMatcher::new(job.stop.clone()),
        marks: Default::default(),
        drafted: false,
        job,
        tok,
        slots: &shared.slots,
        decoder: tok.stream_decoder(false),
        started: Instant::now(),
        first_token: None,
        clock,
        recovery: Default::default(),
    })
}

impl BatchRequest for Active<'_> {
    type End = End;

    fn state(&self) -> &SeqState {
        &self.st
    }

    fn state_mut(&mut self) -> &mut SeqState {
        &mut self.st
    }

    fn note_drafted(&mut self, drafted: bool) {
        self.drafted = drafted;
    }

    /// Streams the token's text (stop strings held back), as the turn-taking worker does.
    fn on_token(&mut self, token: u32, full: bool) -> Result<Option<End>> {
        #[cfg(feature = "fault")]
        super::batch_recover::fault(&self.job, "FLINT_FAULT_STEP");
        self.first_token.get_or_insert_with(Instant::now);
        self.clock.token();
        let lp = self.take_logprobs();
        if self.job.max_tokens == 0 {
            // `echo` with `max_tokens: 0`: the prompt's log-probabilities alone.
            return Ok(Some(End::Length));
        }
        if self.tok.is_eog(token) || self.job.stop_ids.contains(&token) {
            return Ok(Some(End::Eog));
        }
        if let Some(lp) = lp {
            let _ = self.job.tx.send(Event::Logprobs(vec![lp]));
        }
        self.st.generated.push(token);
        if self.job.tx.is_closed() {
            return Ok(Some(End::ClientGone));
        }
        if self.slots.is_shutting_down() {
            return Ok(Some(End::Shutdown));
        }
        let piece = self.decoder.push(token)?;
        self.marks
            .push(piece.len(), std::mem::take(&mut self.drafted));
        let (text, stopped) = match self.stop.push(&piece) {
            StopState::Emit(text) => (text, false),
            StopState::Stop(text) => (text, true),
        };
        if !text.is_empty() {
            let _ = self.job.tx.send(Event::Text(self.marks.take(text)));
        }
        if stopped {
            return Ok(Some(End::StopString));
        }
        if self.st.generated.len() >= self.job.max_tokens || full {
            return Ok(Some(End::Length));
        }
        Ok(None)
    }
}

impl Active<'_> {
    /// Sends the prompt's log-probability entries waiting (`echo`) and takes the next
    /// generated token's (its text is about to be sent).
    fn take_logprobs(&mut self) -> Option<super::logprobs::LpToken> {
        let lp = &mut self.st.lp;
        let n_prompt = lp.iter().take_while(|e| e.prompt).count();
        if n_prompt > 0 {
            let tok = self.tok;
            let prompt: Vec<_> = lp
                .drain(..n_prompt)
                .map(|e| super::logprobs::with_text(tok, e))
                .collect();
            let _ = self.job.tx.send(Event::Logprobs(prompt));
        }
        (!self.st.lp.is_empty()).then(|| super::logprobs::with_text(self.tok, self.st.lp.remove(0)))
    }
}

/// Ends a request: the rest of its text, its outcome, the slot's cached ids and its release.
/// `run`: the rows its sequence's cache holds.
fn finish(mut a: Active<'_>, end: End, run: Option<u32>, cached: &mut [Vec<u32>], shared: &Shared) {
    #[cfg(feature = "fault")]
    super::batch_recover::fault(&a.job, "FLINT_FAULT_RETIRE");
    let now = Instant::now();
    let first = a.first_token.unwrap_or(now);
    let st = &a.st;
    let stats = GenStats {
        prompt_tokens: a.job.prompt.len() - st.keep,
        generated_tokens: st.generated.len(),
        prefill_secs: first.duration_since(a.started).as_secs_f64(),
        decode_secs: now.duration_since(first).as_secs_f64(),
        spec: st.pending.as_ref().map(|p| p.spec.clone()),
        ..GenStats::default()
    };
    shared.metrics.record(&stats);
    if let Some(c) = cached.get_mut(st.seq) {
        // The prompt rows run (all of them once it decodes) and the tokens fed back.
        // (After a rebuild the prompt holds the tokens generated before it.)
        let prompt = &st.prompt[st.keep..st.keep + st.fed];
        let generated = st.generated.get(a.recovery.in_prompt..).unwrap_or_default();
        crate::engine::solo::note_cached(c, prompt, generated, run.unwrap_or(0));
        shared.metrics.set_kv_used(st.seq, c.len());
    }
    shared.slots.release(st.seq);
    let mut reason = match end {
        End::ClientGone => return,
        End::Shutdown => {
            let _ = a.job.tx.send(Event::Shutdown);
            return;
        }
        End::StopString => "stop",
        End::Eog => "stop",
        End::Length => "length",
    };
    // An end token or the length limit flushes the decoder and the held-back text (where a
    // stop string may still show up).
    if reason == "length" || matches!(end, End::Eog) {
        let rest = a.decoder.finish();
        a.marks.push(rest.len(), false);
        let tail = match a.stop.push(&rest) {
            StopState::Emit(t) => t + &a.stop.finish(),
            StopState::Stop(t) => {
                reason = "stop";
                t
            }
        };
        if !tail.is_empty() {
            let _ = a.job.tx.send(Event::Text(a.marks.take(tail)));
        }
    }
    let outcome = Outcome {
        finish_reason: reason,
        prompt_tokens: a.job.prompt.len(),
        cached_tokens: a.st.keep,
        completion_tokens: a.st.generated.len(),
        prompt_ms: stats.prefill_secs * 1e3,
        predicted_ms: stats.decode_secs * 1e3,
        spec: a
            .st
            .pending
            .as_ref()
            .map(|p| (p.spec.drafted, p.spec.accepted)),
        draft_cycles: a.st.pending.as_ref().map_or(0, |p| p.spec.cycles),
        stop_word: a.stop.matched.clone(),
    };
    a.clock.finished(&shared.metrics, &outcome);
    let _ = a.job.tx.send(Event::Done(outcome));
}

/// The matcher of `job`'s grammar (none without one); the model's compiler is built by the
/// first job that needs it.
fn compile_job(
    job: &Job,
    eng: &Engine,
    grammars: &mut Option<Grammars>,
) -> crate::Result<Option<Guide>> {
    let Some(spec) = &job.grammar else {
        return Ok(None);
    };
    if grammars.is_none() {
        *grammars = Some(Grammars::new(&eng.tok, eng.hp().n_vocab)?);
    }
    match grammars {
        Some(g) => Ok(Some(Guide::new(Box::new(g.compile(spec)?)))),
        None => Ok(None),
    }
}
