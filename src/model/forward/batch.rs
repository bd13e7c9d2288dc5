//! A batched step: the rows of several sequences (a server's slots) through one forward pass,
//! one submit. Matmuls, norms, the GLU and the LM head run once over every row (`m = Σ m_s`
//! rows); RoPE, the KV store and attention run per sequence, over that sequence's rows
//! (`row0..row0 + m_s` of the shared buffers) against its own K/V caches:
//! ```text
//! x [m, d] = embed(tokens of seq 0 | seq 1 | …)      positions [m]: each row's own position
//! per layer: xn = norm(x); q,k,v = xn · W               (all rows)
//!            for each seq s: rope + store rows of s into cache_s; attn rows of s over cache_s
//!            x += attn · Wo; x += ffn(norm(x))          (all rows)
//! head_in [L, d] = the last row of each seq that asks for logits; logits [L, V] = head_in · LM
//! ```
//! Every kernel computes a row from that row's inputs alone (the matmul family is batch
//! invariant, attention's fused pass is bit-identical per row to the decode path), so a
//! sequence's results do not depend on which other sequences share the step: its greedy
//! output is the one it gets alone (`tests/batch_forward.rs`).
//!
//! A hybrid model's DeltaNet layers run their conv and delta rule per sequence too, over that
//! sequence's rows and its own recurrent state ([`super::batch_state`]): zeroed at position 0,
//! checkpointed and rolled back per sequence inside the shared step (`tests/batch_hybrid.rs`).

use crate::gpu::GpuContext;
use crate::kernels::attention::MaskMode;
use crate::kernels::launch::{submit, Dispatch};
use crate::kv_cache::KvCache;
use crate::memory::alloc::Allocator;
use crate::memory::batch::max_rows;
use crate::memory::RunParams;
use crate::model::hparams::Hparams;
use crate::model::weights::ModelWeights;
use crate::{Error, Result};

use super::batch_attn::planned_partials;
use super::batch_seq::{seq_ops, Seq, SeqOps, SeqRows};
use super::build::ForwardSpec;
use super::{Forward, Route};

/// One sequence's rows of a batched step.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    /// The sequence (slot), `0..n_seq`; at most once per step.
    pub seq: usize,
    /// Tokens at the sequence's next positions.
    pub tokens: &'a [u32],
    /// Compute the logits of the last `n_logits` rows (0: none, 1: a decode row or a prompt's
    /// last chunk, every row: a verify batch).
    pub n_logits: u32,
}

/// One sequence's rows as a step runs them: the first `r` rows of its replay, then `new`.
struct Run<'a> {
    seq: usize,
    r: usize,
    new: &'a [u32],
    n_logits: u32,
}

/// The forward pass of a batched server: shared activations for the row budget, a K/V cache
/// per sequence.
pub struct BatchForward {
    pub(super) fwd: Forward,
    ops: SeqOps,
    /// Rows run by every step so far (replays included).
    rows_run: u64,
}

impl BatchForward {
    /// `p.n_seq` sequences of `p.n_ctx` rows, steps of at most [`max_rows`]`(p)` rows; every
    /// buffer from the plan ([`crate::memory::batch`]) through `alloc`.
    pub fn new(
        ctx: &GpuContext,
        hp: Hparams,
        weights: ModelWeights,
        p: &RunParams,
        alloc: &mut Allocator<'_>,
    ) -> Result<BatchForward> {
        let n_seq = p.n_seq.max(1);
        let spec = ForwardSpec {
            drafter: false,
            max_rows: max_rows(p),
            max_logit_rows: crate::memory::batch::logit_rows(p),
            kv_rows: p.n_ctx,
            type_k: p.type_k,
            type_v: p.type_v,
            mask: MaskMode::Causal,
            fused_only: true,
            argmax: true,
            rope_in_qkv: true,
        };
        let mut fwd = Forward::with_spec(ctx, hp, weights, &spec, alloc)?;
        let head_in = alloc.storage("act.head_in")?;
        fwd.head_in = Some(head_in.clone());
        fwd.kv = KvCache::new(p.n_ctx, n_seq as usize);
        let mut seqs = Vec::with_capacity(n_seq as usize);
        let partials = planned_partials(alloc)?;
        for s in 0..n_seq as usize {
            let p = partials.as_ref();
            seqs.push(seq_ops(ctx, &fwd, &spec, s, &head_in, p, alloc)?);
        }
        fwd.seq_caches = seqs.iter().map(|q| q.caches.clone()).collect();
        let ops = SeqOps {
            seqs,
            active: Vec::new(),
            tapping: Vec::new(),
            gathering: Vec::new(),
            alone: false,
        };
        Ok(BatchForward {
            fwd,
            ops,
            rows_run: 0,
        })
    }

    pub fn hp(&self) -> &Hparams {
        &self.fwd.hp
    }

    /// The target's weights on the device (one copy, whatever the sequences).
    pub fn weights(&self) -> &ModelWeights {
        &self.fwd.weights
    }

    /// Each sequence's cache bookkeeping (lengths, capacity).
    pub fn kv(&self) -> &KvCache {
        &self.fwd.kv
    }

    /// Whether the sliding layers keep ring caches (Gemma 3).
    pub fn ring(&self) -> bool {
        self.fwd.ring()
    }

    /// Whether the model carries a recurrent state per sequence.
    pub fn is_recurrent(&self) -> bool {
        self.fwd.is_recurrent()
    }

    /// Whether sequence `seq` can be cut back to `pos` and continued (Gemma 3's ring caches: at
    /// most a step's rows, or all of them; a recurrent state: back to its checkpoint or to 0;
    /// any `pos` up to its length otherwise).
    pub fn can_truncate(&self, seq: usize, pos: u32) -> bool {
        let Ok(len) = self.fwd.kv.len(seq) else {
            return false;
        };
        if self.fwd.ring() && !crate::model::gemma3::ring_can_truncate(len, pos, self.max_rows()) {
            return false;
        }
        match self.ops.seqs.get(seq) {
            Some(q) if self.is_recurrent() => pos <= len && q.log.can_truncate(len, pos),
            _ => pos <= len,
        }
    }

    /// Keeps sequence `seq`'s first `pos` rows: its K/V rows, and its recurrent state (the
    /// rows kept after its checkpoint run again with its next step). An error names the rows
    /// when that is not possible ([`BatchForward::can_truncate`]).
    pub fn truncate(&mut self, seq: usize, pos: u32) -> Result<()> {
        let len = self.fwd.kv.len(seq)?;
        if pos > len {
            return Ok(self.fwd.kv.truncate_to(seq, pos)?);
        }
        let max = self.max_rows();
        if self.fwd.ring() && !crate::model::gemma3::ring_can_truncate(len, pos, max) {
            return Err(Error::Usage(format!(
                "sequence {seq}'s ring caches cannot go back from row {len} to row {pos} (at \
                 most {max} rows, or to 0)"
            )));
        }
        if self.is_recurrent() {
            self.seq_mut(seq)?.log.truncate(len, pos)?;
        }
        self.fwd.kv.truncate_to(seq, pos)?;
        Ok(())
    }

    /// Empties sequence `seq` (a new request from scratch).
    pub fn reset(&mut self, seq: usize) -> Result<()> {
        self.truncate(seq, 0)
    }

    /// Sequence `seq`'s next step checkpoints its recurrent state at the current length, so a
    /// later [`BatchForward::truncate`] can go back to any row from here. Nothing for a dense
    /// model.
    pub fn checkpoint(&mut self, seq: usize) -> Result<()> {
        if self.is_recurrent() {
            let len = self.fwd.kv.len(seq)?;
            self.seq_mut(seq)?.log.checkpoint(len);
        }
        Ok(())
    }

    /// Rows every step has run so far, replays included (what prefix reuse saves).
    pub fn rows_run(&self) -> u64 {
        self.rows_run
    }

    /// Rows sequence `seq`'s next step runs again before its own (a rollback's replay).
    pub fn replay_rows(&self, seq: usize) -> usize {
        self.ops.seqs.get(seq).map_or(0, |q| q.log.replay.len())
    }

    /// Rows of a sequence's cache.
    pub fn capacity(&self) -> u32 {
        self.fwd.kv.capacity()
    }

    /// Rows one step takes at most.
    pub fn max_rows(&self) -> u32 {
        self.fwd.max_rows()
    }

    pub fn n_seq(&self) -> usize {
        self.ops.seqs.len()
    }

    /// Builds the matmuls of steps of these (rows, logit rows) shapes now (see
    /// [`Forward::warm`]).
    pub fn warm(&mut self, ctx: &GpuContext, shapes: &[(u32, u32)]) -> Result<()> {
        self.fwd.warm(ctx, shapes)
    }

    /// Runs `segs` (each at its sequence's next positions) as one step; afterwards
    /// [`BatchForward::argmax`] and [`BatchForward::logits`] hold one row per segment with
    /// `logits`, in order. A sequence's pending replay runs in front of its rows, in the same
    /// step when the rows fit ([`BatchForward::max_rows`]), else in steps of its own first.
    pub fn step(&mut self, ctx: &GpuContext, segs: &[Segment<'_>]) -> Result<()> {
        let n_seq = self.n_seq();
        let mut seen = vec![false; n_seq];
        let (mut new, mut replay) = (0usize, 0usize);
        for seg in segs {
            match seen.get_mut(seg.seq) {
                Some(s) if !*s => *s = true,
                _ => {
                    return Err(Error::Usage(format!(
                        "batch segment for sequence {} (of {n_seq}) is out of range or repeated",
                        seg.seq
                    )))
                }
            }
            if seg.tokens.is_empty() {
                return Err(Error::EmptyStep {
                    what: format!("the batch segment for sequence {} has no tokens", seg.seq),
                });
            }
            if seg.n_logits as usize > seg.tokens.len() {
                return Err(Error::Usage(format!(
                    "batch segment for sequence {}: {} logits rows of {} rows",
                    seg.seq,
                    seg.n_logits,
                    seg.tokens.len()
                )));
            }
            new += seg.tokens.len();
            replay += self.replay_rows(seg.seq);
        }
        if new == 0 {
            return Err(Error::EmptyStep {
                what: "a batched step of no segments".into(),
            });
        }
        let max = self.max_rows() as usize;
        if new > max {
            return Err(Error::Usage(format!(
                "a batched step of {new} rows (1..={max} rows)"
            )));
        }
        if new + replay > max {
            self.flush_replays(ctx, segs.iter().map(|s| s.seq).collect())?;
        }
        let runs: Vec<Run<'_>> = segs
            .iter()
            .map(|seg| Run {
                seq: seg.seq,
                r: self.replay_rows(seg.seq),
                new: seg.tokens,
                n_logits: seg.n_logits,
            })
            .collect();
        self.run(ctx, &runs)
    }

    /// Runs the pending replays of `seqs` as steps of their own (no logits, no taps), as many
    /// rows per step as fit.
    fn flush_replays(&mut self, ctx: &GpuContext, seqs: Vec<usize>) -> Result<()> {
        loop {
            let mut budget = self.max_rows() as usize;
            let mut runs = Vec::new();
            for &seq in &seqs {
                let r = self.replay_rows(seq).min(budget);
                if r > 0 {
                    budget -= r;
                    runs.push(Run {
                        seq,
                        r,
                        new: &[],
                        n_logits: 0,
                    });
                }
            }
            if runs.is_empty() {
                return Ok(());
            }
            self.run(ctx, &runs)?;
        }
    }

    /// One submit of `runs` (checked by the caller: at most [`BatchForward::max_rows`] rows,
    /// each sequence once).
    fn run(&mut self, ctx: &GpuContext, runs: &[Run<'_>]) -> Result<()> {
        // One set of error scopes for the step's uploads, recording and submit.
        let placed = ctx.step_scope("batched forward", || {
            let (m, n_logits, placed) = self.setup(ctx, runs)?;
            let (list, _) = self.fwd.record_with(m, n_logits, false, Some(&self.ops))?;
            submit(ctx, "batched forward", &list)?;
            Ok(placed)
        })?;
        let m: u32 = runs.iter().map(|r| (r.r + r.new.len()) as u32).sum();
        self.rows_run += u64::from(m);
        for (run, &(_, start)) in runs.iter().zip(&placed) {
            self.fwd.kv.commit(run.seq, run.new.len() as u32)?;
            if let Some(q) = self.ops.seqs.get_mut(run.seq) {
                q.log.commit(start, run.r, run.new);
            }
        }
        Ok(())
    }

    /// Sets every op and uploads the tokens and positions for `runs`: (rows, logits rows, and
    /// per run its first row and first position).
    #[allow(clippy::type_complexity)]
    fn setup(&mut self, ctx: &GpuContext, runs: &[Run<'_>]) -> Result<(u32, u32, Vec<(u32, u32)>)> {
        let (mut tokens, mut positions) = (Vec::new(), Vec::new());
        // (row0, position of the first row)
        let mut placed = Vec::with_capacity(runs.len());
        for run in runs {
            let q = self.ops.seqs.get(run.seq);
            let replay = q.map_or(&[][..], |q| &q.log.replay[..]);
            let len = self.fwd.kv.len(run.seq)?;
            // The replay's rows sit just below the length; new rows must fit after it.
            self.fwd.kv.positions(run.seq, run.new.len() as u32)?;
            let start = len - replay.len() as u32;
            let row0 = tokens.len() as u32;
            tokens.extend_from_slice(&replay[..run.r]);
            tokens.extend_from_slice(run.new);
            let m_s = (run.r + run.new.len()) as u32;
            positions.extend(start..start + m_s);
            placed.push((row0, start));
        }
        let m = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        let n_logits: u32 = runs.iter().map(|r| r.n_logits).sum();
        // One sequence's rows: its caches through the one-sequence route.
        let route = match runs {
            [one] => Route::Seq(one.seq),
            _ => Route::Shared,
        };
        self.ops.alone = route != Route::Shared;
        self.fwd.resize(ctx, m, n_logits, route)?;
        let d = self.fwd.hp.n_embd;
        let (mut active, mut tapping, mut gathering) = (Vec::new(), Vec::new(), Vec::new());
        let mut n_gathered = 0u32;
        for (run, &(row0, start)) in runs.iter().zip(&placed) {
            let Some(q) = self.ops.seqs.get_mut(run.seq) else {
                continue;
            };
            let rows = SeqRows {
                row0,
                start,
                replay: run.r as u32,
                new: run.new.len() as u32,
                n_logits: run.n_logits,
                gather_row: n_gathered,
            };
            q.set_step(ctx, &rows, d, route != Route::Shared)?;
            if run.n_logits > 0 {
                n_gathered += run.n_logits;
                gathering.push(run.seq);
            }
            if !run.new.is_empty() {
                tapping.push(run.seq);
            }
            active.push(run.seq);
        }
        self.ops.active = active;
        self.ops.tapping = tapping;
        self.ops.gathering = gathering;
        let b = &self.fwd.buffers;
        crate::gpu::buffers::upload(ctx, "tokens", &b.tokens, 0, bytemuck::cast_slice(&tokens))?;
        let pos = bytemuck::cast_slice(&positions);
        crate::gpu::buffers::upload(ctx, "positions", &b.positions, 0, pos)?;
        Ok((m, n_logits, placed))
    }

    /// Marks `rows` more rows of sequence `seq` as cached without running them (their K/V and
    /// state are whatever the buffers hold): only for timing a step's dispatches at a depth
    /// (`flint bench --profile -npl`), never for generating.
    pub fn assume_rows(&mut self, seq: usize, rows: u32) -> Result<()> {
        self.fwd.kv.commit(seq, rows)?;
        Ok(())
    }

    /// Sets `segs` up as [`BatchForward::step`] would and lists the step's dispatches, without
    /// submitting or committing anything (`flint bench --profile -npl`). No sequence may have a
    /// replay pending.
    pub fn record_step(
        &mut self,
        ctx: &GpuContext,
        segs: &[Segment<'_>],
    ) -> Result<Vec<&Dispatch>> {
        let runs: Vec<Run<'_>> = segs
            .iter()
            .map(|seg| Run {
                seq: seg.seq,
                r: 0,
                new: seg.tokens,
                n_logits: seg.n_logits,
            })
            .collect();
        if segs.iter().any(|s| self.replay_rows(s.seq) > 0) {
            return Err(Error::Usage("a profiled step with a replay pending".into()));
        }
        let (m, n_logits, _) = self.setup(ctx, &runs)?;
        Ok(self.fwd.record_with(m, n_logits, false, Some(&self.ops))?.0)
    }

    /// Capture, from the next step on, the residual stream entering each of `layers` for
    /// sequence `seq`'s rows into its drafter's `staging` `[rows, layers.len() × d]` (the DSpark
    /// fusion order, as [`Forward::set_taps`]), from staging row [`BatchForward::set_tap_row`].
    pub fn set_taps(
        &mut self,
        ctx: &GpuContext,
        seq: usize,
        layers: &[u32],
        staging: &wgpu::Buffer,
    ) -> Result<()> {
        let d = self.fwd.hp.n_embd;
        let width = d * layers.len() as u32;
        let max_rows = self.fwd.max_rows();
        let mut taps = Vec::with_capacity(layers.len());
        for (k, &layer) in layers.iter().enumerate() {
            if layer > self.fwd.hp.n_layer {
                return Err(Error::Usage(format!(
                    "tap layer {layer}: the model has {} layers",
                    self.fwd.hp.n_layer
                )));
            }
            let x = &self.fwd.buffers.x;
            taps.push((
                layer,
                super::tap_copy(ctx, x, staging, d, k, width, max_rows)?,
            ));
        }
        let q = self.seq_mut(seq)?;
        q.taps = taps;
        q.tap_row = 0;
        Ok(())
    }

    /// Sequence `seq`'s next step captures its taps from staging row `row` on.
    pub fn set_tap_row(&mut self, seq: usize, row: u32) -> Result<()> {
        self.seq_mut(seq)?.tap_row = row;
        Ok(())
    }

    /// Rows sequence `seq`'s tap staging holds (`u32::MAX` without taps).
    pub fn tap_capacity(&self, seq: usize) -> u32 {
        let d = u64::from(self.fwd.hp.n_embd);
        match self
            .ops
            .seqs
            .get(seq)
            .and_then(|q| q.taps.first().map(|t| (q, t)))
        {
            Some((q, (_, copy))) => {
                let width = d * q.taps.len() as u64;
                u32::try_from(copy.dst_len() / width.max(1)).unwrap_or(u32::MAX)
            }
            None => u32::MAX,
        }
    }

    fn seq_mut(&mut self, seq: usize) -> Result<&mut Seq> {
        let n = self.ops.seqs.len();
        self.ops
            .seqs
            .get_mut(seq)
            .ok_or_else(|| Error::Usage(format!("sequence {seq} of {n}")))
    }

    /// Argmax of each logits row of the last step (one per segment that asked, in order).
    pub fn argmax(&self, ctx: &GpuContext) -> Result<Vec<u32>> {
        self.fwd.argmax(ctx)
    }

    /// Masks the next step's logits rows (`Forward::set_mask`; rows in segment order).
    pub fn set_mask(&mut self, ctx: &GpuContext, rows: &[u32]) -> Result<()> {
        self.fwd.set_mask(ctx, rows)
    }

    /// Drops the mask after the step that used it.
    pub fn clear_mask(&mut self) {
        self.fwd.clear_mask()
    }

    /// Words of one mask row.
    pub fn mask_words(&self) -> usize {
        self.fwd.mask_words()
    }

    /// Logits `[rows, V]` of the last step.
    pub fn logits(&self, ctx: &GpuContext) -> Result<Vec<f32>> {
        self.fwd.logits(ctx)
    }

    /// The logits buffer (`[max_logit_rows, V]`; the last step's rows first), for ops that
    /// read it on the device (log-probabilities).
    pub fn logits_buffer(&self) -> &wgpu::Buffer {
        &self.fwd.buffers.logits
    }

    /// Most logits rows one step computes (every slot's verify rows).
    pub fn max_logit_rows(&self) -> u32 {
        self.fwd.max_logit_rows()
    }

    /// Logits rows of the last step.
    pub fn n_logits(&self) -> u32 {
        self.fwd.n_logits
    }
}
