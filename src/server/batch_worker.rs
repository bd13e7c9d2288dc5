//! The batched server loop (continuous batching): one thread owns the [`BatchEngine`] and runs
//! every active request's rows in one forward per step. Between steps it admits waiting jobs
//! into free slots (reusing a slot's cached prefix), drops requests whose client left, and plans
//! the next step with [`plan_step`]: each decoding request's row first, then prompt chunks
//! under the row budget, so a long prompt never stalls the running streams. Sampling, stop
//! strings, streaming and finish reasons are per request, as in the turn-taking worker.

use std::sync::Arc;
use std::time::Instant;

use super::metrics::Metrics;
use super::slots::{Event, Job, Outcome, Slots};
use super::stop::{StopMatcher, StopState};
use crate::engine::batch::BatchEngine;
use crate::engine::batching::{plan_step, Work};
use crate::engine::{Engine, GenStats};
use crate::model::forward::batch::Segment;
use crate::sampling::Sampler;
use crate::tokenizer::{StreamDecoder, Tokenizer};
use crate::Result;

/// What the batched worker shares with the server.
pub struct Shared {
    pub slots: Arc<Slots>,
    pub metrics: Arc<Metrics>,
    /// Called once when the device is lost.
    pub on_device_lost: Arc<dyn Fn(String) + Send + Sync>,
}

/// One running request.
struct Active<'t> {
    seq: usize,
    job: Job,
    /// Prompt rows the slot's cache already held.
    keep: usize,
    /// Prompt rows run so far (from `keep`).
    fed: usize,
    sampler: Option<Sampler>,
    decoder: StreamDecoder<'t>,
    stop: StopMatcher,
    generated: Vec<u32>,
    started: Instant,
    first_token: Option<Instant>,
}

impl Active<'_> {
    fn prompt_left(&self) -> usize {
        self.job.prompt.len() - self.keep - self.fed
    }
}

/// How a request ended.
#[derive(Debug, Clone, Copy)]
enum End {
    /// An end-of-generation token.
    Eog,
    StopString,
    /// `max_tokens` reached, or the slot's context is full.
    Length,
    ClientGone,
    Shutdown,
}

/// Serve jobs in batched steps until shutdown.
pub fn run(mut eng: BatchEngine, shared: Shared) {
    let tok = eng.tok.clone();
    let n_seq = eng.fwd.n_seq();
    // Token ids whose K/V rows each slot's cache holds, in order.
    let mut cached: Vec<Vec<u32>> = vec![Vec::new(); n_seq];
    let mut active: Vec<Active<'_>> = Vec::new();
    loop {
        if active.is_empty() && !shared.slots.wait_for_job() {
            return;
        }
        if shared.slots.is_shutting_down() {
            for a in active.drain(..) {
                let _ = a.job.tx.send(Event::Shutdown);
                shared.slots.release(a.seq);
            }
            return;
        }
        admit(&mut eng, &tok, &mut cached, &mut active, &shared);
        if active.is_empty() {
            continue;
        }
        if let Err(e) = step(&mut eng, &mut cached, &mut active, &shared) {
            Metrics::inc(&shared.metrics.errors);
            for a in active.drain(..) {
                let _ = a.job.tx.send(Event::Error(e.to_string()));
                shared.slots.release(a.seq);
            }
            for (seq, c) in cached.iter_mut().enumerate() {
                c.clear();
                let _ = eng.fwd.kv().reset(seq);
            }
            if let Some(lost) = eng.ctx.lost() {
                (shared.on_device_lost)(format!("{lost:?}"));
            }
        }
    }
}

/// Takes waiting jobs into free slots, truncating each slot's cache to the prefix it shares
/// with the new prompt.
fn admit<'t>(
    eng: &mut BatchEngine,
    tok: &'t Tokenizer,
    cached: &mut [Vec<u32>],
    active: &mut Vec<Active<'t>>,
    shared: &Shared,
) {
    for (seq, slot_ids) in cached.iter_mut().enumerate() {
        if active.iter().any(|a| a.seq == seq) {
            continue;
        }
        let Some(job) = shared.slots.try_next(seq) else {
            return;
        };
        shared.metrics.record_wait(job.queued_at.elapsed());
        let ids = &job.prompt;
        let common = slot_ids.iter().zip(ids).take_while(|(a, b)| a == b).count();
        let keep = common.min(ids.len().saturating_sub(1));
        let sampler = match job.sampling {
            Some(p) => match Sampler::new(p, eng.fwd.hp().n_vocab) {
                Ok(s) => Some(s),
                Err(e) => {
                    let _ = job.tx.send(Event::Error(e.to_string()));
                    shared.slots.release(seq);
                    continue;
                }
            },
            None => None,
        };
        if let Err(e) = eng.fwd.kv().truncate_to(seq, keep as u32) {
            let _ = job.tx.send(Event::Error(e.to_string()));
            shared.slots.release(seq);
            continue;
        }
        slot_ids.truncate(keep);
        active.push(Active {
            seq,
            stop: StopMatcher::new(job.stop.clone()),
            job,
            keep,
            fed: 0,
            sampler,
            decoder: tok.stream_decoder(false),
            generated: Vec::new(),
            started: Instant::now(),
            first_token: None,
        });
    }
}

/// One batched step over the active requests, then each one's token handled; finished
/// requests leave `active` with their slots released.
fn step(
    eng: &mut BatchEngine,
    cached: &mut [Vec<u32>],
    active: &mut Vec<Active<'_>>,
    shared: &Shared,
) -> Result<()> {
    let capacity = eng.fwd.capacity() as usize;
    let work: Vec<Work> = active
        .iter()
        .map(|a| Work {
            seq: a.seq,
            prompt_left: a.prompt_left(),
        })
        .collect();
    let rows = plan_step(&work, eng.fwd.max_rows() as usize);
    let mut segs = Vec::with_capacity(rows.len());
    // Index in `active` of each logits row's request.
    let mut logits_of = Vec::new();
    for &(seq, m) in &rows {
        let Some(i) = active.iter().position(|a| a.seq == seq) else {
            continue;
        };
        let a = &active[i];
        let (tokens, logits) = if a.prompt_left() > 0 {
            let from = a.keep + a.fed;
            (&a.job.prompt[from..from + m], a.prompt_left() == m)
        } else {
            let last = a.generated.len() - 1;
            (&a.generated[last..], true)
        };
        segs.push(Segment {
            seq,
            tokens,
            logits,
        });
        if logits {
            logits_of.push(i);
        }
    }
    eng.step(&segs)?;
    for &(seq, m) in &rows {
        if let Some(a) = active
            .iter_mut()
            .find(|a| a.seq == seq && a.prompt_left() > 0)
        {
            a.fed += m;
        }
    }
    let greedy = logits_of.iter().all(|&i| active[i].sampler.is_none());
    let ids = eng.fwd.argmax(&eng.ctx)?;
    let logits = if greedy {
        Vec::new()
    } else {
        eng.fwd.logits(&eng.ctx)?
    };
    let n_vocab = eng.fwd.hp().n_vocab as usize;
    let mut ended = Vec::new();
    for (j, &i) in logits_of.iter().enumerate() {
        let a = &mut active[i];
        let token = match &mut a.sampler {
            None => ids[j],
            Some(s) => {
                let t = s.sample(&logits[j * n_vocab..(j + 1) * n_vocab]);
                s.accept(t);
                t
            }
        };
        let full = eng.fwd.kv().len(a.seq)? as usize >= capacity;
        if let Some(end) = emit(a, token, &eng.tok, shared, full)? {
            ended.push((i, end));
        }
    }
    // Requests whose client left while waiting for their step.
    for (i, a) in active.iter().enumerate() {
        if a.job.tx.is_closed() && !ended.iter().any(|(k, _)| *k == i) {
            ended.push((i, End::ClientGone));
        }
    }
    // Highest index first, so the others stay put; `remove` keeps the admission order.
    ended.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
    for (i, end) in ended {
        let a = active.remove(i);
        finish(a, end, cached, shared);
    }
    Ok(())
}

/// Handles a request's new token: `Some` when the request ends with it.
fn emit(
    a: &mut Active<'_>,
    token: u32,
    tok: &Tokenizer,
    shared: &Shared,
    full: bool,
) -> Result<Option<End>> {
    a.first_token.get_or_insert_with(Instant::now);
    if tok.is_eog(token) {
        return Ok(Some(End::Eog));
    }
    a.generated.push(token);
    if a.job.tx.is_closed() {
        return Ok(Some(End::ClientGone));
    }
    if shared.slots.is_shutting_down() {
        return Ok(Some(End::Shutdown));
    }
    let piece = a.decoder.push(token)?;
    let (text, stopped) = match a.stop.push(&piece) {
        StopState::Emit(text) => (text, false),
        StopState::Stop(text) => (text, true),
    };
    if !text.is_empty() {
        let _ = a.job.tx.send(Event::Text(text));
    }
    if stopped {
        return Ok(Some(End::StopString));
    }
    if a.generated.len() >= a.job.max_tokens || full {
        return Ok(Some(End::Length));
    }
    Ok(None)
}

/// Ends a request: the rest of its text, its outcome, the slot's cached ids and its release.
fn finish(mut a: Active<'_>, end: End, cached: &mut [Vec<u32>], shared: &Shared) {
    let now = Instant::now();
    let first = a.first_token.unwrap_or(now);
    let stats = GenStats {
        prompt_tokens: a.job.prompt.len() - a.keep,
        generated_tokens: a.generated.len(),
        prefill_secs: first.duration_since(a.started).as_secs_f64(),
        decode_secs: now.duration_since(first).as_secs_f64(),
        ..GenStats::default()
    };
    shared.metrics.record(&stats);
    if let Some(c) = cached.get_mut(a.seq) {
        Engine::note_cached(c, &a.job.prompt[a.keep..], &a.generated);
    }
    shared.slots.release(a.seq);
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
        let tail = match a.stop.push(&rest) {
            StopState::Emit(t) => t + &a.stop.finish(),
            StopState::Stop(t) => {
                reason = "stop";
                t
            }
        };
        if !tail.is_empty() {
            let _ = a.job.tx.send(Event::Text(tail));
        }
    }
    let outcome = Outcome {
        finish_reason: reason,
        prompt_tokens: a.job.prompt.len(),
        cached_tokens: a.keep,
        completion_tokens: a.generated.len(),
        prompt_ms: stats.prefill_secs * 1e3,
        predicted_ms: stats.decode_secs * 1e3,
        spec: None,
    };
    let _ = a.job.tx.send(Event::Done(outcome));
}
