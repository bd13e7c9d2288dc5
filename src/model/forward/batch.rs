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
//! Dense models only: a hybrid's recurrent state is per sequence and not batched yet.

use crate::gguf::GgmlType;
use crate::gpu::GpuContext;
use crate::kernels::attention::RopeKvIo;
use crate::kernels::attention::{KvLayout, KvStore, KvType, MaskMode, RopeKv};
use crate::kernels::launch::{submit, Dispatch};
use crate::kernels::ops::copy::{CopyParams, CopyRows};
use crate::kv_cache::KvCache;
use crate::memory::alloc::Allocator;
use crate::memory::batch::{max_rows, slot_name};
use crate::memory::RunParams;
use crate::model::hparams::Hparams;
use crate::model::weights::ModelWeights;
use crate::{Error, Result};

use super::attn_build::{attn_io, AttnEnv};
use super::batch_attn::{planned_partials, SeqAttention};
use super::build::{rope_config, ForwardSpec};
use super::gemma3::{layer_attention, layer_layouts, sliding_rope};
use super::layer::AttnOps;
use super::rope_store::RopeStore;
use super::Forward;

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

/// RoPE and the KV store of one sequence's rows: one fused dispatch (f16 caches), or the two
/// stores after the layer's shared RoPE over every row (quantized caches).
#[derive(Debug)]
enum SeqStore {
    Fused(RopeKv),
    Split([KvStore; 2]),
}

/// One attention layer's calls for one sequence.
#[derive(Debug)]
struct SeqAttn {
    store: SeqStore,
    attn: SeqAttention,
}

/// One sequence's calls, by attention layer, the copy of its logits rows and its DSpark taps.
#[derive(Debug)]
struct Seq {
    layers: Vec<SeqAttn>,
    gather: CopyRows,
    /// (layer whose input is captured, the copy of this sequence's rows into its drafter's
    /// staging `[rows, taps × d]`), as [`Forward::set_taps`].
    taps: Vec<(u32, CopyRows)>,
    /// Staging row the next step's first row of this sequence goes to.
    tap_row: u32,
}

/// The per-sequence calls of a batched step, as the forward pass records them.
#[derive(Debug)]
pub struct SeqOps {
    seqs: Vec<Seq>,
    /// The current step's sequences, in row order.
    active: Vec<usize>,
    /// Those whose last row has logits, in logits-row order.
    gathering: Vec<usize>,
}

impl SeqOps {
    /// What replaces attention layer `a`'s own RoPE, store and attention in the current step.
    pub(crate) fn layer_calls<'a>(&'a self, a: &'a AttnOps) -> Vec<&'a Dispatch> {
        let mut out = Vec::new();
        if let RopeStore::Split(ops) = &a.rope_store {
            out.push(&ops.rope_q.dispatch);
            out.push(&ops.rope_k.dispatch);
        }
        for &s in &self.active {
            let Some(sa) = self.seqs.get(s).and_then(|q| q.layers.get(a.kv)) else {
                continue;
            };
            match &sa.store {
                SeqStore::Fused(op) => out.push(&op.dispatch),
                SeqStore::Split([k, v]) => out.extend([&k.dispatch, &v.dispatch]),
            }
            out.extend(sa.attn.dispatches());
        }
        out
    }

    /// The current step's tap copies of `layer`'s input, every active sequence's.
    pub(crate) fn taps_at(&self, layer: u32) -> impl Iterator<Item = &Dispatch> {
        self.active
            .iter()
            .filter_map(|&s| self.seqs.get(s))
            .flat_map(move |q| q.taps.iter().filter(move |t| t.0 == layer))
            .map(|t| &t.1.dispatch)
    }

    /// The copies of the current step's logits rows into `act.head_in`.
    pub(crate) fn gathers(&self) -> impl Iterator<Item = &Dispatch> {
        self.gathering
            .iter()
            .filter_map(|&s| self.seqs.get(s).map(|q| &q.gather.dispatch))
    }
}

/// The forward pass of a batched server: shared activations for the row budget, a K/V cache
/// per sequence.
pub struct BatchForward {
    pub(super) fwd: Forward,
    ops: SeqOps,
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
        if hp.hybrid.is_some() {
            return Err(Error::Usage(
                "batched steps of hybrid (recurrent) models are not supported yet".into(),
            ));
        }
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
            rope_in_qkv: false,
        };
        let mut fwd = Forward::with_spec(ctx, hp, weights, &spec, alloc)?;
        let head_in = alloc.storage("act.head_in")?;
        fwd.head_in = Some(head_in.clone());
        fwd.kv = KvCache::new(p.n_ctx, n_seq as usize);
        let mut seqs = Vec::with_capacity(n_seq as usize);
        let partials = planned_partials(alloc)?;
        for s in 0..n_seq as usize {
            seqs.push(seq_ops(
                ctx,
                &fwd,
                &spec,
                s,
                &head_in,
                partials.as_ref(),
                alloc,
            )?);
        }
        let ops = SeqOps {
            seqs,
            active: Vec::new(),
            gathering: Vec::new(),
        };
        Ok(BatchForward { fwd, ops })
    }

    pub fn hp(&self) -> &Hparams {
        &self.fwd.hp
    }

    /// The target's weights on the device (one copy, whatever the sequences).
    pub fn weights(&self) -> &ModelWeights {
        &self.fwd.weights
    }

    /// Each sequence's cache bookkeeping (lengths, truncation for a reused prefix).
    pub fn kv(&mut self) -> &mut KvCache {
        &mut self.fwd.kv
    }

    /// Whether sequence `seq`'s cache can be cut back to `pos` and continued (Gemma 3's ring
    /// caches: at most a step's rows, or all of them; any `pos` up to its length otherwise).
    pub fn can_truncate(&self, seq: usize, pos: u32) -> bool {
        let Ok(len) = self.fwd.kv.len(seq) else {
            return false;
        };
        if self.fwd.ring() {
            return crate::model::gemma3::ring_can_truncate(len, pos, self.fwd.max_rows());
        }
        pos <= len
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
    /// `logits`, in order.
    pub fn step(&mut self, ctx: &GpuContext, segs: &[Segment<'_>]) -> Result<()> {
        let n_seq = self.n_seq();
        let mut seen = vec![false; n_seq];
        let (mut tokens, mut positions) = (Vec::new(), Vec::new());
        // (seq, row0, rows, end of its visible keys)
        let mut placed = Vec::with_capacity(segs.len());
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
            let m_s = u32::try_from(seg.tokens.len()).unwrap_or(u32::MAX);
            if m_s == 0 {
                return Err(Error::EmptyStep {
                    what: format!("the batch segment for sequence {} has no tokens", seg.seq),
                });
            }
            let range = self.fwd.kv.positions(seg.seq, m_s)?;
            let row0 = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
            tokens.extend_from_slice(seg.tokens);
            placed.push((seg.seq, row0, m_s, range.end));
            positions.extend(range);
        }
        let m = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        let mut n_logits = 0u32;
        for seg in segs {
            if seg.n_logits as usize > seg.tokens.len() {
                return Err(Error::Usage(format!(
                    "batch segment for sequence {}: {} logits rows of {} rows",
                    seg.seq,
                    seg.n_logits,
                    seg.tokens.len()
                )));
            }
            n_logits += seg.n_logits;
        }
        if m == 0 {
            return Err(Error::EmptyStep {
                what: "a batched step of no segments".into(),
            });
        }
        if m > self.fwd.max_rows() {
            return Err(Error::Usage(format!(
                "a batched step of {m} rows (1..={} rows)",
                self.fwd.max_rows()
            )));
        }
        self.fwd.resize(ctx, m, n_logits)?;
        let d = self.fwd.hp.n_embd;
        let (mut active, mut gathering) = (Vec::new(), Vec::new());
        let mut n_gathered = 0u32;
        for (seg, &(seq, row0, m_s, end)) in segs.iter().zip(&placed) {
            let Some(q) = self.ops.seqs.get_mut(seq) else {
                continue;
            };
            for sa in &mut q.layers {
                match &mut sa.store {
                    SeqStore::Fused(op) => op.set_tokens_at(ctx, m_s, row0)?,
                    SeqStore::Split([k, v]) => {
                        k.set_n_tokens_at(ctx, m_s, row0)?;
                        v.set_n_tokens_at(ctx, m_s, row0)?;
                    }
                }
                sa.attn.set_step_at(ctx, m_s, end, row0)?;
            }
            if seg.n_logits > 0 {
                let first = row0 + m_s - seg.n_logits;
                q.gather
                    .set_rows_at(ctx, seg.n_logits, first * d, n_gathered * d)?;
                n_gathered += seg.n_logits;
                gathering.push(seq);
            }
            place_taps(ctx, q, d, m_s, row0)?;
            active.push(seq);
        }
        self.ops.active = active;
        self.ops.gathering = gathering;
        let b = &self.fwd.buffers;
        crate::gpu::buffers::upload(ctx, "tokens", &b.tokens, 0, bytemuck::cast_slice(&tokens))?;
        let pos = bytemuck::cast_slice(&positions);
        crate::gpu::buffers::upload(ctx, "positions", &b.positions, 0, pos)?;
        let (list, _) = self.fwd.record_with(m, n_logits, false, Some(&self.ops))?;
        submit(ctx, "batched forward", &list)?;
        drop(list);
        for &(seq, _, m_s, _) in &placed {
            self.fwd.kv.commit(seq, m_s)?;
        }
        Ok(())
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
}

/// Points sequence `q`'s tap copies at its `m` rows from `row0`, into its staging from its tap
/// row.
fn place_taps(ctx: &GpuContext, q: &mut Seq, d: u32, m: u32, row0: u32) -> Result<()> {
    let width = d * q.taps.len() as u32;
    for (k, (_, copy)) in q.taps.iter_mut().enumerate() {
        let dst = q.tap_row * width + k as u32 * d;
        copy.set_rows_at(ctx, m, row0 * d, dst)?;
    }
    Ok(())
}

fn kv_layout(ty: GgmlType, spec: &ForwardSpec, heads: u32, dim: u32) -> Result<KvLayout> {
    Ok(KvLayout::new(
        KvType::from_ggml(ty)?,
        spec.kv_rows,
        heads,
        dim,
    )?)
}

/// Sequence `s`'s calls: its caches (slot 0: the forward's own; others from the plan as
/// `slot{s}.kv.*`), per attention layer its store and attention over them, and its gather.
fn seq_ops(
    ctx: &GpuContext,
    fwd: &Forward,
    spec: &ForwardSpec,
    s: usize,
    head_in: &wgpu::Buffer,
    partials: Option<&wgpu::Buffer>,
    alloc: &mut Allocator<'_>,
) -> Result<Seq> {
    let hp = &fwd.hp;
    let b = &fwd.buffers;
    let k_layout = kv_layout(spec.type_k, spec, hp.n_head_kv, hp.head_dim)?;
    let v_layout = kv_layout(spec.type_v, spec, hp.n_head_kv, hp.head_dim_v)?;
    let rope_cfg = rope_config(hp);
    let mut layers = Vec::new();
    for (i, il) in hp.kv_layers().into_iter().enumerate() {
        // Gemma 3's sliding layers: their own RoPE table, the window mask.
        let (freqs, cfg) = match (&fwd.gemma3, sliding_rope(hp, il)) {
            (Some(g), true) => (&g.swa_freqs, &g.swa_cfg),
            _ => (&fwd.rope_freqs, &rope_cfg),
        };
        let (mask, scale) = layer_attention(hp, il, spec.mask);
        let [k_layout, v_layout] = layer_layouts(hp, il, spec, [k_layout, v_layout])?;
        let env = AttnEnv {
            spec,
            freqs,
            rope_cfg: cfg,
            layouts: [&k_layout, &v_layout],
            split_decode: false,
            mask,
            scale,
        };
        let [kc, vc] = if s == 0 {
            b.kv.get(i)
                .cloned()
                .ok_or_else(|| Error::Usage(format!("layer {il}: no KV cache in the plan")))?
        } else {
            [
                alloc.storage(&slot_name(s, &format!("kv.k.{il}")))?,
                alloc.storage(&slot_name(s, &format!("kv.v.{il}")))?,
            ]
        };
        let (shape, io) = attn_io(hp, b, [&kc, &vc], &env);
        let attn = SeqAttention::new(ctx, shape, io, &b.attn_state, partials)?;
        let store = if RopeKv::supports(&k_layout, &v_layout) {
            let io = RopeKvIo {
                q: &b.q,
                k: &b.k,
                v: &b.v,
                positions: &b.positions,
                freqs,
                k_cache: &kc,
                v_cache: &vc,
            };
            let layouts = [&k_layout, &v_layout];
            let op = RopeKv::new(ctx, io, hp.n_head, layouts, cfg, spec.max_rows)?;
            SeqStore::Fused(op)
        } else {
            SeqStore::Split([
                KvStore::new(ctx, k_layout, &kc, &b.k, &b.positions, spec.max_rows)?,
                KvStore::new(ctx, v_layout, &vc, &b.v, &b.positions, spec.max_rows)?,
            ])
        };
        layers.push(SeqAttn { store, attn });
    }
    let d = hp.n_embd;
    let params = CopyParams {
        n_rows: spec.max_logit_rows,
        n_cols: d,
        src_stride: d,
        dst_stride: d,
        src_off: 0,
        dst_off: 0,
        _pad: [0; 2],
    };
    let gather = CopyRows::new(ctx, &b.xn, head_in, params)?;
    Ok(Seq {
        layers,
        gather,
        taps: Vec::new(),
        tap_row: 0,
    })
}
