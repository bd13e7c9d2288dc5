//! KV cache stores (`shaders/kv_store.wgsl`): f32 rows `[n_tokens, n_kv_heads * head_dim]` →
//! one cache buffer (K or V of a layer) at the positions in a u32 buffer `[n_tokens]` (scatter:
//! any order, gaps allowed), converted on the way: f16 round to nearest even, q8_0 / q4_0 with
//! llama.cpp's reference quantizers, bit for bit.
//!
//! Truncation is host bookkeeping: rows past the sequence length are simply never read by the
//! attention kernels (their `kv_len`) and are overwritten by later stores.
//!
//! A model step builds a [`KvStore`] once per (layer, K/V) and, per step, calls
//! [`KvStore::set_n_tokens`] (params uniform + grid) and writes the positions buffer; tests use
//! [`store_rows_now`].

use crate::gpu::buffers::{create_storage, create_storage_init, create_uniform, upload};
use crate::gpu::{BindingKind, BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::{bind_group, submit, Dispatch};
use crate::kernels::{dispatch_grid, spec};

use super::layout::{KvLayout, KvType};

/// Invocations per workgroup (the `WG_SIZE` override of `kv_store.wgsl`).
pub const STORE_WG_SIZE: u32 = 64;

/// Mirrors `struct Params` of `kv_store.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct KvStoreParams {
    pub n_tokens: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub n_ctx: u32,
    pub n_units: u32,
    pub units_per_token: u32,
    pub units_per_head: u32,
    /// First source row (and positions entry) of the call.
    pub row0: u32,
}

const _: () = assert!(std::mem::size_of::<KvStoreParams>() == 32);

/// Bindings of `kv_store.wgsl`: params, src rows, positions, cache.
pub const STORE_BINDINGS: &[BindingSpec] = &[
    spec(0, BindingKind::Uniform),
    spec(1, BindingKind::StorageRead),
    spec(2, BindingKind::StorageRead),
    spec(3, BindingKind::StorageReadWrite),
];

/// The store variant for `ty` (no optional features: integer-exact everywhere).
pub fn store_variant(ty: KvType) -> ShaderVariant {
    ShaderVariant {
        shader: "kv_store",
        entry_point: "main",
        defines: vec![(ty.define(), String::new())],
        overrides: vec![("WG_SIZE", f64::from(STORE_WG_SIZE))],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: STORE_BINDINGS,
    }
}

/// Params for storing `n_tokens` rows into `layout`.
pub fn store_params(layout: &KvLayout, n_tokens: u32) -> Result<KvStoreParams, GpuError> {
    let units_per_head = match layout.ty {
        KvType::F16 => layout.head_dim / 2,
        KvType::Q8_0 | KvType::Q4_0 => (layout.head_dim / 32).div_ceil(2),
    };
    let units_per_token = layout.n_kv_heads * units_per_head;
    let n_units = n_tokens
        .checked_mul(units_per_token)
        .ok_or_else(|| GpuError::BadInput {
            what: "KV store tokens".to_string(),
            expected: format!("at most {} tokens", u32::MAX / units_per_token.max(1)),
            actual: n_tokens.to_string(),
        })?;
    Ok(KvStoreParams {
        n_tokens,
        n_kv_heads: layout.n_kv_heads,
        head_dim: layout.head_dim,
        n_ctx: layout.n_ctx,
        n_units,
        units_per_token,
        units_per_head,
        row0: 0,
    })
}

/// Creates a zeroed cache buffer for `layout`.
pub fn create_cache(
    ctx: &GpuContext,
    what: &str,
    layout: &KvLayout,
) -> Result<wgpu::Buffer, GpuError> {
    create_storage(ctx, what, layout.buffer_bytes())
}

/// A store dispatch with its own params uniform, rewritable between steps.
#[derive(Debug)]
pub struct KvStore {
    pub layout: KvLayout,
    pub dispatch: Dispatch,
    /// Rows the bound `rows` / `positions` buffers hold at most.
    pub max_tokens: u32,
}

impl KvStore {
    /// Binds `rows` (f32 `[max_tokens, n_kv_heads * head_dim]`), `positions` (u32
    /// `[max_tokens]`) and `cache` (a buffer of `layout`), set for `max_tokens` tokens.
    pub fn new(
        ctx: &GpuContext,
        layout: KvLayout,
        cache: &wgpu::Buffer,
        rows: &wgpu::Buffer,
        positions: &wgpu::Buffer,
        max_tokens: u32,
    ) -> Result<KvStore, GpuError> {
        let params = store_params(&layout, max_tokens)?;
        let pipeline = ctx
            .pipelines()
            .get(ctx, &layout.variant(store_variant(layout.ty)))?;
        let uniform = create_uniform(ctx, "kv store params", &params)?;
        let group = bind_group(
            ctx,
            &pipeline,
            "kv store",
            &[
                uniform.as_entire_binding(),
                rows.as_entire_binding(),
                positions.as_entire_binding(),
                cache.as_entire_binding(),
            ],
        )?;
        let mut store = KvStore {
            layout,
            dispatch: Dispatch {
                label: format!("kv store {:?}", layout.ty),
                pipeline,
                bind_group: group,
                params: Some(uniform),
                grid: [0, 0, 1],
            },
            max_tokens,
        };
        store.set_n_tokens(ctx, max_tokens)?;
        Ok(store)
    }

    /// Stores the first `n_tokens` rows on the next recording (rewrites params and grid).
    pub fn set_n_tokens(&mut self, ctx: &GpuContext, n_tokens: u32) -> Result<(), GpuError> {
        self.set_n_tokens_at(ctx, n_tokens, 0)
    }

    /// Stores rows `row0..row0 + n_tokens` (at their positions entries) on the next recording:
    /// one sequence's rows of a batch.
    pub fn set_n_tokens_at(
        &mut self,
        ctx: &GpuContext,
        n_tokens: u32,
        row0: u32,
    ) -> Result<(), GpuError> {
        if row0
            .checked_add(n_tokens)
            .is_none_or(|end| end > self.max_tokens)
        {
            return Err(GpuError::BadInput {
                what: "KV store tokens".to_string(),
                expected: format!("at most {} (the bound buffers)", self.max_tokens),
                actual: format!("{row0}..{row0}+{n_tokens}"),
            });
        }
        let params = KvStoreParams {
            row0,
            ..store_params(&self.layout, n_tokens)?
        };
        let groups = u64::from(params.n_units).div_ceil(u64::from(STORE_WG_SIZE));
        let (x, y) = dispatch_grid(
            "kv store",
            groups,
            ctx.limits().max_compute_workgroups_per_dimension,
        )?;
        if let Some(uniform) = &self.dispatch.params {
            upload(
                ctx,
                "kv store params",
                uniform,
                0,
                bytemuck::bytes_of(&params),
            )?;
        }
        self.dispatch.grid = [x, y, 1];
        Ok(())
    }
}

/// Checks `positions` against the capacity (a position past `n_ctx` is a host bug).
pub fn check_positions(layout: &KvLayout, positions: &[u32]) -> Result<(), GpuError> {
    match positions.iter().find(|&&p| p >= layout.n_ctx) {
        Some(p) => Err(GpuError::BadInput {
            what: "KV position".to_string(),
            expected: format!("below n_ctx {}", layout.n_ctx),
            actual: p.to_string(),
        }),
        None => Ok(()),
    }
}

/// Stores `rows` (f32 `[positions.len(), n_kv_heads * head_dim]`) into `cache` now and waits.
pub fn store_rows_now(
    ctx: &GpuContext,
    layout: &KvLayout,
    cache: &wgpu::Buffer,
    rows: &[f32],
    positions: &[u32],
) -> Result<(), GpuError> {
    let n = positions.len();
    let width = (layout.n_kv_heads * layout.head_dim) as usize;
    if rows.len() != n * width {
        return Err(GpuError::BadInput {
            what: "KV store rows".to_string(),
            expected: format!("{n} × {width} f32"),
            actual: format!("{} f32", rows.len()),
        });
    }
    check_positions(layout, positions)?;
    if n == 0 {
        return Ok(());
    }
    let n32 = u32::try_from(n).map_err(|_| GpuError::BadInput {
        what: "KV store tokens".to_string(),
        expected: "fewer than 2^32".to_string(),
        actual: n.to_string(),
    })?;
    let src = create_storage_init(ctx, "kv store rows", bytemuck::cast_slice(rows))?;
    let pos = create_storage_init(ctx, "kv store positions", bytemuck::cast_slice(positions))?;
    let store = KvStore::new(ctx, *layout, cache, &src, &pos, n32)?;
    submit(ctx, "kv store", &[&store.dispatch])?;
    ctx.poll("kv store", true)
}
