//! Panics charged to the requests they came from (the batched worker's recovery).
//!
//! A panic inside a batched step leaves the step's requests in no known state: some committed
//! their tokens, one may have half-committed, others wrote K/V rows they never counted. After
//! unwinding, the engine's step state is reset (the grammar mask; each sequence of the step
//! emptied, its replay log and drafter staging with it) and every request of the step is
//! rebuilt from its text so far: its prompt becomes the prompt and every token it has emitted,
//! run again from row 0 (the client saw those tokens; greedy decoding gives the same next
//! tokens, the kernels being row-invariant). Each then runs its steps alone until it has given
//! a token. A request that panics alone is the culprit and is failed; the others rejoin the
//! batch (each alone step gives a token, so even a fault that only co-batching hits lets every
//! request end). A panic while admitting or retiring a request fails that request.
//!
//! With the `fault` cargo feature, requests carrying a stop string `FLINT_FAULT_STEP`,
//! `FLINT_FAULT_ADMIT`, `FLINT_FAULT_RETIRE` or `FLINT_FAULT_WORKER` panic at that point, and
//! `FLINT_FAULT=loader` panics the model loader (tests/serve_panics.rs reaches every arm).

use tokio::sync::mpsc::UnboundedSender;

use super::batch_worker::{fail, Active, Shared};
use super::metrics::Metrics;
use super::reqlog::{JobClock, TARGET};
use super::slots::Event;
use crate::engine::batch_run::Pending;
use crate::engine::Engine;

/// How a request stands after panics.
#[derive(Debug, Default, Clone, Copy)]
pub struct Recovery {
    /// It runs its steps alone (until it gives a token).
    pub alone: bool,
    /// `generated` tokens a rebuild moved into its prompt (the slot's cached ids skip them).
    pub in_prompt: usize,
    /// `generated.len()` when it was rebuilt.
    pub mark: usize,
}

/// After a good step: requests running alone that gave a token rejoin the batch.
pub fn cleared(group: &mut [Active<'_>]) {
    for a in group {
        if a.recovery.alone && a.st.generated.len() > a.recovery.mark {
            a.recovery.alone = false;
        }
    }
}

/// After a panicked step of `group`: the engine's step state reset, the culprit failed (a
/// request that ran alone), the others rebuilt to run alone.
pub fn after_panic<'t>(
    eng: &mut Engine,
    cached: &mut [Vec<u32>],
    group: &mut Vec<Active<'t>>,
    why: &str,
    shared: &'t Shared,
) {
    eng.clear_mask();
    let lone = group.len() == 1;
    tracing::error!(target: TARGET, requests = group.len(), "{why}");
    for mut a in std::mem::take(group) {
        if lone {
            fail(eng, cached, a, why, shared);
        } else if let Err(e) = rebuild(eng, cached, &mut a, shared) {
            fail(eng, cached, a, &format!("{why}; then {e}"), shared);
        } else {
            group.push(a);
        }
    }
}

/// Empties `a`'s sequence and makes its text so far its prompt, to run again from row 0.
fn rebuild(
    eng: &mut Engine,
    cached: &mut [Vec<u32>],
    a: &mut Active<'_>,
    shared: &Shared,
) -> crate::Result<()> {
    let seq = a.st.seq;
    if let Some(c) = cached.get_mut(seq) {
        c.clear();
    }
    shared.metrics.set_kv_used(seq, 0);
    // The slot's cache and its drafter's.
    eng.reset(seq)?;
    let st = &mut a.st;
    let done = st.generated.len();
    // (The prompt already holds what an earlier rebuild moved into it.)
    let mut prompt = std::mem::take(&mut st.prompt);
    prompt.extend_from_slice(st.generated.get(a.recovery.in_prompt..).unwrap_or_default());
    st.prompt = prompt;
    st.keep = 0;
    st.fed = 0;
    st.rows_next.clear();
    if let Some(p) = &mut st.pending {
        // The counters and the drafter decision carry over; the staging starts afresh.
        *p = Pending {
            spec: std::mem::take(&mut p.spec),
            bypass: p.bypass.take(),
            started: p.started,
            off: p.off,
            ..Pending::default()
        };
    }
    a.recovery.in_prompt = done;
    a.recovery.mark = done;
    a.recovery.alone = true;
    Ok(())
}

/// A request lost to a panic outside a step (admitting or retiring it): the client is told,
/// its slot's cache and drafter reset and the slot freed.
pub fn lost(
    eng: &mut Engine,
    cached: &mut [Vec<u32>],
    seq: usize,
    tx: &UnboundedSender<Event>,
    clock: &JobClock,
    why: &str,
    shared: &Shared,
) {
    Metrics::inc(&shared.metrics.errors);
    clock.failed(why);
    let _ = tx.send(Event::Error(why.to_string()));
    if let Some(c) = cached.get_mut(seq) {
        c.clear();
    }
    shared.metrics.set_kv_used(seq, 0);
    eng.clear_mask();
    let _ = eng.reset(seq);
    shared.slots.release(seq);
}

/// Panics when `job` carries the stop string `point` (the `fault` feature's injection).
#[cfg(feature = "fault")]
pub fn fault(job: &super::slots::Job, point: &str) {
    if job.stop.iter().any(|s| s == point) {
        panic!("injected fault: {point}");
    }
}

/// Panics outside every guard when a running request carries `FLINT_FAULT_WORKER`.
#[cfg(feature = "fault")]
pub fn fault_worker(active: &[Active<'_>]) {
    if active
        .iter()
        .any(|a| a.job.stop.iter().any(|s| s == "FLINT_FAULT_WORKER"))
    {
        panic!("injected fault: FLINT_FAULT_WORKER");
    }
}
