//! The device side of `/v1/embeddings`: an "embed these rows" job. A slot's cache is emptied,
//! the input's token rows run as a prefill (steps of no logits: the LM head is skipped), the
//! final hidden state of every row (after the output norm, before the LM head) is read back
//! after each step and summed, and the slot's cache is emptied again. Nothing is generated.
//! The vector pools the rows as the model's `{arch}.pooling_type` says ([`Pooling`]: the mean,
//! the first row or the last; the mean when the file says nothing, as llama-server answers
//! `/v1/embeddings` with `--pooling mean`), L2-normalised ([`Pool`], llama-server's default
//! `--embd-normalize 2`).

use std::panic::AssertUnwindSafe;

use super::batch_worker::{self, panic_text};
use super::metrics::Metrics;
use super::slots::{Event, Job};
use crate::engine::Engine;
use crate::model::forward::batch::Segment;
use crate::{Error, Result};

/// How a model's rows become one vector: llama.cpp's `enum llama_pooling_type` as the GGUF key
/// `{arch}.pooling_type` stores it (0 none, 1 mean, 2 cls, 3 last, 4 rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooling {
    /// The mean of every row (also a file that sets no pooling type: a generative model).
    #[default]
    Mean,
    /// The first row (the `[CLS]` / BOS token's).
    Cls,
    /// The last row (Qwen3-Embedding and other decoder embedders).
    Last,
}

/// The pooling of a model whose metadata is `meta`; an error (the reason) for the types
/// `/v1/embeddings` cannot answer: `none` (one vector per token) and `rank` (a reranker's score).
pub fn pooling_of(meta: &crate::gguf::Metadata) -> Result<Pooling, String> {
    let Ok(arch) = meta.architecture() else {
        return Ok(Pooling::Mean);
    };
    let key = format!("{arch}.pooling_type");
    let Ok(kind) = meta.i64(&key) else {
        return Ok(Pooling::Mean);
    };
    match kind {
        -1 | 1 => Ok(Pooling::Mean),
        2 => Ok(Pooling::Cls),
        3 => Ok(Pooling::Last),
        0 => Err(format!(
            "the model's `{key}` is 0 (none: a vector per token), which /v1/embeddings does not \
             serve"
        )),
        4 => Err(format!(
            "the model's `{key}` is 4 (rank: a reranker's relevance score), not an embedding"
        )),
        k => Err(format!(
            "the model's `{key}` is {k}, which flint does not know"
        )),
    }
}

/// The running pool of hidden-state rows `[n_embd]` (a sum in f64, so long inputs lose
/// nothing; or the first or last row).
#[derive(Debug, Clone)]
pub struct Pool {
    sum: Vec<f64>,
    rows: usize,
    kind: Pooling,
}

impl Pool {
    pub fn new(n_embd: usize, kind: Pooling) -> Pool {
        Pool {
            sum: vec![0.0; n_embd],
            rows: 0,
            kind,
        }
    }

    /// Adds rows `[m, n_embd]` (row-major), in input order.
    pub fn add(&mut self, rows: &[f32]) {
        let d = self.sum.len().max(1);
        for row in rows.chunks_exact(d) {
            let take = match self.kind {
                Pooling::Mean => true,
                Pooling::Cls => self.rows == 0,
                Pooling::Last => {
                    self.sum.iter_mut().for_each(|s| *s = 0.0);
                    true
                }
            };
            if take {
                for (s, &x) in self.sum.iter_mut().zip(row) {
                    *s += f64::from(x);
                }
            }
            self.rows += 1;
        }
    }

    /// The pooled vector, scaled to unit L2 norm (a zero vector stays zero).
    pub fn finish(self) -> Vec<f32> {
        let n = match self.kind {
            Pooling::Mean => self.rows.max(1) as f64,
            Pooling::Cls | Pooling::Last => 1.0,
        };
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
pub fn on_batch(eng: &mut Engine, seq: usize, ids: &[u32], kind: Pooling) -> Result<Vec<f32>> {
    if ids.is_empty() {
        return Err(no_rows());
    }
    eng.reset(seq)?;
    let run = |eng: &mut Engine| -> Result<Vec<f32>> {
        let mut pool = Pool::new(eng.hp().n_embd as usize, kind);
        let ub = eng.max_rows().min(eng.tap_capacity(seq)).max(1) as usize;
        for chunk in ids.chunks(ub) {
            eng.set_tap_row(seq, 0)?;
            eng.step(&[Segment {
                seq,
                tokens: chunk,
                n_logits: 0,
            }])?;
            // One segment: its rows are the step's rows from 0.
            pool.add(&eng.hidden(0, chunk.len() as u32)?);
        }
        Ok(pool.finish())
    };
    let out = run(eng);
    // The slot's cache and its drafter's.
    eng.reset(seq)?;
    out
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
    let ran = std::panic::catch_unwind(AssertUnwindSafe(|| {
        on_batch(eng, seq, &job.prompt, job.pooling)
    }));
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
        let _ = eng.reset(seq);
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
        let mut p = Pool::new(2, Pooling::Mean);
        p.add(&[3.0, 0.0, 1.0, 4.0]);
        p.add(&[2.0, 2.0]);
        // mean (2, 2) → (1/√2, 1/√2)
        let v = p.finish();
        let h = std::f32::consts::FRAC_1_SQRT_2;
        assert!((v[0] - h).abs() < 1e-6 && (v[1] - h).abs() < 1e-6, "{v:?}");
        assert_eq!(Pool::new(3, Pooling::Mean).finish(), vec![0.0; 3]);
    }

    #[test]
    fn cls_takes_the_first_row_and_last_the_last() {
        let rows = [[3.0f32, 4.0], [1.0, 0.0], [0.0, 2.0]];
        let pool = |kind| {
            let mut p = Pool::new(2, kind);
            p.add(&[rows[0], rows[1]].concat());
            p.add(&rows[2]);
            p.finish()
        };
        assert_eq!(pool(Pooling::Cls), vec![0.6, 0.8]);
        assert_eq!(pool(Pooling::Last), vec![0.0, 1.0]);
    }

    #[test]
    fn the_pooling_type_is_read_as_llama_cpp_writes_it() {
        use crate::gguf::{MetaValue, Metadata};
        let meta = |v: Option<MetaValue>| {
            let mut m = Metadata::new();
            m.set("general.architecture", MetaValue::String("qwen3".into()));
            if let Some(v) = v {
                m.set("qwen3.pooling_type", v);
            }
            m
        };
        assert_eq!(pooling_of(&meta(None)), Ok(Pooling::Mean));
        for (v, want) in [(1, Pooling::Mean), (2, Pooling::Cls), (3, Pooling::Last)] {
            assert_eq!(pooling_of(&meta(Some(MetaValue::U32(v)))), Ok(want));
        }
        assert_eq!(
            pooling_of(&meta(Some(MetaValue::I32(-1)))),
            Ok(Pooling::Mean)
        );
        for (v, word) in [(0, "none"), (4, "rank"), (9, "9")] {
            let e = pooling_of(&meta(Some(MetaValue::U32(v)))).unwrap_err();
            assert!(e.contains("qwen3.pooling_type") && e.contains(word), "{e}");
        }
    }
}
