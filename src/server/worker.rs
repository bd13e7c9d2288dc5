//! A slot's worker thread: it owns one session (KV cache, compute buffers, drafter), takes jobs
//! from the queue and streams their text back. Slots share the device through a fair lock that
//! a worker hands over after every token (`bump`), so concurrent requests advance in turn.
//! A slot keeps the K/V rows of its last request and reuses the longest common token prefix.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use parking_lot::Mutex;

use super::metrics::Metrics;
use super::reqlog::JobClock;
use super::slots::{Event, Job, Outcome, Slots};
use super::stop::{StopMatcher, StopState};
use crate::engine::Engine;
use crate::grammar::steps::Guide;
use crate::grammar::Grammars;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// What the worker of one slot shares with the server.
pub struct Shared {
    pub slots: Arc<Slots>,
    /// Held while a slot runs the device; handed over fairly after each token.
    pub device: Arc<Mutex<()>>,
    pub metrics: Arc<Metrics>,
    /// Called once when the device is lost.
    pub on_device_lost: Arc<dyn Fn(String) + Send + Sync>,
    /// Called when the slot cannot go on (the server then reports the failure and exits).
    pub on_fatal: Arc<dyn Fn(String) + Send + Sync>,
}

/// Serve jobs on `engine` as slot `slot` until shutdown. A job that fails (or panics) ends with
/// an error and a reset session; the slot goes on, unless jobs panic [`MAX_PANICS`] times in a
/// row (then `on_fatal`).
pub fn run(slot: usize, mut engine: Engine, shared: Shared) {
    // Token ids whose K/V rows the slot's cache holds, in order.
    let mut cached: Vec<u32> = Vec::new();
    // The generation borrows the engine mutably; the detokenizer needs its own tokenizer.
    let tok = engine.tok.clone();
    let mut panics = 0u32;
    // The model's grammar compiler, built by the first job with a grammar.
    let mut grammars: Option<Grammars> = None;
    while let Some(job) = shared.slots.next(slot) {
        let tx = job.tx.clone();
        let mut clock = JobClock::new(shared.slots.trace(job.id), job.queued_at, slot);
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            run_job(
                &mut engine,
                &tok,
                &mut cached,
                job,
                &shared,
                &mut clock,
                &mut grammars,
            )
        }));
        engine.grammar = None;
        let failed = match result {
            Ok(Ok(())) => {
                panics = 0;
                None
            }
            Ok(Err(e)) => Some(e.to_string()),
            Err(panic) => {
                panics += 1;
                Some(format!(
                    "internal error in slot {slot}: {}",
                    super::batch_worker::panic_text(&*panic)
                ))
            }
        };
        if let Some(why) = failed {
            Metrics::inc(&shared.metrics.errors);
            clock.failed(&why);
            cached.clear();
            shared.metrics.set_kv_used(slot, 0);
            let _ = engine.reset();
            if let Some(lost) = engine.ctx.lost() {
                (shared.on_device_lost)(format!("{lost:?}"));
            }
            let _ = tx.send(Event::Error(why.clone()));
            if panics >= MAX_PANICS {
                shared.slots.release(slot);
                (shared.on_fatal)(format!("{MAX_PANICS} jobs in a row panicked: {why}"));
                return;
            }
        }
        shared.slots.release(slot);
    }
}

/// Jobs in a row that may panic before the slot gives up.
const MAX_PANICS: u32 = 3;

/// Why a generation stopped early from the token callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    None,
    StopString,
    ClientGone,
    Shutdown,
}

/// An embedding job ([`super::embed_job`]): no generation; the slot's cached prefix is gone.
fn embed(engine: &mut Engine, cached: &mut Vec<u32>, mut job: Job, shared: &Shared) -> Result<()> {
    let _device = shared.device.lock();
    cached.clear();
    let v = super::embed_job::on_engine(engine, &job.prompt)?;
    if let Some(reply) = job.embed.take() {
        let _ = reply.send(v);
    }
    Ok(())
}

fn run_job(
    engine: &mut Engine,
    tok: &Tokenizer,
    cached: &mut Vec<u32>,
    job: Job,
    shared: &Shared,
    clock: &mut JobClock,
    grammars: &mut Option<Grammars>,
) -> Result<()> {
    shared.metrics.record_wait(job.queued_at.elapsed());
    if job.embed.is_some() {
        return embed(engine, cached, job, shared);
    }
    // A grammar that does not compile ends this job alone, before any step.
    engine.grammar = match &job.grammar {
        Some(spec) => {
            if grammars.is_none() {
                *grammars = Some(Grammars::new(&engine.tok, engine.fwd.hp.n_vocab)?);
            }
            let g = grammars
                .as_ref()
                .ok_or_else(|| Error::Usage("no grammars".into()))?;
            Some(Guide::new(Box::new(g.compile(spec)?)))
        }
        None => None,
    };
    let mut device = shared.device.lock();
    let ids = &job.prompt;
    let keep = engine.keep_prefix(cached, ids)?;
    let mut sampler = job.sampler(engine.fwd.hp.n_vocab)?;
    let mut decoder = tok.stream_decoder(false);
    let mut stop = StopMatcher::new(job.stop.clone());
    let mut generated: Vec<u32> = Vec::new();
    let mut cut = Cut::None;
    let stats = engine.generate(&ids[keep..], job.max_tokens, sampler.as_mut(), |t| {
        clock.token();
        generated.push(t);
        if job.tx.is_closed() {
            cut = Cut::ClientGone;
            return Ok(false);
        }
        if shared.slots.is_shutting_down() {
            cut = Cut::Shutdown;
            return Ok(false);
        }
        let piece = decoder.push(t)?;
        let (text, stopped) = match stop.push(&piece) {
            StopState::Emit(text) => (text, false),
            StopState::Stop(text) => (text, true),
        };
        if !text.is_empty() {
            let _ = job.tx.send(Event::Text(text));
        }
        if stopped {
            cut = Cut::StopString;
            return Ok(false);
        }
        // Other slots run their steps here; the client may leave meanwhile.
        parking_lot::MutexGuard::bump(&mut device);
        if job.tx.is_closed() {
            cut = Cut::ClientGone;
            return Ok(false);
        }
        Ok(true)
    })?;
    drop(device);
    Engine::note_cached(cached, &ids[keep..], &generated, engine.fwd.kv.len(0)?);
    shared.metrics.record(&stats);
    shared.metrics.set_kv_used(clock.slot(), cached.len());
    // One forward for the prompt, then one per verify batch or plain step (one per token
    // after the first without a drafter); each ran this slot's rows alone.
    let forwards = match &stats.spec {
        Some(spec) => 1 + spec.target_forwards,
        None => stats.generated_tokens.max(1) as u64,
    };
    shared.metrics.record_decodes(forwards, 1);
    match cut {
        Cut::ClientGone => return Ok(()),
        Cut::Shutdown => {
            let _ = job.tx.send(Event::Shutdown);
            return Ok(());
        }
        Cut::StopString | Cut::None => {}
    }
    if cut == Cut::None {
        let rest = decoder.finish();
        let tail = match stop.push(&rest) {
            StopState::Emit(t) => t + &stop.finish(),
            StopState::Stop(t) => {
                cut = Cut::StopString;
                t
            }
        };
        if !tail.is_empty() {
            let _ = job.tx.send(Event::Text(tail));
        }
    }
    let full = engine.fwd.kv.len(0)? >= engine.fwd.kv.capacity();
    let finish_reason = if cut == Cut::StopString {
        "stop"
    } else if stats.generated_tokens >= job.max_tokens || full {
        "length"
    } else {
        "stop"
    };
    let outcome = Outcome {
        finish_reason,
        prompt_tokens: ids.len(),
        cached_tokens: keep,
        completion_tokens: stats.generated_tokens,
        prompt_ms: stats.prefill_secs * 1e3,
        predicted_ms: stats.decode_secs * 1e3,
        spec: stats.spec.as_ref().map(|s| (s.drafted, s.accepted)),
        stop_word: stop.matched.clone(),
    };
    clock.finished(&shared.metrics, &outcome);
    let _ = job.tx.send(Event::Done(outcome));
    Ok(())
}
