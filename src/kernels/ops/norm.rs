//! RMSNorm on the GPU (`shaders/norm.wgsl`): x `[n_rows, n_cols]` → y `[n_rows, n_cols]`,
//! `y = x / sqrt(mean(x²) + eps) [* w]` with w `[n_cols]`, one workgroup per row.
//!
//! Batch invariant: a row's reduction order depends only on the pipeline (the lane layout), not
//! on the number of rows, so row i computed alone or inside any batch gives the same bits.
//! Without a weight it is the per-head q/k norm (`n_cols = head_dim`, rows = tokens × heads).
//!
//! Variants: `HAS_WEIGHT`, `IN_PLACE`, `USE_SUBGROUPS` (when the device has `SUBGROUP`),
//! `ADD_RESIDUAL` ([`RmsNorm::add_then_norm`]: a residual add fused into the norm after it) and
//! `VEC4` (rows of a multiple of 4 columns, chosen from the width alone: [`vec4_rows`]).

use crate::gpu::{BindingKind, BindingSpec, GpuContext, GpuError, ShaderVariant};

use crate::kernels::launch::Dispatch;

use super::{bad_input, build_rows, check_f32s, check_rows, grid, rewrite_params, rows_of};
use super::{row_variant, row_variants, HostIo, Io};

/// Invocations per workgroup on GPUs (the `WG_SIZE` override; at most `REDUCE_MAX_WG` = 256).
pub const WG_SIZE: u32 = 64;
/// Invocations per workgroup on CPU drivers: one SIMD group of lavapipe's 256-bit vectors, so
/// a row's lanes are one subgroup and the workgroup needs no coroutine switch at its barrier.
/// `cargo bench --bench ops` on lavapipe, residual add + norm of 576 columns: 8 rows 72.6 µs
/// with 64 scalar lanes, 40.6–40.9 µs with `VEC4` and 8 lanes; 1 row 29.7–38.3 → 22.2–22.8 µs
/// (about the dispatch's fixed cost).
pub const CPU_WG_SIZE: u32 = 8;
const _: () = assert!(
    WG_SIZE <= 256 && CPU_WG_SIZE <= 256,
    "common/reduce.wgsl holds at most 256 partials"
);

/// The workgroup size on this adapter: fixed per adapter, so a row's bits never depend on the
/// number of rows (batch invariance).
pub fn wg_size(ctx: &GpuContext) -> u32 {
    if ctx.is_cpu() {
        CPU_WG_SIZE
    } else {
        WG_SIZE
    }
}

/// Mirrors `struct Params` of `norm.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct NormParams {
    pub n_rows: u32,
    pub n_cols: u32,
    pub eps: f32,
    pub _pad: u32,
}

const _: () = assert!(std::mem::size_of::<NormParams>() == 16);

/// Whether rows of `n_cols` columns are read as vec4 (`VEC4`): a fourth of the loads.
pub fn vec4_rows(n_cols: u32) -> bool {
    n_cols.is_multiple_of(4)
}

/// The variant for a weight or not, in place or not, subgroup reductions or not, with `wg`
/// invocations per workgroup.
pub fn variant(wg: u32, weight: bool, in_place: bool, subgroups: bool) -> ShaderVariant {
    row_variant("norm", "HAS_WEIGHT", wg, weight, in_place, subgroups)
}

/// `v` reading and writing rows as vec4 when `vec4`.
pub fn with_vec4(mut v: ShaderVariant, vec4: bool) -> ShaderVariant {
    if vec4 {
        v.defines.push(("VEC4", String::new()));
    }
    v
}

/// Bindings of the `ADD_RESIDUAL` variant: params, residual (read_write), y (read_write), w.
const ADD_BINDINGS: &[BindingSpec] = &[
    crate::kernels::spec(0, BindingKind::Uniform),
    crate::kernels::spec(1, BindingKind::StorageReadWrite),
    crate::kernels::spec(2, BindingKind::StorageReadWrite),
    crate::kernels::spec(3, BindingKind::StorageRead),
];

/// The `ADD_RESIDUAL` variant (always with a weight, never in place).
pub fn add_variant(wg: u32, subgroups: bool) -> ShaderVariant {
    let mut v = variant(wg, true, false, subgroups);
    v.defines.push(("ADD_RESIDUAL", String::new()));
    v.bindings = ADD_BINDINGS;
    v
}

/// Every variant this kernel may use, on any device.
pub fn variants() -> Vec<ShaderVariant> {
    let mut out = Vec::new();
    for wg in [WG_SIZE, CPU_WG_SIZE] {
        let mut plain = row_variants(|w, i, s| variant(wg, w, i, s));
        plain.extend([false, true].map(|s| add_variant(wg, s)));
        for vec4 in [false, true] {
            out.extend(plain.iter().map(|v| with_vec4(v.clone(), vec4)));
        }
    }
    out
}

/// A built RMSNorm over at most `max_rows` rows.
#[derive(Debug)]
pub struct RmsNorm {
    pub dispatch: Dispatch,
    params: NormParams,
    max_rows: u32,
}

impl RmsNorm {
    /// RMSNorm of x `[n_rows, n_cols]` (from `io`) into y `[n_rows, n_cols]`, times `weight`
    /// `[n_cols]` when given. The buffers must hold at least those shapes.
    pub fn new(
        ctx: &GpuContext,
        io: Io<'_>,
        weight: Option<&wgpu::Buffer>,
        n_rows: u32,
        n_cols: u32,
        eps: f32,
    ) -> Result<RmsNorm, GpuError> {
        let wg = wg_size(ctx);
        let v = variant(wg, weight.is_some(), io.in_place(), ctx.has_subgroups());
        let v = with_vec4(v, vec4_rows(n_cols));
        RmsNorm::build(ctx, &v, "rms_norm", io, weight, n_rows, n_cols, eps)
    }

    /// `residual += y; y = RMSNorm(residual) * weight` over `[n_rows, n_cols]` in one dispatch:
    /// the residual add of a layer and the norm that follows it (the next layer's, or the
    /// output norm). Same bits as an in-place add then [`RmsNorm::new`].
    pub fn add_then_norm(
        ctx: &GpuContext,
        residual: &wgpu::Buffer,
        y: &wgpu::Buffer,
        weight: &wgpu::Buffer,
        n_rows: u32,
        n_cols: u32,
        eps: f32,
    ) -> Result<RmsNorm, GpuError> {
        let v = add_variant(wg_size(ctx), ctx.has_subgroups());
        let v = with_vec4(v, vec4_rows(n_cols));
        let io = Io::Out {
            src: residual,
            dst: y,
        };
        RmsNorm::build(
            ctx,
            &v,
            "add_rms_norm",
            io,
            Some(weight),
            n_rows,
            n_cols,
            eps,
        )
    }

    /// Checks the shapes and builds variant `v` over `io` (bindings 1, 2) and `weight` (3).
    #[allow(clippy::too_many_arguments)]
    fn build(
        ctx: &GpuContext,
        v: &ShaderVariant,
        label: &str,
        io: Io<'_>,
        weight: Option<&wgpu::Buffer>,
        n_rows: u32,
        n_cols: u32,
        eps: f32,
    ) -> Result<RmsNorm, GpuError> {
        if n_cols == 0 {
            return Err(bad_input("RMSNorm columns", "at least 1", 0));
        }
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(bad_input("RMSNorm eps", "finite and >= 0", eps));
        }
        let n = u64::from(n_rows) * u64::from(n_cols);
        super::to_u32("RMSNorm elements", n)?;
        io.check("RMSNorm x", n)?;
        let mut buffers = io.buffers();
        if let Some(w) = weight {
            check_f32s("RMSNorm weight", w, u64::from(n_cols))?;
            buffers.push(w);
        }
        let params = NormParams {
            n_rows,
            n_cols,
            eps,
            _pad: 0,
        };
        let dispatch = build_rows(ctx, v, label, &params, &buffers, n_rows, wg_size(ctx))?;
        Ok(RmsNorm {
            dispatch,
            params,
            max_rows: n_rows,
        })
    }

    /// Norms the first `n_rows` rows from the next submission on (at most the built count).
    pub fn set_rows(&mut self, ctx: &GpuContext, n_rows: u32) -> Result<(), GpuError> {
        check_rows("RMSNorm rows", n_rows, self.max_rows)?;
        self.params.n_rows = n_rows;
        rewrite_params(ctx, &self.dispatch, &self.params)?;
        self.dispatch.grid = grid(ctx, "rms_norm", u64::from(n_rows), wg_size(ctx))?;
        Ok(())
    }

    pub fn params(&self) -> NormParams {
        self.params
    }
}

/// Runs RMSNorm now on x `[x.len() / n_cols, n_cols]` and returns y (same shape).
pub fn rms_norm_on_gpu(
    ctx: &GpuContext,
    x: &[f32],
    n_cols: usize,
    weight: Option<&[f32]>,
    eps: f32,
    in_place: bool,
) -> Result<Vec<f32>, GpuError> {
    let (n_rows, n_cols) = rows_of(x.len(), n_cols, "RMSNorm x")?;
    if let Some(w) = weight {
        if w.len() != n_cols as usize {
            return Err(bad_input(
                "RMSNorm weight",
                format!("{n_cols} elements"),
                w.len(),
            ));
        }
    }
    let host = HostIo::new(ctx, "rms_norm x", x, in_place)?;
    let w = weight
        .map(|w| super::upload_f32(ctx, "rms_norm weight", w))
        .transpose()?;
    let op = RmsNorm::new(ctx, host.io(), w.as_ref(), n_rows, n_cols, eps)?;
    super::run_and_read_f32(ctx, "rms_norm", &[&op.dispatch], host.out(), x.len())
}

/// Runs [`RmsNorm::add_then_norm`] now: `residual` and `y` `[rows, n_cols]`, `weight`
/// `[n_cols]`; returns (`residual + y`, the norm of it times `weight`).
pub fn add_rms_norm_on_gpu(
    ctx: &GpuContext,
    residual: &[f32],
    y: &[f32],
    n_cols: usize,
    weight: &[f32],
    eps: f32,
) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
    let (n_rows, n_cols) = rows_of(residual.len(), n_cols, "add+RMSNorm residual")?;
    if y.len() != residual.len() || weight.len() != n_cols as usize {
        let expected = format!("y of {} and a weight of {n_cols} elements", residual.len());
        let actual = format!("{} and {}", y.len(), weight.len());
        return Err(bad_input("add+RMSNorm inputs", expected, actual));
    }
    let r = super::upload_f32(ctx, "add_rms_norm residual", residual)?;
    let yb = super::upload_f32(ctx, "add_rms_norm y", y)?;
    let w = super::upload_f32(ctx, "add_rms_norm weight", weight)?;
    let op = RmsNorm::add_then_norm(ctx, &r, &yb, &w, n_rows, n_cols, eps)?;
    let normed = super::run_and_read_f32(ctx, "add_rms_norm", &[&op.dispatch], &yb, y.len())?;
    let bytes = crate::gpu::buffers::read_back(ctx, &r, 0, residual.len() as u64 * 4)?;
    Ok((bytemuck::pod_collect_to_vec(&bytes), normed))
}
