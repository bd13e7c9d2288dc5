//! Building an attention layer's ops (between its projections): biases, q/k norms, RoPE and
//! the KV store, decode and multi-row attention, and qwen35's output gate.

use crate::gpu::GpuContext;
use crate::kernels::attention::{
    Attention, AttnBuffers, AttnIo, AttnShape, FusedAttention, KvLayout, KvStore, MaskMode, RopeKv,
    RopeKvIo,
};
use crate::kernels::ops::binary::{Binary, BinaryOp};
use crate::kernels::ops::norm::RmsNorm;
use crate::kernels::ops::rope::{Rope, RopeConfig, RopeMode, RopeShape};
use crate::kernels::ops::{params_uniform, Io};
use crate::model::hparams::Hparams;
use crate::model::weights::{AttnWeights, Qkv};
use crate::{Error, Result};

use super::build::ForwardSpec;
use super::layer::{AttnOps, GateOps};
use super::rope_store::{RopeStore, SplitOps};
use super::Buffers;

/// What every attention layer of a pass shares.
pub(super) struct AttnEnv<'a> {
    pub spec: &'a ForwardSpec,
    /// The RoPE table.
    pub freqs: &'a wgpu::Buffer,
    pub rope_cfg: &'a RopeConfig,
    /// K and V cache layouts.
    pub layouts: [&'a KvLayout; 2],
    /// Decode through split-KV + reduce (GPU adapters) rather than the fused kernel.
    pub split_decode: bool,
    /// The layer's mask (the pass's, or Gemma 3's sliding window) and score scale.
    pub mask: MaskMode,
    pub scale: f32,
}

/// The attention call of a layer over caches `[kc, vc]`: q from `act.q`, out to `act.attn`.
pub(super) fn attn_io<'a>(
    hp: &Hparams,
    b: &'a Buffers,
    [kc, vc]: [&'a wgpu::Buffer; 2],
    env: &AttnEnv<'_>,
) -> (AttnShape, AttnIo<'a>) {
    let shape = AttnShape {
        kv: *env.layouts[0],
        n_head: hp.n_head,
        max_q: env.spec.max_rows,
        max_kv_len: env.spec.kv_rows,
        scale: env.scale,
        mask: env.mask,
    };
    let io = AttnIo {
        q: &b.q,
        k_cache: kc,
        v_cache: vc,
        positions: Some(&b.positions),
        mask: None,
        out: &b.attn,
    };
    (shape, io)
}

/// The ops of an attention layer with weights `aw` and caches `[kc, vc]` (`kv` index left 0).
pub(super) fn attention_ops(
    ctx: &GpuContext,
    hp: &Hparams,
    b: &Buffers,
    aw: &AttnWeights,
    [kc, vc]: [&wgpu::Buffer; 2],
    env: &AttnEnv<'_>,
) -> Result<AttnOps> {
    let spec = env.spec;
    let (freqs, rope_cfg) = (env.freqs, env.rope_cfg);
    let [k_layout, v_layout] = env.layouts;
    let (k_layout, v_layout) = (*k_layout, *v_layout);
    let split_decode = env.split_decode;
    let max_rows = spec.max_rows;
    let eps = hp.rms_eps;
    let mut bias = Vec::new();
    if let Some([bq, bk, bv]) = &aw.bias_qkv {
        for (buf, bb, w) in [
            (&b.q, bq, hp.q_dim()),
            (&b.k, bk, hp.k_dim()),
            (&b.v, bv, hp.v_dim()),
        ] {
            let op = Binary::Add { b: bb, n_b: w };
            bias.push(BinaryOp::new(ctx, Io::InPlace(buf), op, max_rows * w)?);
        }
    }
    let mut qk_norm = Vec::new();
    if let Some([qn, kn]) = &aw.qk_norm {
        // Gated: the q rows were split out of act.q into act.attn; the norm packs them back.
        let q_io = if hp.attn_gated() {
            Io::Out {
                src: &b.attn,
                dst: &b.q,
            }
        } else {
            Io::InPlace(&b.q)
        };
        for (io, w, heads) in [(q_io, qn, hp.n_head), (Io::InPlace(&b.k), kn, hp.n_head_kv)] {
            let rows = max_rows * heads;
            qk_norm.push(RmsNorm::new(ctx, io, Some(w), rows, hp.head_dim, eps)?);
        }
    } else if hp.attn_gated() {
        return Err(Error::Usage(
            "gated attention without attn_q_norm / attn_k_norm is not supported".into(),
        ));
    }
    let rope = |buf: &wgpu::Buffer, heads: u32| {
        let shape = RopeShape {
            n_tokens: max_rows,
            n_heads: heads,
            head_dim: hp.head_dim,
        };
        Rope::new(ctx, Io::InPlace(buf), &b.positions, freqs, shape, rope_cfg)
    };
    let (shape, io) = attn_io(hp, b, [kc, vc], env);
    let attn_decode = match &b.partials {
        Some(partials) if split_decode => Some(Attention::new(
            ctx,
            AttnShape { max_q: 1, ..shape },
            AttnBuffers::new(io, partials),
        )?),
        _ => None,
    };
    let attn_multi = FusedAttention::new(ctx, shape, io, &b.attn_state)?;
    let rope_store = if RopeKv::supports(&k_layout, &v_layout) {
        let in_qkv = spec.rope_in_qkv
            && rope_cfg.mode == RopeMode::Normal
            && matches!(aw.qkv, Qkv::Stacked { .. })
            && aw.bias_qkv.is_none()
            && aw.qk_norm.is_none();
        let io = RopeKvIo {
            q: &b.q,
            k: &b.k,
            v: &b.v,
            positions: &b.positions,
            freqs,
            k_cache: kc,
            v_cache: vc,
        };
        let layouts = [&k_layout, &v_layout];
        if in_qkv {
            let shape = RopeKv::shape(io, hp.n_head, layouts, rope_cfg, max_rows)?;
            let uniform = params_uniform(ctx, "rope in q | k | v", &shape)?;
            RopeStore::InQkv { shape, uniform }
        } else {
            let op = RopeKv::new(ctx, io, hp.n_head, layouts, rope_cfg, max_rows)?;
            RopeStore::Fused(op)
        }
    } else {
        RopeStore::Split(Box::new(SplitOps {
            rope_q: rope(&b.q, hp.n_head)?,
            rope_k: rope(&b.k, hp.n_head_kv)?,
            store_k: KvStore::new(ctx, k_layout, kc, &b.k, &b.positions, max_rows)?,
            store_v: KvStore::new(ctx, v_layout, vc, &b.v, &b.positions, max_rows)?,
        }))
    };
    let gate = if hp.attn_gated() {
        Some(GateOps::new(ctx, hp, b, max_rows)?)
    } else {
        None
    };
    Ok(AttnOps {
        bias,
        qk_norm,
        rope_store,
        attn_decode,
        attn_multi,
        gate,
        kv: 0,
    })
}
