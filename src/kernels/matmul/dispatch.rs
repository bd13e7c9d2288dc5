//! Building [`Dispatch`]es for matmul (mat-vec, small batch, prefill), the baseline kernel and
//! the embedding gather, one per weight split, plus "run now" helpers for tests and benches.
//!
//! A forward pass builds its dispatches once per (weight, activation buffers, M) and records
//! them into one compute pass per step; `Dispatch::params` can be rewritten between steps.

use crate::gguf::GgmlType;
use crate::gpu::buffers::{create_storage, create_storage_init, create_uniform, read_back};
use crate::gpu::{GpuContext, GpuError, ShaderVariant};
use crate::kernels::dispatch_grid;
use crate::kernels::launch::{bind_group, submit, Dispatch};

pub use super::epilogue::GLU_PAIR_ROWS;
use super::epilogue::{glu_epilogue, with_glu, with_glu_paired, with_split3, with_split3_rope};
use super::io::{bad, check_fits, check_io, check_paired, check_split};
pub use super::io::{MatmulIo, SplitOut, SplitRope};
use super::variants::{
    baseline_variant, embed_variant, matmul_variant, uniform_max_tm, uses_rows_kernel,
    workgroup_rows, Family, BATCH_TMS, STAGED_TM, X_WINDOW,
};
use super::weights::GpuWeight;
use super::window::{x_window, x_window_columns};
use super::MatmulParams;

/// The column tile and staging the default path uses for `m` columns of a `ty` weight: the
/// smallest tile of [`BATCH_TMS`] holding `m` up to 16 columns; past that the staged
/// [`STAGED_TM`] tile when the family stages X, else the 16-column tile. Families reading X
/// through uniform windows cap the tile at [`uniform_max_tm`] (8 for `matmul_rows.wgsl`, else 4).
pub fn path_for(family: Family, ty: GgmlType, m: u32) -> (u32, bool) {
    if family.x_uniform {
        let max = uniform_max_tm(family, ty);
        let tm = BATCH_TMS.iter().copied().find(|&tm| tm >= m).unwrap_or(max);
        return (tm.min(max), false);
    }
    match BATCH_TMS.iter().find(|&&tm| tm >= m) {
        Some(&tm) => (tm, false),
        None if family.mm_staged => (STAGED_TM, true),
        None => (16, false),
    }
}

fn one_dispatch(
    ctx: &GpuContext,
    variant: &ShaderVariant,
    label: String,
    params: &MatmulParams,
    bufs: [&wgpu::Buffer; 3],
    grid: [u32; 3],
) -> Result<Dispatch, GpuError> {
    let res = bufs.map(|b| b.as_entire_binding()).into();
    one_dispatch_with(ctx, variant, label, params, res, grid)
}

/// [`one_dispatch`] with explicit bindings from binding 1 on (weight, X, Y, then the GLU gate).
fn one_dispatch_with(
    ctx: &GpuContext,
    variant: &ShaderVariant,
    label: String,
    params: &MatmulParams,
    bindings: Vec<wgpu::BindingResource<'_>>,
    grid: [u32; 3],
) -> Result<Dispatch, GpuError> {
    let pipeline = ctx.pipelines().get(ctx, variant)?;
    let uniform = create_uniform(ctx, &label, params)?;
    let mut resources = vec![uniform.as_entire_binding()];
    resources.extend(bindings);
    let bg = bind_group(ctx, &pipeline, &label, &resources)?;
    Ok(Dispatch {
        label,
        pipeline,
        bind_group: bg,
        params: Some(uniform),
        grid,
    })
}

/// Dispatches of `Y = X . W^T` on the default path for `io.m` (see [`path_for`]).
pub fn matmul_dispatches(
    ctx: &GpuContext,
    family: Family,
    w: &GpuWeight,
    io: &MatmulIo<'_>,
) -> Result<Vec<Dispatch>, GpuError> {
    let (tm, staged) = path_for(family, w.ty, io.m);
    matmul_dispatches_with(ctx, family, tm, staged, w, io)
}

/// Dispatches of `Y = X . W^T` with an explicit column tile `tm` and staging (any choice gives
/// the same bits for a given family).
pub fn matmul_dispatches_with(
    ctx: &GpuContext,
    family: Family,
    tm: u32,
    staged: bool,
    w: &GpuWeight,
    io: &MatmulIo<'_>,
) -> Result<Vec<Dispatch>, GpuError> {
    check_io(w, io)?;
    if io.m == 0 {
        return Ok(Vec::new());
    }
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    // Columns per uniform window of X, when the family reads X that way and it fits here
    // (broadcast variants of matmul_rows.wgsl read X from storage, all columns at once).
    let bcast = family.x_bcast && uses_rows_kernel(family, w.ty, tm, staged);
    let window = if family.x_uniform && !staged && !bcast {
        x_window_columns(ctx, w, io)
    } else {
        None
    };
    let chunk = window.unwrap_or(io.m);
    let f16 = ctx.has_f16();
    let nb_even = w.nb.is_multiple_of(2);
    let mut variant = matmul_variant(w.ty, family, tm, staged, f16, window.is_some(), nb_even)?;
    if let Some((glu, gate)) = io.gate {
        // Every column count must take the epilogue, or batches would differ from mat-vecs.
        if !glu_epilogue(family, w.ty) {
            return Err(bad(
                &format!("GLU epilogue of matmul {}", w.name),
                "a block-format weight on a CPU-driver family".to_string(),
                format!("{} on {family:?}", w.ty),
            ));
        }
        check_fits("matmul GLU gate", gate, io.y_off, io.m, io.y_stride, w.n)?;
        variant = with_glu(variant, glu)?;
    }
    if let Some(o) = io.split {
        check_split(family, w, io, &o)?;
        variant = match o.rope {
            Some(_) => with_split3_rope(variant)?,
            None => with_split3(variant)?,
        };
    }
    let mut wg_rows = workgroup_rows(family, w.ty, tm, staged);
    if let Some(glu) = io.paired {
        check_paired(family, w, io)?;
        variant = with_glu_paired(variant, glu)?;
        wg_rows = 2 * GLU_PAIR_ROWS; // 8 rows per invocation
    }
    let gz = chunk.min(io.m).div_ceil(tm);
    if gz > max_dim {
        return Err(GpuError::DispatchTooLarge {
            what: format!("matmul {} column tiles", w.name),
            groups: u64::from(gz),
            max_per_dim: max_dim,
        });
    }
    let mut out = Vec::with_capacity(w.splits.len());
    for (i, s) in w.splits.iter().enumerate() {
        let blocks = s.plan.n_rows.div_ceil(u64::from(wg_rows));
        let (gx, gy) = dispatch_grid(&format!("matmul {}", w.name), blocks, max_dim)?;
        let label = format!("matmul {} split {i} [{}]", w.name, variant.key());
        let mut c0 = 0;
        while c0 < io.m {
            let m = chunk.min(io.m - c0);
            let mut params = io.params(w, s)?;
            params.m = m;
            params.col0 = c0;
            params.y_off = io.y_off + c0 * io.y_stride;
            let x = if window.is_some() {
                let first = 4 * (u64::from(io.x_off) + u64::from(c0) * u64::from(io.x_stride));
                let (offset, x_off) = x_window(ctx, io.x, first);
                params.x_off = x_off;
                wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: io.x,
                    offset,
                    size: std::num::NonZeroU64::new(X_WINDOW),
                })
            } else {
                params.x_off = io.x_off + c0 * io.x_stride;
                io.x.as_entire_binding()
            };
            let grid = [gx, gy, m.div_ceil(tm)];
            let mut bindings = vec![s.buffer.as_entire_binding(), x, io.y.as_entire_binding()];
            if let Some((_, gate)) = io.gate {
                bindings.push(gate.as_entire_binding());
            }
            match io.split {
                Some(SplitOut { rope: Some(r), .. }) => bindings.extend([
                    r.positions.as_entire_binding(),
                    r.freqs.as_entire_binding(),
                    r.k_cache.as_entire_binding(),
                    r.v_cache.as_entire_binding(),
                    r.uniform.as_entire_binding(),
                ]),
                Some(o) => {
                    bindings.push(o.y2.as_entire_binding());
                    bindings.push(o.y3.as_entire_binding());
                }
                None => {}
            }
            out.push(one_dispatch_with(
                ctx,
                &variant,
                label.clone(),
                &params,
                bindings,
                grid,
            )?);
            c0 += m;
        }
    }
    Ok(out)
}

/// Dispatches of the one-invocation-per-output baseline kernel (benches, cross-checks).
pub fn baseline_dispatches(
    ctx: &GpuContext,
    w: &GpuWeight,
    io: &MatmulIo<'_>,
) -> Result<Vec<Dispatch>, GpuError> {
    check_io(w, io)?;
    let variant = baseline_variant(w.ty)?;
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    let mut out = Vec::with_capacity(w.splits.len());
    for (i, s) in w.splits.iter().enumerate() {
        let params = io.params(w, s)?;
        let invocations = u64::from(io.m) * s.plan.n_rows;
        if invocations > u64::from(u32::MAX) {
            return Err(bad(
                "baseline outputs",
                "< 2^32".into(),
                invocations.to_string(),
            ));
        }
        let (gx, gy) = dispatch_grid("matmul baseline", invocations.div_ceil(64), max_dim)?;
        let label = format!("matmul baseline {} split {i}", w.name);
        let bufs = [&s.buffer, io.x, io.y];
        out.push(one_dispatch(
            ctx,
            &variant,
            label,
            &params,
            bufs,
            [gx, gy, 1],
        )?);
    }
    Ok(out)
}

/// Dispatches gathering rows `ids[ids_off .. ids_off + n_tokens]` of `table` into
/// `out[out_off ..]` as f32 `[n_tokens, K]` (`out_off` a multiple of 4).
pub fn embed_dispatches(
    ctx: &GpuContext,
    table: &GpuWeight,
    ids: &wgpu::Buffer,
    ids_off: u32,
    n_tokens: u32,
    out: &wgpu::Buffer,
    out_off: u32,
) -> Result<Vec<Dispatch>, GpuError> {
    if !out_off.is_multiple_of(4) {
        return Err(bad(
            "embedding output offset",
            "a multiple of 4".into(),
            out_off.to_string(),
        ));
    }
    check_fits("embedding ids", ids, ids_off, 1, 0, n_tokens)?;
    check_fits("embedding output", out, out_off, n_tokens, table.k, table.k)?;
    if n_tokens == 0 {
        return Ok(Vec::new());
    }
    let variant = embed_variant(table.ty)?;
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    let invocations = u64::from(n_tokens) * u64::from(table.k / 4);
    if invocations > u64::from(u32::MAX) {
        return Err(bad(
            "embedding outputs",
            "< 2^34 elements".into(),
            invocations.to_string(),
        ));
    }
    let (gx, gy) = dispatch_grid("embedding", invocations.div_ceil(64), max_dim)?;
    let mut res_out = Vec::with_capacity(table.splits.len());
    for (i, s) in table.splits.iter().enumerate() {
        let params = MatmulParams {
            m: n_tokens,
            n_out: table.k,
            x_off: ids_off,
            y_off: out_off,
            ..table.params(s)?
        };
        let label = format!("embed {} split {i}", table.name);
        let bufs = [&s.buffer, ids, out];
        res_out.push(one_dispatch(
            ctx,
            &variant,
            label,
            &params,
            bufs,
            [gx, gy, 1],
        )?);
    }
    Ok(res_out)
}

fn read_f32(ctx: &GpuContext, buf: &wgpu::Buffer, n: u64) -> Result<Vec<f32>, GpuError> {
    let raw = read_back(ctx, buf, 0, n * 4)?;
    Ok(bytemuck::pod_collect_to_vec(&raw))
}

fn run_matmul(
    ctx: &GpuContext,
    w: &GpuWeight,
    x: &[f32],
    m: u32,
    build: impl FnOnce(&MatmulIo<'_>) -> Result<Vec<Dispatch>, GpuError>,
) -> Result<Vec<f32>, GpuError> {
    let expected = u64::from(m) * u64::from(w.k);
    if x.len() as u64 != expected {
        return Err(bad(
            "matmul X",
            format!("{expected} f32 ([{m}, {}])", w.k),
            x.len().to_string(),
        ));
    }
    if m == 0 {
        return Ok(Vec::new());
    }
    let xb = create_storage_init(ctx, "matmul X", bytemuck::cast_slice(x))?;
    let n_out = u64::from(m) * u64::from(w.n);
    let yb = create_storage(ctx, "matmul Y", n_out * 4)?;
    let dispatches = build(&MatmulIo::dense(w, &xb, &yb, m))?;
    let refs: Vec<&Dispatch> = dispatches.iter().collect();
    submit(ctx, "matmul now", &refs)?;
    read_f32(ctx, &yb, n_out)
}

/// `Y [m, N] = X [m, K] . W^T` now (upload, one submit, read back) on the default path.
pub fn matmul_now(
    ctx: &GpuContext,
    family: Family,
    w: &GpuWeight,
    x: &[f32],
    m: u32,
) -> Result<Vec<f32>, GpuError> {
    run_matmul(ctx, w, x, m, |io| matmul_dispatches(ctx, family, w, io))
}

/// As [`matmul_now`] with an explicit tile and staging.
pub fn matmul_now_with(
    ctx: &GpuContext,
    family: Family,
    tm: u32,
    staged: bool,
    w: &GpuWeight,
    x: &[f32],
    m: u32,
) -> Result<Vec<f32>, GpuError> {
    run_matmul(ctx, w, x, m, |io| {
        matmul_dispatches_with(ctx, family, tm, staged, w, io)
    })
}

/// The baseline kernel now.
pub fn baseline_now(
    ctx: &GpuContext,
    w: &GpuWeight,
    x: &[f32],
    m: u32,
) -> Result<Vec<f32>, GpuError> {
    run_matmul(ctx, w, x, m, |io| baseline_dispatches(ctx, w, io))
}

/// Rows `ids` of `table` as f32 `[ids.len(), K]`, now. Every id must be below N.
pub fn embed_now(ctx: &GpuContext, table: &GpuWeight, ids: &[u32]) -> Result<Vec<f32>, GpuError> {
    if let Some(&bad_id) = ids.iter().find(|&&id| id >= table.n) {
        return Err(bad(
            "token id",
            format!("< {} (rows of {})", table.n, table.name),
            bad_id.to_string(),
        ));
    }
    let n_tokens = u32::try_from(ids.len())
        .map_err(|_| bad("token count", "< 2^32".into(), ids.len().to_string()))?;
    if n_tokens == 0 {
        return Ok(Vec::new());
    }
    let idb = create_storage_init(ctx, "embedding ids", bytemuck::cast_slice(ids))?;
    let n_out = u64::from(n_tokens) * u64::from(table.k);
    let out = create_storage(ctx, "embedding output", n_out * 4)?;
    let dispatches = embed_dispatches(ctx, table, &idb, 0, n_tokens, &out, 0)?;
    let refs: Vec<&Dispatch> = dispatches.iter().collect();
    submit(ctx, "embed now", &refs)?;
    read_f32(ctx, &out, n_out)
}
