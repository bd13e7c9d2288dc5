//! Attention over a KV cache: `attn_split.wgsl` (split partials) then `attn_reduce.wgsl` (fold),
//! for decode (one query row) and every multi-row call (prefill, speculative verify, the
//! drafter's non-causal block) alike.
//!
//! Shapes: q f32 `[n_q, n_head, head_dim]`; K/V caches of a [`KvLayout`]; positions u32 `[n_q]`
//! (causal mode: row `i` sees cache rows `0..=positions[i]`); explicit mask f32
//! `[n_q, stride]` (additive, `-inf` = hidden); output f32 `[n_q, n_head, head_dim]`.
//!
//! Batch invariance: the keys a row sees are cut into splits of [`SPLIT_SIZE`] keys (fixed size,
//! not a fixed count), each split's partial depends only on that row, and partials are folded in
//! split order by the same code whatever `n_q` is, so a row of a multi-row call is bit-identical
//! to the same query alone with the same visible keys (`docs/shaders-attention.md`).
//!
//! A model builds an [`Attention`] once per (layer, buffer set) and per step calls
//! [`Attention::set_step`] (params uniform + grids) before recording [`Attention::dispatches`];
//! tests use `attention_now` (`oneshot.rs`).

use crate::gpu::buffers::{create_storage, create_uniform, upload};
use crate::gpu::{BindingKind, BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::dispatch_grid;
use crate::kernels::launch::{bind_group, Dispatch};

use super::layout::{KvLayout, KvType};

/// Keys per split (`ATTN_SPLIT` in `common/kv_attn_common.wgsl`).
pub const SPLIT_SIZE: u32 = 256;
/// Query heads one workgroup handles together (`ATTN_MAX_GROUP`).
pub const MAX_GROUP: u32 = 8;
/// Invocations per workgroup (the `WG_SIZE` override of both passes).
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
}

impl MaskMode {
    fn code(self) -> (u32, u32) {
        match self {
            MaskMode::None => (0, 0),
            MaskMode::Causal => (1, 0),
            MaskMode::Explicit { stride } => (2, stride),
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
}

const _: () = assert!(std::mem::size_of::<AttnParams>() == 48);

const fn spec(binding: u32, kind: BindingKind) -> BindingSpec {
    BindingSpec {
        group: 0,
        binding,
        kind,
    }
}

/// Bindings of `attn_split.wgsl`: params, q, k cache, v cache, positions, mask, partials.
pub const SPLIT_BINDINGS: &[BindingSpec] = &[
    spec(0, BindingKind::Uniform),
    spec(1, BindingKind::StorageRead),
    spec(2, BindingKind::StorageRead),
    spec(3, BindingKind::StorageRead),
    spec(4, BindingKind::StorageRead),
    spec(5, BindingKind::StorageRead),
    spec(6, BindingKind::StorageReadWrite),
];

/// Bindings of `attn_reduce.wgsl`: params, positions, partials, out.
pub const REDUCE_BINDINGS: &[BindingSpec] = &[
    spec(0, BindingKind::Uniform),
    spec(1, BindingKind::StorageRead),
    spec(2, BindingKind::StorageRead),
    spec(3, BindingKind::StorageReadWrite),
];

/// The split-pass variant for a cache type; `use_f16` (used for [`KvType::F16`] only) binds the
/// caches as `array<vec2<f16>>` and converts natively (the same values: f16 → f32 is exact).
pub fn split_variant(ty: KvType, use_f16: bool) -> ShaderVariant {
    let use_f16 = use_f16 && ty == KvType::F16;
    let mut defines = vec![(ty.define(), String::new())];
    if use_f16 {
        defines.push(("USE_F16", String::new()));
    }
    ShaderVariant {
        shader: "attn_split",
        entry_point: "main",
        defines,
        overrides: vec![("WG_SIZE", f64::from(ATTN_WG_SIZE))],
        requires_f16: use_f16,
        requires_subgroups: false,
        bindings: SPLIT_BINDINGS,
    }
}

/// The reduce-pass variant (one for every cache type).
pub fn reduce_variant() -> ShaderVariant {
    ShaderVariant {
        shader: "attn_reduce",
        entry_point: "main",
        defines: Vec::new(),
        overrides: vec![("WG_SIZE", f64::from(ATTN_WG_SIZE))],
        requires_f16: false,
        requires_subgroups: false,
        bindings: REDUCE_BINDINGS,
    }
}

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

    fn check(&self) -> Result<(), GpuError> {
        let kv = &self.kv;
        if self.n_head == 0 || self.n_head % kv.n_kv_heads != 0 {
            return Err(bad(
                "attention heads",
                format!("a non-zero multiple of n_kv_heads {}", kv.n_kv_heads),
                self.n_head,
            ));
        }
        if self.max_kv_len > kv.n_ctx {
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

    /// f32 words of the partials buffer: `[max_q, n_head, ceil(max_kv_len / 256), head_dim + 2]`.
    pub fn partials_words(&self) -> u64 {
        u64::from(self.max_q)
            * u64::from(self.n_head)
            * u64::from(self.max_kv_len.div_ceil(SPLIT_SIZE))
            * u64::from(self.kv.head_dim + 2)
    }

    /// Bytes of the partials buffer.
    pub fn partials_bytes(&self) -> u64 {
        4 * self.partials_words()
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
        })
    }
}

/// Buffers an [`Attention`] binds. `positions` / `mask` may be `None` when the mask mode does
/// not read them (a 4-byte placeholder is bound).
#[derive(Debug, Clone, Copy)]
pub struct AttnBuffers<'a> {
    pub q: &'a wgpu::Buffer,
    pub k_cache: &'a wgpu::Buffer,
    pub v_cache: &'a wgpu::Buffer,
    pub positions: Option<&'a wgpu::Buffer>,
    pub mask: Option<&'a wgpu::Buffer>,
    /// [`AttnShape::partials_bytes`] bytes of scratch.
    pub partials: &'a wgpu::Buffer,
    pub out: &'a wgpu::Buffer,
}

/// The two dispatches of one attention call site, with their shared params uniform.
#[derive(Debug)]
pub struct Attention {
    pub shape: AttnShape,
    pub split: Dispatch,
    pub reduce: Dispatch,
}

fn need(what: &str, buffer: &wgpu::Buffer, bytes: u64) -> Result<(), GpuError> {
    if buffer.size() < bytes {
        return Err(bad(what, format!("at least {bytes} bytes"), buffer.size()));
    }
    Ok(())
}

impl Attention {
    /// Builds both dispatches, set for `max_q` rows and `max_kv_len` keys.
    pub fn new(ctx: &GpuContext, shape: AttnShape, b: AttnBuffers<'_>) -> Result<Self, GpuError> {
        shape.check()?;
        let kv = &shape.kv;
        let rows = u64::from(shape.max_q) * u64::from(shape.n_head) * u64::from(kv.head_dim) * 4;
        need("attention q", b.q, rows)?;
        need("attention out", b.out, rows)?;
        need("attention partials", b.partials, shape.partials_bytes())?;
        need("K cache", b.k_cache, kv.buffer_bytes())?;
        need("V cache", b.v_cache, kv.buffer_bytes())?;
        if shape.partials_words() > u64::from(u32::MAX) {
            return Err(bad(
                "attention partials",
                "< 2^32 words".into(),
                shape.partials_words(),
            ));
        }
        let placeholder = create_storage(ctx, "attention placeholder", 4)?;
        let positions = match (b.positions, shape.mask) {
            (Some(p), _) => p,
            (None, MaskMode::Causal) => return Err(bad("positions", "a buffer".into(), "none")),
            (None, _) => &placeholder,
        };
        let mask = match (b.mask, shape.mask) {
            (Some(m), _) => m,
            (None, MaskMode::Explicit { .. }) => {
                return Err(bad("mask", "a buffer".into(), "none"))
            }
            (None, _) => &placeholder,
        };
        if shape.mask == MaskMode::Causal {
            need("positions", positions, 4 * u64::from(shape.max_q))?;
        }
        if let MaskMode::Explicit { stride } = shape.mask {
            need("mask", mask, 4 * u64::from(shape.max_q) * u64::from(stride))?;
        }
        let params = shape.params(shape.max_q, shape.max_kv_len)?;
        let uniform = create_uniform(ctx, "attention params", &params)?;
        let split_pipe = ctx
            .pipelines()
            .get(ctx, &split_variant(kv.ty, ctx.has_f16()))?;
        let reduce_pipe = ctx.pipelines().get(ctx, &reduce_variant())?;
        let split_group = bind_group(
            ctx,
            &split_pipe,
            "attention split",
            &[
                uniform.as_entire_binding(),
                b.q.as_entire_binding(),
                b.k_cache.as_entire_binding(),
                b.v_cache.as_entire_binding(),
                positions.as_entire_binding(),
                mask.as_entire_binding(),
                b.partials.as_entire_binding(),
            ],
        )?;
        let reduce_group = bind_group(
            ctx,
            &reduce_pipe,
            "attention reduce",
            &[
                uniform.as_entire_binding(),
                positions.as_entire_binding(),
                b.partials.as_entire_binding(),
                b.out.as_entire_binding(),
            ],
        )?;
        let mut attn = Attention {
            shape,
            split: Dispatch {
                label: format!("attention split {:?}", kv.ty),
                pipeline: split_pipe,
                bind_group: split_group,
                params: Some(uniform.clone()),
                grid: [0, 0, 1],
            },
            reduce: Dispatch {
                label: "attention reduce".to_string(),
                pipeline: reduce_pipe,
                bind_group: reduce_group,
                params: Some(uniform),
                grid: [0, 0, 1],
            },
        };
        attn.set_step(ctx, shape.max_q, shape.max_kv_len)?;
        Ok(attn)
    }

    /// Sets the next recording to `n_q` rows over `kv_len` keys (params uniform and grids).
    pub fn set_step(&mut self, ctx: &GpuContext, n_q: u32, kv_len: u32) -> Result<(), GpuError> {
        let p = self.shape.params(n_q, kv_len)?;
        let max = ctx.limits().max_compute_workgroups_per_dimension;
        let split_groups = u64::from(p.n_splits) * u64::from(p.n_tasks);
        let (sx, sy) = dispatch_grid("attention split", split_groups, max)?;
        let reduce_groups = u64::from(n_q) * u64::from(p.n_head);
        let (rx, ry) = dispatch_grid("attention reduce", reduce_groups, max)?;
        if let Some(uniform) = &self.split.params {
            upload(ctx, "attention params", uniform, 0, bytemuck::bytes_of(&p))?;
        }
        self.split.grid = [sx, sy, 1];
        self.reduce.grid = [rx, ry, 1];
        Ok(())
    }

    /// Split then reduce, to record in this order (one compute pass is fine: wgpu orders the
    /// storage writes between dispatches).
    pub fn dispatches(&self) -> [&Dispatch; 2] {
        [&self.split, &self.reduce]
    }
}
