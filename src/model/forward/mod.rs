//! The GPU forward pass of `llama`, `qwen2` and `qwen3`: one compute pass and one submit per
//! step, whether the step is a prefill ubatch, a single decode token or a verify batch.
//!
//! Per layer (x `[m, d]` is the residual stream, `m` the rows of this step):
//! ```text
//! xn = rms_norm(x) * attn_norm            q,k,v = xn · Wq,Wk,Wv (+ qwen2 biases)
//! q,k = rms_norm per head (qwen3)         q,k = rope(q,k, positions)
//! cache[positions] = k, v                 attn = attention(q, cache[0..kv_len], causal)
//! xn = attn · Wo;  x += xn                xn = rms_norm(x) * ffn_norm
//! glu = silu(xn · Wgate) * (xn · Wup)     xn = glu · Wdown;  x += xn
//! ```
//! then `xn = rms_norm(x) * output_norm`, logits `[n_out, V]` = the last `n_out` rows of xn ·
//! LM head, and the argmax of each logits row. Every buffer is created from the memory plan.
//! Each `x += xn` runs inside the norm that follows it (`RmsNorm::add_then_norm`: one dispatch,
//! the same bits), the last one inside the output norm. On CPU drivers the GLU runs inside the
//! up projection, and the q, k, v projections (stacked weight) and the gate and up projections
//! (paired weight) are one dispatch each (`projections`); with f16 caches RoPE and the KV store
//! are one dispatch, or none where the stacked q | k | v matmul does them in its epilogue
//! (`rope_store`; the same bits again).
//! Ops are built once for the plan's largest batch and resized per step; matmul dispatches
//! depend on the row count, so they are built per (rows, logit rows) and cached.

mod attn_build;
pub mod batch;
pub mod batch_attn;
mod batch_seq;
mod batch_state;
mod build;
mod gemma3;
mod hidden;
mod layer;
mod mask;
mod projections;
mod recurrent;
mod rope_store;
mod seq_steps;

use std::collections::HashMap;

use crate::gpu::buffers::{read_back, upload};
use crate::gpu::GpuContext;
use crate::kernels::launch::{submit_with, Dispatch};
use crate::kernels::matmul::{embed_dispatches, matmul_dispatches, Family, GpuWeight, MatmulIo};
use crate::kernels::ops::copy::{CopyParams, CopyRows};
use crate::kernels::ops::moe::{MoeBlock, MoeScratch};
use crate::kernels::ops::norm::RmsNorm;
use crate::kernels::ops::select::Select;
use crate::kv_cache::KvCache;
pub use crate::memory::alloc::Allocator;
use crate::{Error, Result};

pub use build::{rope_config, rope_yarn, Buffers, ForwardSpec};
use projections::{gate_up_dispatches, qkv_dispatches};
pub use seq_steps::{BatchSeq, SeqSteps};

use super::hparams::Hparams;
use super::weights::{GateUp, Mixer, ModelWeights};
use layer::{LayerOps, MixerOps};

/// Matmul dispatch sets kept at most (one per (rows, logit rows, route) shape).
const MATMUL_CACHE: usize = 32;

/// Where a step's projections and LM head put their rows besides the shared activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Route {
    /// A lone forward pass: the q | k | v matmul's epilogue (where the layer has it) stores
    /// into the forward's own caches; the LM head reads the last rows of `act.xn`.
    Own,
    /// A batched step of several sequences: each sequence's own RoPE + store and attention
    /// calls, the logits rows gathered into `act.head_in`.
    Shared,
    /// A batched step of one sequence's rows: as `Own`, over that sequence's caches (the
    /// same bits as `Shared`, one dispatch less per layer and no gather).
    Seq(usize),
}

/// The copy of tap `k` (of `width / d`) of up to `rows` rows of the residual stream `x`
/// `[rows, d]` into a drafter's `staging` `[rows, width]`, at columns `k·d..(k+1)·d`.
fn tap_copy(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    staging: &wgpu::Buffer,
    d: u32,
    k: usize,
    width: u32,
    rows: u32,
) -> Result<CopyRows> {
    let params = CopyParams {
        n_rows: rows,
        n_cols: d,
        src_stride: d,
        dst_stride: width,
        src_off: 0,
        dst_off: k as u32 * d,
        _pad: [0; 2],
    };
    Ok(CopyRows::new(ctx, x, staging, params)?)
}

/// Dispatches that depend on the row count: matmuls and the embedding gather, for one (rows,
/// logit rows) shape.
#[derive(Debug)]
struct MatmulSet {
    embed: Vec<Dispatch>,
    /// Per layer: q, k, v, o, gate, up, down (a DeltaNet: qkv, z, beta + alpha, out, gate, up,
    /// down).
    layers: Vec<[Vec<Dispatch>; 7]>,
    /// Per layer, a MoE layer's block (its gate, up and down entries are empty).
    moe: Vec<Option<MoeBlock>>,
    lm_head: Vec<Dispatch>,
}

/// The forward pass of one model with its KV cache.
pub struct Forward {
    pub hp: Hparams,
    pub weights: ModelWeights,
    pub buffers: Buffers,
    pub kv: KvCache,
    layers: Vec<LayerOps>,
    final_norm: RmsNorm,
    /// The on-device argmax of the logits rows and its output ids.
    argmax: Option<(Select, wgpu::Buffer)>,
    matmuls: HashMap<(u32, u32, Route), MatmulSet>,
    /// The route of the current step's matmul set.
    route: Route,
    /// A batched forward's caches, per sequence per attention layer (`Route::Seq`); empty for a
    /// lone forward pass.
    seq_caches: Vec<Vec<[wgpu::Buffer; 2]>>,
    family: Family,
    max_rows: u32,
    max_logit_rows: u32,
    rows: u32,
    /// Logit rows of the last step.
    pub n_logits: u32,
    /// Rows the argmax is sized for now.
    argmax_rows: u32,
    /// DSpark taps: (layer whose input is captured, the copy into the tap staging buffer).
    taps: Vec<(u32, CopyRows)>,
    /// Staging row the next step's first row is captured at, and the (rows, row) the tap
    /// copies are set for.
    tap_row: u32,
    taps_set: (u32, u32),
    /// The RoPE table `[n_rot / 2 + 1]`: frequencies (YaRN folded in), then the cos/sin scale
    /// (`kernels::ops::rope::rope_table`; shared with a drafter's injection pass).
    pub rope_freqs: wgpu::Buffer,
    /// Where the LM head reads its rows: the last `n_logits` rows of `act.xn` (`None`), or a
    /// batch's gathered rows (`act.head_in`, from row 0).
    head_in: Option<wgpu::Buffer>,
    /// The MoE blocks' scratch (router logits, ids, weights, expert activations), sized for
    /// `max_rows`; `None` for a dense model.
    moe_scratch: Option<MoeScratch>,
    /// Gemma 3's embedding scale, logit soft-cap and sliding layers' RoPE.
    gemma3: Option<gemma3::Gemma3Ops>,
    /// A grammar's mask over the logits rows (built on first use, `mask.rs`) and whether the
    /// next step applies it.
    grammar_mask: Option<crate::kernels::ops::mask::MaskLogits>,
    mask_on: bool,
}

impl Forward {
    /// Capture, from the next step on, the residual stream entering each of `layers` (`n_layer`
    /// = the output of the last layer, before the final norm) for every processed row into
    /// `staging` `[max_rows, layers.len() × d]`: row r, tap k at columns `k·d..(k+1)·d` (the
    /// DSpark fusion order). Costs one small copy dispatch per tap inside the step's pass; an
    /// empty list (the default) costs nothing.
    pub fn set_taps(
        &mut self,
        ctx: &GpuContext,
        layers: &[u32],
        staging: &wgpu::Buffer,
    ) -> Result<()> {
        let d = self.hp.n_embd;
        let width = d * layers.len() as u32;
        let mut taps = Vec::with_capacity(layers.len());
        for (k, &layer) in layers.iter().enumerate() {
            if layer > self.hp.n_layer {
                return Err(Error::Usage(format!(
                    "tap layer {layer}: the model has {} layers (taps 0..={})",
                    self.hp.n_layer, self.hp.n_layer
                )));
            }
            let mut copy = tap_copy(ctx, &self.buffers.x, staging, d, k, width, self.max_rows)?;
            copy.set_rows(ctx, self.rows)?;
            taps.push((layer, copy));
        }
        self.taps = taps;
        self.tap_row = 0;
        self.taps_set = (self.rows, 0);
        Ok(())
    }

    /// Capture the next steps' rows from staging row `row` on (default 0): a scheduler that
    /// defers injection lets several steps' rows pile up in the staging buffer and injects
    /// them as one chunk. A step whose rows do not fit in the staging buffer from `row` is
    /// refused.
    pub fn set_tap_row(&mut self, row: u32) {
        self.tap_row = row;
    }

    /// Rows the tap staging holds (`u32::MAX` without taps: nothing is captured).
    pub fn tap_capacity(&self) -> u32 {
        let width = u64::from(self.hp.n_embd) * self.taps.len() as u64;
        match self.taps.first() {
            Some((_, copy)) if width > 0 => {
                u32::try_from(copy.dst_len() / width).unwrap_or(u32::MAX)
            }
            _ => u32::MAX,
        }
    }

    /// Points the tap copies at `m` rows from staging row `self.tap_row`.
    fn place_taps(&mut self, ctx: &GpuContext, m: u32) -> Result<()> {
        if self.taps_set == (m, self.tap_row) {
            return Ok(());
        }
        let d = self.hp.n_embd;
        let width = d * self.taps.len() as u32;
        let out_of_range =
            || Error::Usage(format!("tap staging row {} is out of range", self.tap_row));
        let base = self.tap_row.checked_mul(width).ok_or_else(out_of_range)?;
        // Unknown until every copy is set (a failure half-way leaves some moved).
        self.taps_set = (u32::MAX, u32::MAX);
        for (k, (_, copy)) in self.taps.iter_mut().enumerate() {
            let off = base.checked_add(k as u32 * d).ok_or_else(out_of_range)?;
            copy.set_rows_at(ctx, m, 0, off)?;
        }
        self.taps_set = (m, self.tap_row);
        Ok(())
    }

    /// Sets up the matmuls of steps of these (rows, logit rows) shapes now, so their pipelines
    /// build on the pipeline cache's threads while the caller goes on (loading, other ops)
    /// instead of at the first such step. Shapes past the limits are skipped.
    pub fn warm(&mut self, ctx: &GpuContext, shapes: &[(u32, u32)]) -> Result<()> {
        // A batched forward: the shared route and the one-sequence route (other pipelines).
        let routes: &[Route] = if self.seq_caches.is_empty() {
            &[Route::Own]
        } else {
            &[Route::Shared, Route::Seq(0)]
        };
        for &(m, n_logits) in shapes {
            if m >= 1 && m <= self.max_rows && n_logits <= m.min(self.max_logit_rows) {
                for &route in routes {
                    self.cache_matmuls(ctx, (m, n_logits, route))?;
                }
            }
        }
        Ok(())
    }

    /// The matmul set of (m, n_logits, route) steps is cached (built now if it is not).
    fn cache_matmuls(&mut self, ctx: &GpuContext, key: (u32, u32, Route)) -> Result<()> {
        if !self.matmuls.contains_key(&key) {
            // Shapes other than the hot ones (decode, full ubatches, verify) come and go with
            // prompt lengths: keep the cache small rather than grow it per shape seen.
            if self.matmuls.len() >= MATMUL_CACHE {
                self.matmuls.clear();
            }
            let set = self.matmul_set(ctx, key)?;
            self.matmuls.insert(key, set);
        }
        Ok(())
    }

    /// Whether the sliding layers' caches are rings (Gemma 3): a truncation may drop at most
    /// [`Forward::max_rows`] rows, or all of them ([`Forward::can_truncate`]).
    pub fn ring(&self) -> bool {
        self.gemma3.as_ref().is_some_and(|g| g.ring)
    }

    /// Most rows one step computes logits for (a verify batch of `n_draft + 1`).
    pub fn max_logit_rows(&self) -> u32 {
        self.max_logit_rows
    }

    /// Largest batch one step takes.
    pub fn max_rows(&self) -> u32 {
        self.max_rows
    }

    fn matmul_set(
        &self,
        ctx: &GpuContext,
        (m, n_logits, route): (u32, u32, Route),
    ) -> Result<MatmulSet> {
        let b = &self.buffers;
        // The caches a q | k | v epilogue stores into (none: each sequence's own calls do).
        let caches = match route {
            Route::Own => Some(&b.kv[..]),
            Route::Shared => None,
            Route::Seq(s) => Some(
                self.seq_caches
                    .get(s)
                    .map(|c| &c[..])
                    .ok_or_else(|| Error::Usage(format!("no caches for sequence {s}")))?,
            ),
        };
        let mm = |w: &GpuWeight, x: &wgpu::Buffer, y: &wgpu::Buffer| {
            matmul_dispatches(ctx, self.family, w, &MatmulIo::dense(w, x, y, m))
        };
        let mut layers = Vec::with_capacity(self.weights.layers.len());
        let mut moe = Vec::with_capacity(self.weights.layers.len());
        for (lw, l) in self.weights.layers.iter().zip(&self.layers) {
            let glu = (l.glu.is_none(), gemma3::ffn_glu(&self.hp));
            let [gate, up] = gate_up_dispatches(ctx, self.family, &lw.ffn, glu, b, m)?;
            // A MoE layer: xn (the normed residual) → the block → xn, as the dense FFN.
            let (down, block) = match (&lw.ffn, &self.moe_scratch) {
                (GateUp::Moe(w), Some(s)) => {
                    let block = MoeBlock::new(ctx, self.family, w, s, &b.xn, &b.xn, m)?;
                    (Vec::new(), Some(block))
                }
                (GateUp::Moe(_), None) => {
                    return Err(Error::Usage("a MoE layer without MoE scratch".into()))
                }
                _ => (mm(&lw.down, &b.glu, &b.xn)?, None),
            };
            moe.push(block);
            let [p0, p1, p2, out] = match (&lw.mixer, &l.mixer) {
                (Mixer::Attention(aw), MixerOps::Attention(a)) => {
                    let rope = caches
                        .and_then(|c| c.get(a.kv))
                        .and_then(|kv| a.rope_store.split_rope(&b.positions, &self.rope_freqs, kv));
                    let [q, k, v] = qkv_dispatches(ctx, self.family, &aw.qkv, b, m, rope)?;
                    // Gated: attention ⊙ sigmoid(gate) lands in act.q.
                    let o_in = if a.gate.is_some() { &b.q } else { &b.attn };
                    [q, k, v, mm(&aw.wo, o_in, &b.xn)?]
                }
                (Mixer::DeltaNet(dw), MixerOps::DeltaNet(_)) => {
                    let hb = b.hybrid()?;
                    let mut ab = mm(&dw.beta, &b.xn, &hb.beta)?;
                    ab.extend(mm(&dw.alpha, &b.xn, &hb.alpha)?);
                    [
                        mm(&dw.qkv, &b.xn, &hb.mixed)?,
                        mm(&dw.gate, &b.xn, &hb.z)?,
                        ab,
                        mm(&dw.out, &hb.conv, &b.xn)?,
                    ]
                }
                _ => return Err(Error::Usage("a layer's weights and ops disagree".into())),
            };
            layers.push([p0, p1, p2, out, gate, up, down]);
        }
        let head = self.weights.lm_head();
        let d = self.hp.n_embd;
        let (x, x_off) = match (&self.head_in, route) {
            (Some(h), Route::Shared) => (h, 0),
            _ => (&b.xn, (m - n_logits) * d),
        };
        let io = MatmulIo {
            x,
            x_off,
            x_stride: d,
            y: &b.logits,
            y_off: 0,
            y_stride: head.n,
            m: n_logits,
            gate: None,
            split: None,
            paired: None,
        };
        Ok(MatmulSet {
            embed: embed_dispatches(ctx, &self.weights.token_embd, &b.tokens, 0, m, &b.x, 0)?,
            layers,
            moe,
            lm_head: matmul_dispatches(ctx, self.family, head, &io)?,
        })
    }

    fn resize(&mut self, ctx: &GpuContext, m: u32, n_logits: u32, route: Route) -> Result<()> {
        if m != self.rows {
            for l in &mut self.layers {
                l.set_rows(ctx, &self.hp, m)?;
            }
            self.final_norm.set_rows(ctx, m)?;
            self.rows = m;
        }
        if let Some(g) = &mut self.gemma3 {
            g.set_rows(ctx, &self.hp, m, n_logits)?;
        }
        self.place_taps(ctx, m)?;
        if n_logits > 0 && n_logits != self.argmax_rows {
            if let Some((op, _)) = &mut self.argmax {
                op.set_rows(ctx, n_logits)?;
            }
            self.argmax_rows = n_logits;
        }
        self.n_logits = n_logits;
        self.route = route;
        self.cache_matmuls(ctx, (m, n_logits, route))
    }

    /// Run `tokens` at the next positions of the cache; compute logits (and their argmax) for
    /// the last `n_logits` rows (0: none, for prefill chunks before the last). One compute pass,
    /// one submit.
    pub fn step(&mut self, ctx: &GpuContext, tokens: &[u32], n_logits: u32) -> Result<()> {
        self.run(ctx, tokens, n_logits, false).map(|_| ())
    }

    /// [`Forward::step`], also reading back the residual stream after every layer
    /// (`l_out-{il}`, `[m, d]` each): one submit per layer, for comparing with the CPU oracle.
    pub fn step_captured(
        &mut self,
        ctx: &GpuContext,
        tokens: &[u32],
        n_logits: u32,
    ) -> Result<Vec<Vec<f32>>> {
        self.run(ctx, tokens, n_logits, true)
    }

    fn run(
        &mut self,
        ctx: &GpuContext,
        tokens: &[u32],
        n_logits: u32,
        capture: bool,
    ) -> Result<Vec<Vec<f32>>> {
        self.run_inner(ctx, tokens, n_logits, capture, true)
    }

    /// [`Forward::run`]; without `taps` the step captures no DSpark taps (a rollback's replay).
    fn run_inner(
        &mut self,
        ctx: &GpuContext,
        tokens: &[u32],
        n_logits: u32,
        capture: bool,
        taps: bool,
    ) -> Result<Vec<Vec<f32>>> {
        let m = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        let start = self.kv.positions(0, m)?.start;
        self.prepare(ctx, tokens, start, n_logits)?;
        let (list, layer_ends) = self.record_with(m, n_logits, taps, None)?;
        // A hybrid starting over clears its recurrent state at the head of the step.
        let prelude = self.prelude(start);
        let mut captured = Vec::new();
        if capture {
            let mut start = 0;
            for (i, end) in layer_ends.into_iter().enumerate() {
                let part = &list[start..end];
                if i == 0 {
                    submit_with(ctx, "forward layer", &prelude, part)?;
                } else {
                    crate::kernels::launch::submit(ctx, "forward layer", part)?;
                }
                let bytes = read_back(ctx, &self.buffers.x, 0, u64::from(m * self.hp.n_embd) * 4)?;
                captured.push(bytemuck::pod_collect_to_vec(&bytes));
                start = end;
            }
            crate::kernels::launch::submit(ctx, "forward head", &list[start..])?;
        } else {
            submit_with(ctx, "forward", &prelude, &list)?;
        }
        drop(prelude);
        drop(list);
        if n_logits > 0 {
            // A mask serves the one step that computes logits after it was set.
            self.mask_on = false;
        }
        self.kv.commit(0, m)?;
        Ok(captured)
    }

    /// Sets every op for `tokens` at positions `start..` attending over the cache rows
    /// `0..start + m`, and uploads the tokens and positions; [`Forward::record`] then lists
    /// the dispatches. The KV bookkeeping is the caller's ([`Forward::step`] commits).
    pub fn prepare(
        &mut self,
        ctx: &GpuContext,
        tokens: &[u32],
        start: u32,
        n_logits: u32,
    ) -> Result<()> {
        let m = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        if m == 0 {
            return Err(Error::EmptyStep {
                what: "a forward step of no tokens".into(),
            });
        }
        if m > self.max_rows || n_logits > m.min(self.max_logit_rows) {
            return Err(Error::Usage(format!(
                "a step of {m} rows with {n_logits} logit rows (at most {} rows, {} logit rows)",
                self.max_rows, self.max_logit_rows
            )));
        }
        let end = start
            .checked_add(m)
            .filter(|&e| e <= self.kv.capacity())
            .ok_or_else(|| {
                Error::Usage(format!(
                    "rows {start}..{start}+{m} are past the cache's {} rows",
                    self.kv.capacity()
                ))
            })?;
        let positions: Vec<u32> = (start..end).collect();
        self.resize(ctx, m, n_logits, Route::Own)?;
        for l in &mut self.layers {
            if let MixerOps::Attention(a) = &mut l.mixer {
                match &mut a.attn_decode {
                    Some(decode) if m == 1 => decode.set_step(ctx, 1, end)?,
                    _ => a.attn_multi.set_step(ctx, m, end)?,
                }
            }
        }
        let b = &self.buffers;
        upload(ctx, "tokens", &b.tokens, 0, bytemuck::cast_slice(tokens))?;
        upload(
            ctx,
            "positions",
            &b.positions,
            0,
            bytemuck::cast_slice(&positions),
        )?;
        Ok(())
    }

    /// How many dispatches open a step of (`m`, `n_logits`) with the embedding gather: a caller
    /// that replaces what enters layer 0 (the MTP head's projection) splices its own after them.
    pub fn embed_len(&self, m: u32, n_logits: u32) -> usize {
        self.matmuls
            .get(&(m, n_logits, self.route))
            .map_or(0, |s| s.embed.len())
    }

    /// The dispatches of the step set by [`Forward::prepare`] (`m` rows, `n_logits` logit
    /// rows), in order, and the index in the list where each layer ends.
    pub fn record(&self, m: u32, n_logits: u32) -> Result<(Vec<&Dispatch>, Vec<usize>)> {
        self.record_with(m, n_logits, true, None)
    }

    /// [`Forward::record`], with or without the DSpark tap copies; with `seqs`, a batch's
    /// per-sequence calls in place of each attention layer's own, and its gathered LM head rows.
    fn record_with<'a>(
        &'a self,
        m: u32,
        n_logits: u32,
        taps: bool,
        seqs: Option<&'a batch_seq::SeqOps>,
    ) -> Result<(Vec<&'a Dispatch>, Vec<usize>)> {
        let set = self
            .matmuls
            .get(&(m, n_logits, self.route))
            .ok_or_else(|| Error::Usage(format!("no step of {m} rows was prepared")))?;
        let mut list: Vec<&Dispatch> = set.embed.iter().collect();
        let gemma3 = self.gemma3.as_ref();
        list.extend(gemma3.map(|g| &g.embed_scale.dispatch));
        let skip = !taps;
        let taps_at = |layer: u32| {
            let own = self.taps.iter().filter(move |t| !skip && t.0 == layer);
            let batch = seqs.into_iter().flat_map(move |s| s.taps_at(layer));
            own.map(|t| &t.1.dispatch).chain(batch)
        };
        list.extend(taps_at(0));
        // A layer's residual adds are fused into the norm after each (`add_then_norm`): the
        // attention's into ffn_norm, the FFN's into the next layer's attn_norm or the output
        // norm. So layer il ends (x complete) with the first dispatch of layer il + 1.
        let mut layer_ends = Vec::with_capacity(self.layers.len());
        for (il, (l, mm)) in self.layers.iter().zip(&set.layers).enumerate() {
            list.push(&l.attn_norm.dispatch);
            if il > 0 {
                layer_ends.push(list.len());
                list.extend(taps_at(il as u32));
            }
            let calls = match (seqs, &l.mixer) {
                (Some(s), MixerOps::Attention(a)) => Some(s.layer_calls(a)),
                (Some(s), MixerOps::DeltaNet(d)) => Some(s.delta_layer_calls(d.state)),
                _ => None,
            };
            l.mixer_dispatches(m, mm, &mut list, calls);
            let [post_attn, post_ffn] = match &l.post_norms {
                Some([a, f]) => [Some(&a.dispatch), Some(&f.dispatch)],
                None => [None, None],
            };
            list.extend(post_attn);
            let [.., gate, up, down] = mm;
            list.push(&l.ffn_norm.dispatch);
            if let Some(Some(block)) = set.moe.get(il) {
                list.extend(block.dispatches());
                continue;
            }
            list.extend(gate.iter().chain(up));
            list.extend(l.glu.as_ref().map(|op| &op.dispatch));
            list.extend(down);
            list.extend(post_ffn);
        }
        // The output norm also completes the last layer, so it runs even without logits.
        list.push(&self.final_norm.dispatch);
        layer_ends.push(list.len());
        list.extend(taps_at(self.layers.len() as u32));
        if n_logits > 0 {
            if let (Some(s), Route::Shared) = (seqs, self.route) {
                list.extend(s.gathers());
            }
            list.extend(&set.lm_head);
            list.extend(gemma3.and_then(|g| g.softcap.as_ref().map(|op| &op.dispatch)));
            if let (true, Some(op)) = (self.mask_on, &self.grammar_mask) {
                list.push(&op.dispatch);
            }
            if let Some((op, _)) = &self.argmax {
                list.extend(op.dispatches());
            }
        }
        Ok((list, layer_ends))
    }

    /// Argmax of each logits row of the last step.
    pub fn argmax(&self, ctx: &GpuContext) -> Result<Vec<u32>> {
        let (_, out) = self
            .argmax
            .as_ref()
            .ok_or_else(|| Error::Usage("this forward pass has no argmax".into()))?;
        let bytes = read_back(ctx, out, 0, u64::from(self.n_logits) * 4)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Logits `[n_logits, V]` of the last step.
    pub fn logits(&self, ctx: &GpuContext) -> Result<Vec<f32>> {
        let n = u64::from(self.n_logits) * u64::from(self.hp.n_vocab) * 4;
        let bytes = read_back(ctx, &self.buffers.logits, 0, n)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}
