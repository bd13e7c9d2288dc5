//! Two-pass attention over a KV cache: `attn_split.wgsl` (split partials) then
//! `attn_reduce.wgsl` (fold). This is the decode path (one query row per sequence: the splits
//! give the parallelism over a long context); multi-row calls (prefill, speculative verify, the
//! drafter's block) use the fused pass of `fused.rs`, which gives the same bits per row with no
//! partials buffer. Both passes serve any `n_q`.
//!
//! Shapes: q f32 `[n_q, n_head, head_dim]`; K/V caches of a [`super::KvLayout`]; positions u32
//! `[n_q]` (causal mode: row `i` sees cache rows `0..=positions[i]`); explicit mask f32
//! `[n_q, stride]` (additive, `-inf` = hidden); partials f32
//! `[max_q, n_head, ceil(max_kv_len / 256), head_dim + 2]`; output f32 `[n_q, n_head, head_dim]`.
//!
//! Batch invariance: the keys a row sees are cut into splits of [`super::SPLIT_SIZE`] keys (fixed
//! size, not a fixed count), each split's partial depends only on that row, and partials are
//! folded in split order by the same code whatever `n_q` is, so a row of a multi-row call is
//! bit-identical to the same query alone with the same visible keys
//! (`docs/shaders-attention.md`).
//!
//! A model builds an [`Attention`] once per (layer, buffer set) and per step calls
//! [`Attention::set_step`] (params uniform + grids) before recording [`Attention::dispatches`];
//! tests use `attention_now` (`oneshot.rs`).

use crate::gpu::buffers::{create_storage, create_uniform, upload};
use crate::gpu::{BindingKind, BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::{bind_group, Dispatch};
use crate::kernels::{dispatch_grid, spec};

use super::layout::KvType;
use super::shape::{bad, check_io, need, AttnIo, AttnShape, ATTN_WG_SIZE};

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
    let (defines, use_f16) = ty.cache_defines(use_f16);
    ShaderVariant {
        shader: "attn_split",
        entry_point: "main",
        defines,
        overrides: vec![("WG_SIZE", f64::from(ATTN_WG_SIZE))],
        requires_f16: use_f16,
        requires_subgroups: false,
        requires_int64: false,
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
        requires_int64: false,
        bindings: REDUCE_BINDINGS,
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

impl<'a> AttnBuffers<'a> {
    /// The fused pass's buffers plus the partials scratch.
    pub fn new(io: AttnIo<'a>, partials: &'a wgpu::Buffer) -> Self {
        AttnBuffers {
            q: io.q,
            k_cache: io.k_cache,
            v_cache: io.v_cache,
            positions: io.positions,
            mask: io.mask,
            partials,
            out: io.out,
        }
    }

    /// The buffers without the partials scratch (what [`super::FusedAttention`] binds).
    pub fn io(&self) -> AttnIo<'a> {
        AttnIo {
            q: self.q,
            k_cache: self.k_cache,
            v_cache: self.v_cache,
            positions: self.positions,
            mask: self.mask,
            out: self.out,
        }
    }
}

/// The two dispatches of one attention call site, with their shared params uniform.
#[derive(Debug)]
pub struct Attention {
    pub shape: AttnShape,
    pub split: Dispatch,
    pub reduce: Dispatch,
    /// Query rows the bound q and out buffers hold (`>= shape.max_q`, the rows one call may
    /// have, which the partials are sized for).
    pub q_rows: u32,
    /// It uploads its params uniform (not one shared with another call site).
    owns_params: bool,
}

impl Attention {
    /// Builds both dispatches, set for `max_q` rows and `max_kv_len` keys.
    pub fn new(ctx: &GpuContext, shape: AttnShape, b: AttnBuffers<'_>) -> Result<Self, GpuError> {
        Self::new_sharing(ctx, shape, b, None)
    }

    /// [`Attention::new`]; with `shared`, it binds that params uniform, owned by a call site
    /// of the same shape set for the same rows and keys before every step this one records,
    /// and uploads none itself.
    pub fn new_sharing(
        ctx: &GpuContext,
        shape: AttnShape,
        b: AttnBuffers<'_>,
        shared: Option<&wgpu::Buffer>,
    ) -> Result<Self, GpuError> {
        need("attention partials", b.partials, shape.partials_bytes())?;
        if shape.partials_words() > u64::from(u32::MAX) {
            return Err(bad(
                "attention partials",
                "< 2^32 words".into(),
                shape.partials_words(),
            ));
        }
        let placeholder = create_storage(ctx, "attention placeholder", 4)?;
        let (positions, mask) = check_io(&shape, &b.io(), &placeholder)?;
        let kv = &shape.kv;
        let params = shape.params(shape.max_q, shape.max_kv_len)?;
        let uniform = match shared {
            Some(u) => u.clone(),
            None => create_uniform(ctx, "attention params", &params)?,
        };
        let split_pipe = ctx
            .pipelines()
            .get(ctx, &kv.variant(split_variant(kv.ty, ctx.has_f16())))?;
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
        let row_bytes = u64::from(shape.n_head) * u64::from(kv.head_dim) * 4;
        let q_rows = b.q.size().min(b.out.size()) / row_bytes.max(1);
        let mut attn = Attention {
            shape,
            owns_params: shared.is_none(),
            q_rows: u32::try_from(q_rows).unwrap_or(u32::MAX),
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
        self.set_step_at(ctx, n_q, kv_len, 0)
    }

    /// [`Attention::set_step`] for query rows `row0..row0 + n_q` of the bound q, positions and
    /// out buffers (one sequence's rows of a batch); the partials are indexed by the call's own
    /// rows, so `n_q <= shape.max_q` whatever `row0`. Each row's bits are those of the same row
    /// at `row0` 0.
    pub fn set_step_at(
        &mut self,
        ctx: &GpuContext,
        n_q: u32,
        kv_len: u32,
        row0: u32,
    ) -> Result<(), GpuError> {
        let mut p = self.shape.params(n_q, kv_len)?;
        if row0.checked_add(n_q).is_none_or(|end| end > self.q_rows) {
            return Err(bad(
                "query rows",
                format!("within the {} bound rows", self.q_rows),
                format!("{row0}..{row0}+{n_q}"),
            ));
        }
        p.row0 = row0;
        let max = ctx.limits().max_compute_workgroups_per_dimension;
        let split_groups = u64::from(p.n_splits) * u64::from(p.n_tasks);
        let (sx, sy) = dispatch_grid("attention split", split_groups, max)?;
        let reduce_groups = u64::from(n_q) * u64::from(p.n_head);
        let (rx, ry) = dispatch_grid("attention reduce", reduce_groups, max)?;
        if let (true, Some(uniform)) = (self.owns_params, &self.split.params) {
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
