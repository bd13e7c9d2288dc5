//! What every attention pass shares: the mask modes, the params uniform (`struct Params` of
//! `common/kv_attn_common.wgsl`), the fixed shape of a call site ([`AttnShape`]), the buffers
//! other than scratch ([`AttnIo`]) and their checks, and the bytes of the decode partials for the
//! memory planner ([`decode_partials_bytes`]).

use crate::gpu::GpuError;

use super::layout::KvLayout;

/// Keys per split (`ATTN_SPLIT` in `common/kv_attn_common.wgsl`).
pub const SPLIT_SIZE: u32 = 256;
/// Query heads one workgroup handles together (`ATTN_MAX_GROUP`).
pub const MAX_GROUP: u32 = 8;
/// Invocations per workgroup of the two-pass kernels (their `WG_SIZE` override).
pub const ATTN_WG_SIZE: u32 = 64;

/// Which keys each query row sees, as the kernels encode it (`mask_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskMode {
    /// Every key `0..kv_len` (the drafter's non-causal block, or decode).
    None,
    /// Row `i` sees keys `0..=positions[i]` (clipped to `kv_len`).
    Causal,
    /// Additive f32 mask `[n_q, stride]`, `stride >= kv_len`.
    Explicit { stride: u32 },
    /// Causal, and row `i` does not see keys `j` with `positions[i] − j >= window` (a sliding
    /// window of `window` keys, its own included: llama.cpp's `LLAMA_SWA_TYPE_STANDARD`).
    Sliding { window: u32 },
}

impl MaskMode {
    fn code(self) -> (u32, u32) {
        match self {
            MaskMode::None => (0, 0),
            MaskMode::Causal => (1, 0),
            MaskMode::Explicit { stride } => (2, stride),
            MaskMode::Sliding { window } => (3, window),
        }
    }
}

/// Mirrors `struct Params` of `common/kv_attn_common.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct AttnParams {
    pub n_q: u32,
    pub n_head: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub kv_len: u32,
    pub mask_mode: u32,
    pub mask_stride: u32,
    pub n_splits: u32,
    pub group: u32,
    pub n_chunks: u32,
    pub scale: f32,
    pub n_tasks: u32,
    /// Splits one fused workgroup folds per pass ([`super::fused::pass_splits`]).
    pub pass_splits: u32,
    /// First query row of the call (a batch runs one call per sequence over its rows; the
    /// two-pass path indexes its partials by the call's own rows, so they need `n_q` rows).
    pub row0: u32,
    pub _pad: [u32; 2],
}

const _: () = assert!(std::mem::size_of::<AttnParams>() == 64);

pub(super) fn bad(what: &str, expected: String, actual: impl ToString) -> GpuError {
    GpuError::BadInput {
        what: what.to_string(),
        expected,
        actual: actual.to_string(),
    }
}

/// Fixed shape of an attention call site: heads, cache, capacities, scale and mask mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnShape {
    /// Layout of both the K and the V cache.
    pub kv: KvLayout,
    pub n_head: u32,
    /// Query rows the bound buffers hold at most.
    pub max_q: u32,
    /// Keys a call may see at most (`<= kv.n_ctx`).
    pub max_kv_len: u32,
    /// Score scale; `1 / sqrt(head_dim)` by [`AttnShape::default_scale`].
    pub scale: f32,
    pub mask: MaskMode,
}

impl AttnShape {
    pub fn default_scale(head_dim: u32) -> f32 {
        1.0 / (head_dim as f32).sqrt()
    }

    pub(super) fn check(&self) -> Result<(), GpuError> {
        let kv = &self.kv;
        if self.n_head == 0 || !self.n_head.is_multiple_of(kv.n_kv_heads) {
            return Err(bad(
                "attention heads",
                format!("a non-zero multiple of n_kv_heads {}", kv.n_kv_heads),
                self.n_head,
            ));
        }
        if self.max_kv_len > kv.n_ctx && !kv.ring {
            return Err(bad(
                "max kv_len",
                format!("at most n_ctx {}", kv.n_ctx),
                self.max_kv_len,
            ));
        }
        if let MaskMode::Explicit { stride } = self.mask {
            if stride < self.max_kv_len {
                return Err(bad(
                    "mask stride",
                    format!(">= max kv_len {}", self.max_kv_len),
                    stride,
                ));
            }
        }
        Ok(())
    }

    /// f32 words of the two-pass partials buffer:
    /// `[max_q, n_head, ceil(max_kv_len / 256), head_dim + 2]`. The fused pass
    /// ([`super::FusedAttention`]) needs none.
    pub fn partials_words(&self) -> u64 {
        u64::from(self.max_q)
            * u64::from(self.n_head)
            * u64::from(self.max_kv_len.div_ceil(SPLIT_SIZE))
            * u64::from(self.kv.head_dim + 2)
    }

    /// Bytes of the two-pass partials buffer (0 needed by the fused pass).
    pub fn partials_bytes(&self) -> u64 {
        4 * self.partials_words()
    }

    /// Bytes of the fused pass's state scratch: `max_q · n_head · 16` (`m, l`, next split, pad),
    /// whatever the context.
    pub fn fused_state_bytes(&self) -> u64 {
        16 * u64::from(self.max_q) * u64::from(self.n_head)
    }

    /// Params for one step.
    pub fn params(&self, n_q: u32, kv_len: u32) -> Result<AttnParams, GpuError> {
        if n_q > self.max_q {
            return Err(bad("query rows", format!("at most {}", self.max_q), n_q));
        }
        if kv_len > self.max_kv_len {
            return Err(bad(
                "kv_len",
                format!("at most {}", self.max_kv_len),
                kv_len,
            ));
        }
        let group = self.n_head / self.kv.n_kv_heads;
        let n_chunks = group.div_ceil(MAX_GROUP);
        let (mask_mode, mask_stride) = self.mask.code();
        Ok(AttnParams {
            n_q,
            n_head: self.n_head,
            n_kv_heads: self.kv.n_kv_heads,
            head_dim: self.kv.head_dim,
            kv_len,
            mask_mode,
            mask_stride,
            n_splits: kv_len.div_ceil(SPLIT_SIZE),
            group,
            n_chunks,
            scale: self.scale,
            n_tasks: n_q * self.kv.n_kv_heads * n_chunks,
            pass_splits: super::fused::pass_splits(&self.kv, group.min(MAX_GROUP)),
            row0: 0,
            _pad: [0; 2],
        })
    }
}

/// The buffers of an attention call site other than scratch: what the fused pass binds.
/// `positions` / `mask` may be `None` when the mask mode does not read them.
#[derive(Debug, Clone, Copy)]
pub struct AttnIo<'a> {
    pub q: &'a wgpu::Buffer,
    pub k_cache: &'a wgpu::Buffer,
    pub v_cache: &'a wgpu::Buffer,
    pub positions: Option<&'a wgpu::Buffer>,
    pub mask: Option<&'a wgpu::Buffer>,
    pub out: &'a wgpu::Buffer,
}

/// Checks the shape and the sizes of `b`; returns the positions and mask buffers to bind
/// (`placeholder` where the mask mode reads neither).
pub(super) fn check_io<'a>(
    shape: &AttnShape,
    b: &AttnIo<'a>,
    placeholder: &'a wgpu::Buffer,
) -> Result<(&'a wgpu::Buffer, &'a wgpu::Buffer), GpuError> {
    shape.check()?;
    let kv = &shape.kv;
    let rows = u64::from(shape.max_q) * u64::from(shape.n_head) * u64::from(kv.head_dim) * 4;
    need("attention q", b.q, rows)?;
    need("attention out", b.out, rows)?;
    need("K cache", b.k_cache, kv.buffer_bytes())?;
    need("V cache", b.v_cache, kv.buffer_bytes())?;
    let positions = match (b.positions, shape.mask) {
        (Some(p), _) => p,
        (None, MaskMode::Causal | MaskMode::Sliding { .. }) => {
            return Err(bad("positions", "a buffer".into(), "none"))
        }
        (None, _) => placeholder,
    };
    let mask = match (b.mask, shape.mask) {
        (Some(m), _) => m,
        (None, MaskMode::Explicit { .. }) => return Err(bad("mask", "a buffer".into(), "none")),
        (None, _) => placeholder,
    };
    if matches!(shape.mask, MaskMode::Causal | MaskMode::Sliding { .. }) {
        need("positions", positions, 4 * u64::from(shape.max_q))?;
    }
    if let MaskMode::Explicit { stride } = shape.mask {
        need("mask", mask, 4 * u64::from(shape.max_q) * u64::from(stride))?;
    }
    Ok((positions, mask))
}

pub(super) fn need(what: &str, buffer: &wgpu::Buffer, bytes: u64) -> Result<(), GpuError> {
    if buffer.size() < bytes {
        return Err(bad(what, format!("at least {bytes} bytes"), buffer.size()));
    }
    Ok(())
}

/// Bytes of the partials scratch of the two-pass (decode) attention for `n_seq` rows of `n_head`
/// heads over up to `n_ctx` keys: `n_seq · n_head · ceil(n_ctx / 256) · (head_dim + 2) · 4`
/// (one `m, l, acc[head_dim]` f32 record per row, head and split). It is the
/// [`AttnShape::partials_bytes`] of a shape with `max_q = n_seq`, `max_kv_len = n_ctx`; the memory
/// planner's `attn_partials_bytes` must agree. Multi-row calls use [`super::FusedAttention`],
/// which needs no scratch, so only this decode buffer grows with the context (by < 1 % of the
/// KV cache).
pub fn decode_partials_bytes(n_seq: u64, n_head: u64, n_ctx: u64, head_dim: u64) -> u64 {
    4 * n_seq * n_head * n_ctx.div_ceil(u64::from(SPLIT_SIZE)) * (head_dim + 2)
}
