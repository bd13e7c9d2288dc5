//! Slots and the pending queue. `N` worker threads (one per slot, each owning a session with its
//! own KV cache and drafter) take jobs from one bounded FIFO queue. A request that finds every
//! slot busy and the queue full is refused at once (429); a job whose client left while it
//! waited is dropped unrun. Shutdown wakes every worker and fails the waiting jobs.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::reqlog::{self, Trace};
use crate::sampling::{Sampler, SamplerError, SamplerParams};

/// What a worker sends back to the request's handler.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Generated text (never splits a character; stop strings held back), with the ranges of
    /// it that are accepted drafts.
    Text(super::drafted::Piece),
    /// Log-probabilities of the tokens whose text comes next (and, with `echo`, of the prompt's
    /// tokens, before the first generated one's).
    Logprobs(Vec<super::logprobs::LpToken>),
    /// The generation ended.
    Done(Outcome),
    /// The generation failed (engine error, device loss).
    Error(String),
    /// The server is shutting down: the generation was cut short or never ran.
    Shutdown,
}

/// How a generation ended, with its counters.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// `stop` (end token or stop string) or `length` (max_tokens or context full).
    pub finish_reason: &'static str,
    pub prompt_tokens: usize,
    /// Prompt tokens whose K/V rows were reused from the slot's previous request.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    pub prompt_ms: f64,
    pub predicted_ms: f64,
    /// (drafted, accepted) when the slot speculated.
    pub spec: Option<(u64, u64)>,
    /// Decode steps that drafted (τ = (accepted + cycles) / cycles).
    pub draft_cycles: u64,
    /// The stop string that ended the text (`finish_reason` `stop` without an end token).

    /// The stop string that ended it, if one did.
    pub stop_word: Option<String>,
}

/// One generation to run.
#[derive(Debug)]
pub struct Job {
    /// Set by [`Slots::submit`]; what [`Slots::withdraw`] names.
    pub id: u64,
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: Option<SamplerParams>,
    /// `(token id, bias)` added to the logits (`logit_bias`, and -inf on end tokens for
    /// `ignore_eos`); non-empty only with a host sampler (`sampling` is `Some`).
    pub bias: Vec<(u32, f32)>,
    pub stop: Vec<String>,
    pub tx: UnboundedSender<Event>,
    pub queued_at: Instant,
    /// Told when a slot takes the job (the handler's queue deadline stops then).
    pub admitted: Option<tokio::sync::oneshot::Sender<()>>,
    /// `Some`: an embedding, not a generation: the prompt rows run as a prefill and their
    /// pooled final hidden state is sent here (`embeddings`); failures still go to `tx`.
    pub embed: Option<EmbedReply>,
    /// `Some`: every generated token must keep the output inside this grammar.
    pub grammar: Option<crate::grammar::GrammarSpec>,
    /// That grammar compiled for the model when the request was prepared (the worker compiles
    /// `grammar` itself only when this is `None`).
    pub guide: Option<crate::grammar::steps::Guide>,
    /// Tokens that end the answer like an end-of-generation token (`stop_token_ids`).
    pub stop_ids: Vec<u32>,
    /// How an embedding job pools its rows (the model's `{arch}.pooling_type`).
    pub pooling: super::embed_job::Pooling,
    /// Log-probabilities asked for.
    pub logprobs: Option<crate::engine::logprobs::Want>,
}

/// Where an embedding job's vector goes.
pub type EmbedReply = tokio::sync::oneshot::Sender<Vec<f32>>;

impl Job {
    /// The job's host sampler with its bias; `None`: greedy on the device.
    pub fn sampler(&self, n_vocab: u32) -> Result<Option<Sampler>, SamplerError> {
        self.sampling
            .map(|p| Ok(Sampler::new(p, n_vocab)?.with_bias(self.bias.clone())))
            .transpose()
    }
}

/// Why a job was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Busy { slots: usize, queue: usize },
    ShuttingDown,
}

#[derive(Debug)]
struct Inner {
    queue: VecDeque<Job>,
    busy: Vec<bool>,
    shutdown: bool,
    next_id: u64,
    /// The request log's trace of each job submitted from a request (by job id), until a worker
    /// takes it ([`Slots::trace`]) or the job leaves the queue.
    traces: HashMap<u64, Arc<Trace>>,
}

impl Inner {
    /// The first waiting job whose client is still there (the others dropped), `slot` marked
    /// busy with it.
    fn take(&mut self, slot: usize) -> Option<Job> {
        while let Some(job) = self.queue.pop_front() {
            if job.tx.is_closed() {
                self.traces.remove(&job.id);
                continue;
            }
            if let Some(b) = self.busy.get_mut(slot) {
                *b = true;
            }
            let mut job = job;
            if let Some(told) = job.admitted.take() {
                let _ = told.send(());
            }
            return Some(job);
        }
        None
    }
}

/// The slots' shared state.
#[derive(Debug)]
pub struct Slots {
    inner: Mutex<Inner>,
    wake: Condvar,
    max_queue: usize,
}

impl Slots {
    pub fn new(n_slots: usize, max_queue: usize) -> Slots {
        Slots {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                busy: vec![false; n_slots],
                shutdown: false,
                next_id: 0,
                traces: HashMap::new(),
            }),
            wake: Condvar::new(),
            max_queue,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue a job (its id set), or refuse it when every slot is busy and `max_queue` jobs
    /// already wait. Returns the job's id.
    /// What [`Slots::submit`] would answer now, without a job: the cheap check a handler makes
    /// before parsing and tokenizing a request (the queue may still fill meanwhile).
    pub fn would_refuse(&self) -> Option<Refused> {
        let g = self.lock();
        if g.shutdown {
            return Some(Refused::ShuttingDown);
        }
        let idle = g.busy.iter().filter(|b| !**b).count();
        (g.queue.len() >= self.max_queue + idle).then(|| Refused::Busy {
            slots: g.busy.len(),
            queue: g.queue.len(),
        })
    }

    pub fn submit(&self, mut job: Job) -> Result<u64, Refused> {
        let mut g = self.lock();
        if g.shutdown {
            return Err(Refused::ShuttingDown);
        }
        // Jobs that idle slots are about to take do not count as waiting.
        let idle = g.busy.iter().filter(|b| !**b).count();
        if g.queue.len() >= self.max_queue + idle {
            return Err(Refused::Busy {
                slots: g.busy.len(),
                queue: g.queue.len(),
            });
        }
        job.id = g.next_id;
        g.next_id += 1;
        let id = job.id;
        if let Some(trace) = reqlog::current() {
            g.traces.insert(id, trace);
        }
        g.queue.push_back(job);
        drop(g);
        self.wake.notify_one();
        Ok(id)
    }

    /// Takes job `id` out of the queue if no slot has taken it yet (its queue deadline passed):
    /// whether it was still waiting.
    pub fn withdraw(&self, id: u64) -> bool {
        let mut g = self.lock();
        let before = g.queue.len();
        g.queue.retain(|j| j.id != id);
        g.traces.remove(&id);
        g.queue.len() < before
    }

    /// The request log's trace of job `id` (once: the worker that took the job keeps it).
    pub fn trace(&self, id: u64) -> Option<Arc<Trace>> {
        self.lock().traces.remove(&id)
    }

    /// The next job for `slot` (marking it busy) if one waits now; `None` otherwise and once the
    /// server shuts down. Jobs whose client has gone are dropped here. (The batched worker
    /// admits jobs between steps this way.)
    pub fn try_next(&self, slot: usize) -> Option<Job> {
        let mut g = self.lock();
        if g.shutdown {
            return None;
        }
        g.take(slot)
    }

    /// Blocks until a job waits or the server shuts down (false then).
    pub fn wait_for_job(&self) -> bool {
        let mut g = self.lock();
        loop {
            if g.shutdown {
                return false;
            }
            if !g.queue.is_empty() {
                return true;
            }
            g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// `slot` finished its job.
    pub fn release(&self, slot: usize) {
        if let Some(b) = self.lock().busy.get_mut(slot) {
            *b = false;
        }
    }

    /// Which slots are busy, and how many jobs wait for a busy slot (jobs that idle slots are
    /// about to take, at the batched worker's next step, do not count).
    pub fn snapshot(&self) -> (Vec<bool>, usize) {
        let g = self.lock();
        let idle = g.busy.iter().filter(|b| !**b).count();
        (g.busy.clone(), g.queue.len().saturating_sub(idle))
    }

    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutdown
    }

    /// The server cannot go on: refuse new jobs, fail the waiting ones with `why` and wake every
    /// worker.
    pub fn fail_all(&self, why: &str) {
        let mut g = self.lock();
        g.shutdown = true;
        g.traces.clear();
        for job in g.queue.drain(..) {
            let _ = job.tx.send(Event::Error(why.to_string()));
        }
        drop(g);
        self.wake.notify_all();
    }

    /// Refuse new jobs, fail the waiting ones and wake every worker (running jobs see the flag
    /// at their next token).
    pub fn shutdown(&self) {
        let mut g = self.lock();
        g.shutdown = true;
        g.traces.clear();
        for job in g.queue.drain(..) {
            let _ = job.tx.send(Event::Shutdown);
        }
        drop(g);
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> (Job, tokio::sync::mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let job = Job {
            id: 0,
            prompt: vec![1],
            max_tokens: 1,
            sampling: None,
            bias: Vec::new(),
            stop: Vec::new(),
            tx,
            queued_at: Instant::now(),
            admitted: None,
            embed: None,
            grammar: None,
            logprobs: None,
            guide: None,
            stop_ids: Vec::new(),
            pooling: Default::default(),
        };
        (job, rx)
    }

    #[test]
    fn queue_is_bounded_beyond_the_idle_slots() {
        let s = Slots::new(2, 1);
        let mut keep = Vec::new();
        for _ in 0..3 {
            let (j, rx) = job();
            keep.push(rx);
            assert!(s.submit(j).is_ok());
        }
        let (j, _rx) = job();
        assert_eq!(s.submit(j), Err(Refused::Busy { slots: 2, queue: 3 }));
        // Three jobs, two idle slots about to take two of them: one waits.
        assert_eq!(s.snapshot(), (vec![false, false], 1));
        // Two slots take a job each: one waits, so one more fits.
        assert!(s.try_next(0).is_some() && s.try_next(1).is_some());
        assert_eq!(s.snapshot(), (vec![true, true], 1));
        let (j, _rx2) = job();
        assert_eq!(s.submit(j).map_err(|_| ()), Err(()));
        s.release(0);
        let (j, rx) = job();
        keep.push(rx);
        assert!(s.submit(j).is_ok());
    }

    #[test]
    fn abandoned_jobs_are_skipped_and_shutdown_fails_waiting_ones() {
        let s = Slots::new(1, 4);
        let (j, rx) = job();
        s.submit(j).unwrap();
        drop(rx);
        let (j, mut rx) = job();
        s.submit(j).unwrap();
        let got = s.try_next(0).unwrap();
        assert!(!got.tx.is_closed());
        let (j, mut waiting) = job();
        s.submit(j).unwrap();
        s.shutdown();
        assert!(s.try_next(0).is_none());
        assert!(matches!(waiting.try_recv(), Ok(Event::Shutdown)));
        assert!(rx.try_recv().is_err());
        drop(got);
    }

    #[test]
    fn a_waiting_job_can_be_withdrawn_and_admission_is_told() {
        let s = Slots::new(1, 4);
        let (mut first, _rx1) = job();
        let (told, mut admitted) = tokio::sync::oneshot::channel();
        first.admitted = Some(told);
        let a = s.submit(first).unwrap();
        let (second, _rx2) = job();
        let b = s.submit(second).unwrap();
        assert_ne!(a, b);
        let got = s.try_next(0).unwrap();
        assert_eq!(got.id, a);
        assert_eq!(admitted.try_recv(), Ok(()));
        assert!(!s.withdraw(a), "a job a slot took is not in the queue");
        assert!(s.withdraw(b));
        assert!(!s.withdraw(b));
        s.release(0);
        assert!(s.try_next(0).is_none());
    }
}
