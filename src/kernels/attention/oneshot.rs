//! Attention "run now" for tests and one-off calls: uploads q (and positions / mask), builds an
//! [`Attention`] (two-pass) or a [`FusedAttention`] for exactly this call, submits, waits and
//! reads the output back.

use crate::gpu::buffers::{create_storage, create_storage_init, read_back};
use crate::gpu::{GpuContext, GpuError};
use crate::kernels::launch::submit;

use super::attend::{Attention, AttnBuffers};
use super::fused::FusedAttention;
use super::layout::KvLayout;
use super::shape::{bad, AttnIo, AttnShape, MaskMode};

/// Which attention kernels a call runs (both give the same bits per row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnPath {
    /// Split + reduce with a partials buffer (the decode path).
    TwoPass,
    /// One pass, no partials buffer (the multi-row path).
    Fused,
}

/// A host-side mask for [`attention_now`].
#[derive(Debug, Clone, Copy)]
pub enum AttnMask<'a> {
    None,
    /// `[n_q]` positions.
    Causal(&'a [u32]),
    /// `[n_q, kv_len]` additive values.
    Explicit(&'a [f32]),
}

/// Runs two-pass attention now for `q` (`[n_q, n_head, head_dim]`) over the first `kv_len` rows
/// of the caches and returns the output `[n_q, n_head, head_dim]`.
#[allow(clippy::too_many_arguments)]
pub fn attention_now(
    ctx: &GpuContext,
    kv: KvLayout,
    n_head: u32,
    k_cache: &wgpu::Buffer,
    v_cache: &wgpu::Buffer,
    q: &[f32],
    kv_len: u32,
    mask: AttnMask<'_>,
    scale: f32,
) -> Result<Vec<f32>, GpuError> {
    let caches = (k_cache, v_cache);
    attention_now_with(
        AttnPath::TwoPass,
        ctx,
        kv,
        n_head,
        caches,
        q,
        kv_len,
        mask,
        scale,
    )
}

/// [`attention_now`] through the fused pass.
#[allow(clippy::too_many_arguments)]
pub fn attention_fused_now(
    ctx: &GpuContext,
    kv: KvLayout,
    n_head: u32,
    k_cache: &wgpu::Buffer,
    v_cache: &wgpu::Buffer,
    q: &[f32],
    kv_len: u32,
    mask: AttnMask<'_>,
    scale: f32,
) -> Result<Vec<f32>, GpuError> {
    let caches = (k_cache, v_cache);
    attention_now_with(
        AttnPath::Fused,
        ctx,
        kv,
        n_head,
        caches,
        q,
        kv_len,
        mask,
        scale,
    )
}

/// [`attention_now`] through `path`; `caches` = (K, V).
#[allow(clippy::too_many_arguments)]
pub fn attention_now_with(
    path: AttnPath,
    ctx: &GpuContext,
    kv: KvLayout,
    n_head: u32,
    (k_cache, v_cache): (&wgpu::Buffer, &wgpu::Buffer),
    q: &[f32],
    kv_len: u32,
    mask: AttnMask<'_>,
    scale: f32,
) -> Result<Vec<f32>, GpuError> {
    let row = n_head as usize * kv.head_dim as usize;
    if row == 0 || !q.len().is_multiple_of(row) {
        return Err(bad(
            "attention q",
            format!("a multiple of {row} f32"),
            q.len(),
        ));
    }
    let n_q =
        u32::try_from(q.len() / row).map_err(|_| bad("query rows", "< 2^32".into(), q.len()))?;
    let mut shape = AttnShape {
        kv,
        n_head,
        max_q: n_q,
        max_kv_len: kv_len,
        scale,
        mask: MaskMode::None,
    };
    let mut positions = None;
    let mut mask_buf = None;
    match mask {
        AttnMask::None => {}
        AttnMask::Causal(p) => {
            if p.len() != n_q as usize {
                return Err(bad("positions", format!("{n_q} values"), p.len()));
            }
            shape.mask = MaskMode::Causal;
            positions = Some(create_storage_init(
                ctx,
                "attention positions",
                bytemuck::cast_slice(p),
            )?);
        }
        AttnMask::Explicit(m) => {
            if m.len() != n_q as usize * kv_len as usize {
                return Err(bad("mask", format!("{n_q} × {kv_len} f32"), m.len()));
            }
            shape.mask = MaskMode::Explicit { stride: kv_len };
            mask_buf = Some(create_storage_init(
                ctx,
                "attention mask",
                bytemuck::cast_slice(m),
            )?);
        }
    }
    if n_q == 0 {
        return Ok(Vec::new());
    }
    let q_buf = create_storage_init(ctx, "attention q", bytemuck::cast_slice(q))?;
    let out_bytes = 4 * q.len() as u64;
    let out = create_storage(ctx, "attention out", out_bytes)?;
    let io = AttnIo {
        q: &q_buf,
        k_cache,
        v_cache,
        positions: positions.as_ref(),
        mask: mask_buf.as_ref(),
        out: &out,
    };
    match path {
        AttnPath::TwoPass => {
            let partials = create_storage(ctx, "attention partials", shape.partials_bytes())?;
            let attn = Attention::new(ctx, shape, AttnBuffers::new(io, &partials))?;
            submit(ctx, "attention", &attn.dispatches())?;
        }
        AttnPath::Fused => {
            let state = create_storage(ctx, "attention state", shape.fused_state_bytes())?;
            let attn = FusedAttention::new(ctx, shape, io, &state)?;
            submit(ctx, "fused attention", &attn.dispatches())?;
        }
    }
    let raw = read_back(ctx, &out, 0, out_bytes)?;
    Ok(raw
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}
