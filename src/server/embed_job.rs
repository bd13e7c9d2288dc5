//! The device side of `/v1/embeddings`: an "embed these rows" job. A slot's cache is emptied,
//! the input's token rows run as a prefill (steps of no logits: the LM head is skipped), the
//! final hidden state of every row (after the output norm, before the LM head) is read back
//! after each step and summed, and the slot's cache is emptied again. Nothing is generated.
//! The vector is the mean over the rows, L2-normalised ([`Pool`]), as llama-server answers
//! `/v1/embeddings` with `--pooling mean` (its default `--embd-normalize 2`).

use std::panic::AssertUnwindSafe;

use super::batch_worker::{self, panic_text};
use super::metrics::Metrics;
use super::slots::{Event, Job};
use crate::engine::Engine;
use crate::model::forward::batch::Segment;
use crate::{Error, Result};

/// The running sum of hidden-state rows `[n_embd]` (f64, so long inputs lose nothing).
#[derive(Debug, Clone)]
pub struct Pool {
    sum: Vec<f64>,
    rows: usize,
}

impl Pool {
    pub fn new(n_embd: usize) -> Pool {
        Pool {
            sum: vec![0.0; n_embd],
            rows: 0,
        }
    }

    /// Adds rows `[m, n_embd]` (row-major).
    pub fn add(&mut self, rows: &[f32]) {
        let d = self.sum.len().max(1);
        for row in rows.chunks_exact(d) {
            for (s, &x) in self.sum.iter_mut().zip(row) {
                *s += f64::from(x);
            }
            self.rows += 1;
        }
    }

    /// The mean of the rows, scaled to unit L2 norm (a zero vector stays zero).
    pub fn finish(self) -> Vec<f32> {
        let n = self.rows.max(1) as f64;
        let mean: Vec<f64> = self.sum.iter().map(|s| s / n).collect();
        let norm = mean.iter().map(|x| x * x).sum::<f64>().sqrt();
        let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
        mean.iter().map(|x| (x * scale) as f32).collect()
    }
}

fn no_rows() -> Error {
    Error::EmptyStep {
        what: "an embedding of no tokens".into(),
    }
}

/// Embeds `ids` in sequence `seq` of the batched session, as a step of its own (between the
/// other requests' steps); the sequence's cache and drafter are emptied before and after.
pub fn on_batch(eng: &mut Engine, seq: usize, ids: &[u32]) -> Result<Vec<f32>> {
    if ids.is_empty() {
        return Err(no_rows());
    }
    reset_seq(eng, seq)?;
    let run = |eng: &mut Engine| -> Result<Vec<f32>> {
        let mut pool = Pool::new(eng.fwd.hp().n_embd as usize);
        let ub = eng.fwd.max_rows().min(eng.fwd.tap_capacity(seq)).max(1) as usize;
        for chunk in ids.chunks(ub) {
            eng.fwd.set_tap_row(seq, 0)?;
            eng.step(&[Segment {
                seq,
                tokens: chunk,
                n_logits: 0,
            }])?;
            // One segment: its rows are the step's rows from 0.
            pool.add(&eng.fwd.hidden(&eng.ctx, 0, chunk.len() as u32)?);
        }
        Ok(pool.finish())
    };
    let out = run(eng);
    reset_seq(eng, seq)?;
    out
}

fn reset_seq(eng: &mut Engine, seq: usize) -> Result<()> {
    eng.fwd.reset(seq)?;
    if let Some(d) = eng.drafters.get_mut(seq) {
        d.reset();
    }
    Ok(())
}

/// Runs an embedding job in free slot `seq` at once, as steps of its own between the others'
/// ([`on_batch`]), and frees the slot; a failure (or panic) fails that job alone.
pub fn serve_batched(
    eng: &mut Engine,
    seq: usize,
    slot_ids: &mut Vec<u32>,
    mut job: Job,
    shared: &batch_worker::Shared,
) {
    slot_ids.clear();
    let ran = std::panic::catch_unwind(AssertUnwindSafe(|| on_batch(eng, seq, &job.prompt)));
    let why = match ran {
        Ok(Ok(v)) => {
            if let Some(reply) = job.embed.take() {
                let _ = reply.send(v);
            }
            None
        }
        Ok(Err(e)) => Some(e.to_string()),
        Err(panic) => Some(format!(
            "internal error in an embedding: {}",
            panic_text(&*panic)
        )),
    };
    if let Some(why) = why {
        Metrics::inc(&shared.metrics.errors);
        let _ = eng.fwd.reset(seq);
        let _ = job.tx.send(Event::Error(why));
        if let Some(lost) = eng.ctx.lost() {
            (shared.on_device_lost)(format!("{lost:?}"));
        }
    }
    shared.slots.release(seq);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_is_the_normalised_mean() {
        let mut p = Pool::new(2);
        p.add(&[3.0, 0.0, 1.0, 4.0]);
        p.add(&[2.0, 2.0]);
        // mean (2, 2) → (1/√2, 1/√2)
        let v = p.finish();
        let h = std::f32::consts::FRAC_1_SQRT_2;
        assert!((v[0] - h).abs() < 1e-6 && (v[1] - h).abs() < 1e-6, "{v:?}");
        assert_eq!(Pool::new(3).finish(), vec![0.0; 3]);
    }
}
