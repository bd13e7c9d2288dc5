//! The per-sequence calls of a batched step ([`super::batch`]): for each sequence (a server's
//! slot), per attention layer its RoPE + K/V store and its attention over its own caches, per
//! DeltaNet layer its conv and delta rule over its own recurrent state
//! ([`super::batch_state`]), the copy of its logits rows into the LM head's input and its
//! DSpark tap copies. [`SeqOps`] lists the current step's calls to the forward pass as it
//! records the step.

use crate::gguf::GgmlType;
use crate::gpu::GpuContext;
use crate::kernels::attention::RopeKvIo;
use crate::kernels::attention::{KvLayout, KvStore, KvType, RopeKv};
use crate::kernels::launch::Dispatch;
use crate::kernels::ops::copy::{CopyParams, CopyRows};
use crate::memory::alloc::Allocator;
use crate::memory::batch::slot_name;
use crate::{Error, Result};

use super::attn_build::{attn_io, AttnEnv};
use super::batch_attn::SeqAttention;
use super::batch_state::{delta_calls, seq_delta, set_delta, SeqDelta, SeqLog};
use super::build::{rope_config, ForwardSpec};
use super::gemma3::{layer_attention, layer_layouts, sliding_rope};
use super::layer::{AttnOps, MixerOps};
use super::rope_store::RopeStore;
use super::Forward;

/// RoPE and the KV store of one sequence's rows: one fused dispatch (f16 caches), or the two
/// stores after the layer's shared RoPE over every row (quantized caches).
#[derive(Debug)]
pub(super) enum SeqStore {
    Fused(RopeKv),
    Split([KvStore; 2]),
}

/// One attention layer's calls for one sequence.
#[derive(Debug)]
pub(super) struct SeqAttn {
    store: SeqStore,
    attn: SeqAttention,
    /// The layer's q | k | v matmul does RoPE and the store when the step is this sequence
    /// alone ([`RopeStore::InQkv`]): `store` is not run then.
    in_qkv: bool,
}

/// One sequence's calls, by attention layer, the copy of its logits rows and its DSpark taps.
#[derive(Debug)]
pub(super) struct Seq {
    pub(super) layers: Vec<SeqAttn>,
    /// Its K and V caches, by attention layer (a one-sequence step's q | k | v epilogue).
    pub(super) caches: Vec<[wgpu::Buffer; 2]>,
    pub(super) gather: CopyRows,
    /// (layer whose input is captured, the copy of this sequence's rows into its drafter's
    /// staging `[rows, taps × d]`), as [`Forward::set_taps`].
    pub(super) taps: Vec<(u32, CopyRows)>,
    /// Staging row the next step's first row of this sequence goes to.
    pub(super) tap_row: u32,
    /// Per DeltaNet layer its conv and delta rule over this sequence's state (hybrid models).
    pub(super) delta: Vec<SeqDelta>,
    /// Its recurrent state's checkpoint and replay bookkeeping.
    pub(super) log: SeqLog,
}

/// Where a sequence's rows sit in a step: rows `row0..row0 + replay + new` of the shared
/// buffers at positions `start..`, its replayed rows first, the logits of its last `n_logits`
/// rows gathered to `head_in` row `gather_row`.
#[derive(Debug, Clone, Copy)]
pub(super) struct SeqRows {
    pub row0: u32,
    pub start: u32,
    pub replay: u32,
    pub new: u32,
    pub n_logits: u32,
    pub gather_row: u32,
}

impl Seq {
    /// Sets this sequence's calls for its rows of the next step (`d`: the model width; `alone`:
    /// the step is this sequence's rows only).
    pub(super) fn set_step(
        &mut self,
        ctx: &GpuContext,
        r: &SeqRows,
        d: u32,
        alone: bool,
    ) -> Result<()> {
        let m = r.replay + r.new;
        for sa in &mut self.layers {
            match &mut sa.store {
                _ if alone && sa.in_qkv => {}
                SeqStore::Fused(op) => op.set_tokens_at(ctx, m, r.row0)?,
                SeqStore::Split([k, v]) => {
                    k.set_n_tokens_at(ctx, m, r.row0)?;
                    v.set_n_tokens_at(ctx, m, r.row0)?;
                }
            }
            sa.attn.set_step_at(ctx, m, r.start + m, r.row0)?;
        }
        let seg = self.log.segment(r.row0, r.start, r.replay, r.new);
        set_delta(ctx, &mut self.delta, seg)?;
        if r.n_logits > 0 {
            let first = r.row0 + m - r.n_logits;
            self.gather
                .set_rows_at(ctx, r.n_logits, first * d, r.gather_row * d)?;
        }
        if r.new > 0 {
            place_taps(ctx, self, d, r.new, r.row0 + r.replay)?;
        }
        Ok(())
    }
}

/// The per-sequence calls of a batched step, as the forward pass records them.
#[derive(Debug)]
pub struct SeqOps {
    pub(super) seqs: Vec<Seq>,
    /// The current step's sequences, in row order.
    pub(super) active: Vec<usize>,
    /// Those whose rows the step's taps capture (not a replay of their own).
    pub(super) tapping: Vec<usize>,
    /// Those whose last row has logits, in logits-row order.
    pub(super) gathering: Vec<usize>,
    /// The step is one sequence's rows: the q | k | v matmul does RoPE and the store where the
    /// layer allows it ([`RopeStore::InQkv`], `forward::Route::Seq`).
    pub(super) alone: bool,
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
                _ if self.alone && sa.in_qkv => {}
                SeqStore::Fused(op) => out.push(&op.dispatch),
                SeqStore::Split([k, v]) => out.extend([&k.dispatch, &v.dispatch]),
            }
            out.extend(sa.attn.dispatches());
        }
        out
    }

    /// What replaces DeltaNet layer `k`'s own conv and delta rule in the current step.
    pub(crate) fn delta_layer_calls(&self, k: usize) -> Vec<&Dispatch> {
        self.active
            .iter()
            .filter_map(|&s| self.seqs.get(s))
            .flat_map(|q| delta_calls(&q.delta, k))
            .collect()
    }

    /// The current step's tap copies of `layer`'s input, every tapping sequence's.
    pub(crate) fn taps_at(&self, layer: u32) -> impl Iterator<Item = &Dispatch> {
        self.tapping
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

/// Points sequence `q`'s tap copies at its `m` rows from `row0`, into its staging from its tap
/// row.
pub(super) fn place_taps(ctx: &GpuContext, q: &mut Seq, d: u32, m: u32, row0: u32) -> Result<()> {
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
pub(super) fn seq_ops(
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
    let mut caches = Vec::new();
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
        let in_qkv = fwd.layers.get(il as usize).is_some_and(|l| match &l.mixer {
            MixerOps::Attention(a) => matches!(a.rope_store, RopeStore::InQkv { .. }),
            MixerOps::DeltaNet(_) => false,
        });
        let (shape, io) = attn_io(hp, b, [&kc, &vc], &env);
        // Layers of one shape share their params uniforms (set alike every step).
        let leader = layers
            .iter()
            .map(|l: &SeqAttn| &l.attn)
            .find(|a| a.shape() == shape);
        let attn = SeqAttention::new(ctx, shape, io, (&b.attn_state, partials), leader)?;
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
            let params = RopeKv::shape(io, hp.n_head, layouts, cfg, spec.max_rows)?;
            let shared = layers.iter().find_map(|l: &SeqAttn| match &l.store {
                // An owner set whenever this one is: both skipped alike when alone.
                SeqStore::Fused(op) if op.params() == params && l.in_qkv == in_qkv => op.uniform(),
                _ => None,
            });
            let op = RopeKv::new_sharing(ctx, io, hp.n_head, layouts, cfg, spec.max_rows, shared)?;
            SeqStore::Fused(op)
        } else {
            SeqStore::Split([
                KvStore::new(ctx, k_layout, &kc, &b.k, &b.positions, spec.max_rows)?,
                KvStore::new(ctx, v_layout, &vc, &b.v, &b.positions, spec.max_rows)?,
            ])
        };
        layers.push(SeqAttn {
            store,
            attn,
            in_qkv,
        });
        caches.push([kc, vc]);
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
        caches,
        gather,
        taps: Vec::new(),
        tap_row: 0,
        delta: seq_delta(ctx, fwd, s, alloc)?,
        log: SeqLog::default(),
    })
}
