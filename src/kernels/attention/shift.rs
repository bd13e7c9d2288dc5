//! Moving KV cache rows to new positions (`shaders/kv_rows.wgsl` then `kv_store.wgsl`): rows
//! `src..src + n` of one cache buffer are decoded to f32 (K rows rotated by `dst − src`
//! positions: RoPE is a rotation) into a scratch `[n, n_kv_heads·head_dim]`, then stored at rows
//! `dst..dst + n` in the cache's type. Both dispatches go in one pass, so the rows may overlap;
//! chunks of a larger move must run in ascending order with `dst < src`.
//!
//! The DSpark drafter's position window rebases this way: its kept rows move to positions from
//! 0 without a copy of their inputs, so the window costs no memory beside the K/V it serves.
//! K rows come back within the cache type's rounding of a recomputed row (the rotated f32 value
//! is rounded again on the store).

use crate::gpu::buffers::upload;
use crate::gpu::{BindingKind, BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::{bind_group, Dispatch};
use crate::kernels::ops::rope::RopeMode;
use crate::kernels::{dispatch_grid, spec};

use super::layout::{KvLayout, KvType};
use super::store::KvStore;

/// Invocations per workgroup of `kv_rows.wgsl`.
pub const ROWS_WG_SIZE: u32 = 64;

/// Mirrors `struct Params` of `kv_rows.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct KvRowsParams {
    pub n_rows: u32,
    pub src_row: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub n_rot: u32,
    pub delta: i32,
    pub n_elems: u32,
    pub _pad: u32,
}

const _: () = assert!(std::mem::size_of::<KvRowsParams>() == 32);

const BINDINGS: &[BindingSpec] = &[
    spec(0, BindingKind::Uniform),
    spec(1, BindingKind::StorageRead),
    spec(2, BindingKind::StorageRead),
    spec(3, BindingKind::StorageReadWrite),
];

/// The read-back variant for caches of `ty`, NEOX or normal pairs.
pub fn rows_variant(ty: KvType, mode: RopeMode) -> ShaderVariant {
    let mut defines = vec![(ty.define(), String::new())];
    if mode == RopeMode::Neox {
        defines.push(("NEOX", String::new()));
    }
    ShaderVariant {
        shader: "kv_rows",
        entry_point: "main",
        defines,
        overrides: vec![("WG_SIZE", f64::from(ROWS_WG_SIZE))],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: BINDINGS,
    }
}

/// Every variant.
pub fn variants() -> Vec<ShaderVariant> {
    let mut all = Vec::new();
    for ty in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            all.push(rows_variant(ty, mode));
        }
    }
    all
}

/// The rotation of K rows: rotated dims and pairing, and the model's RoPE table
/// (`[n_rot/2 + 1]` frequencies then the cos/sin scale; the scale is not applied again).
#[derive(Debug, Clone, Copy)]
pub struct Rotation<'a> {
    pub n_rot: u32,
    pub mode: RopeMode,
    pub freqs: &'a wgpu::Buffer,
}

/// A built row move for one cache buffer, at most `max_rows` rows at a time.
#[derive(Debug)]
pub struct KvShift {
    read: Dispatch,
    params: KvRowsParams,
    store: KvStore,
    layout: KvLayout,
    max_rows: u32,
}

impl KvShift {
    /// `scratch` holds at least `max_rows × n_kv_heads × head_dim` f32 and `positions` at least
    /// `max_rows` u32 (both may be shared between ops that run one after the other: the caller
    /// writes `dst..dst + n` into `positions` before the submit); `rotation` is `None` for V
    /// caches.
    pub fn new(
        ctx: &GpuContext,
        layout: KvLayout,
        cache: &wgpu::Buffer,
        scratch: &wgpu::Buffer,
        positions: &wgpu::Buffer,
        rotation: Option<Rotation<'_>>,
        max_rows: u32,
    ) -> Result<KvShift, GpuError> {
        let row = u64::from(layout.n_kv_heads) * u64::from(layout.head_dim);
        let need = u64::from(max_rows) * row * 4;
        if scratch.size() < need {
            return Err(GpuError::BadInput {
                what: "KV shift scratch".into(),
                expected: format!("at least {need} bytes"),
                actual: format!("{} bytes", scratch.size()),
            });
        }
        let store = KvStore::new(ctx, layout, cache, scratch, positions, max_rows)?;
        let (n_rot, mode, freqs) = match rotation {
            Some(r) => (r.n_rot, r.mode, r.freqs),
            // Unrotated rows still bind a table; any small buffer does (nothing reads it).
            None => (0, RopeMode::Normal, positions),
        };
        if n_rot > layout.head_dim || n_rot % 2 != 0 {
            return Err(GpuError::BadInput {
                what: "KV shift rotated dims".into(),
                expected: format!("even, at most {}", layout.head_dim),
                actual: n_rot.to_string(),
            });
        }
        let params = KvRowsParams {
            n_rows: 0,
            src_row: 0,
            n_kv_heads: layout.n_kv_heads,
            head_dim: layout.head_dim,
            n_rot,
            delta: 0,
            n_elems: 0,
            _pad: 0,
        };
        let variant = rows_variant(layout.ty, mode);
        let pipeline = ctx.pipelines().get(ctx, &variant)?;
        let uniform = crate::gpu::buffers::create_uniform(ctx, "kv rows params", &params)?;
        let group = bind_group(
            ctx,
            &pipeline,
            "kv rows",
            &[
                uniform.as_entire_binding(),
                cache.as_entire_binding(),
                freqs.as_entire_binding(),
                scratch.as_entire_binding(),
            ],
        )?;
        let read = Dispatch {
            label: "kv rows".into(),
            pipeline,
            bind_group: group,
            params: Some(uniform),
            grid: [0, 1, 1],
        };
        Ok(KvShift {
            read,
            params,
            store,
            layout,
            max_rows,
        })
    }

    /// Sets the move of rows `src..src + n` to `dst..dst + n` (K rotated by `dst − src`) for the
    /// next submission; the positions buffer must then hold `dst..dst + n`.
    pub fn set(&mut self, ctx: &GpuContext, src: u32, dst: u32, n: u32) -> Result<(), GpuError> {
        let bad = |what: &str, expected: String, actual: String| GpuError::BadInput {
            what: what.into(),
            expected,
            actual,
        };
        if n == 0 || n > self.max_rows {
            let expected = format!("1 to {} rows", self.max_rows);
            return Err(bad("KV shift rows", expected, n.to_string()));
        }
        let end = src.max(dst).saturating_add(n);
        if end > self.layout.n_ctx {
            let expected = format!("rows within the cache's {}", self.layout.n_ctx);
            return Err(bad("KV shift rows", expected, format!("{src}/{dst} + {n}")));
        }
        let delta = i64::from(dst) - i64::from(src);
        self.params.n_rows = n;
        self.params.src_row = src;
        self.params.delta = delta as i32;
        self.params.n_elems = n * self.params.n_kv_heads * self.params.head_dim;
        let uniform = self
            .read
            .params
            .as_ref()
            .ok_or_else(|| bad("KV shift", "a params uniform".into(), "none".into()))?;
        upload(
            ctx,
            "kv rows params",
            uniform,
            0,
            bytemuck::bytes_of(&self.params),
        )?;
        let groups = u64::from(self.params.n_elems).div_ceil(u64::from(ROWS_WG_SIZE));
        let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
        let (x, y) = dispatch_grid("kv rows", groups, max_dim)?;
        self.read.grid = [x, y, 1];
        self.store.set_n_tokens(ctx, n)
    }

    /// The read-back then the store, in order.
    pub fn dispatches(&self) -> [&Dispatch; 2] {
        [&self.read, &self.store.dispatch]
    }
}
