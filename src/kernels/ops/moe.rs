//! Mixture-of-experts kernels (`shaders/moe/*.wgsl`): the router, the expert mat-vec that reads
//! its expert from the router's id buffer, and the weighted sum of a row's expert outputs;
//! [`MoeBlock`] strings them with the ordinary matmuls and GLU into one layer's MoE FFN.
//!
//! Shapes (`m` token rows, `k` = experts used, `d` hidden, `f` expert width, `E` experts):
//! ```text
//! logits  [m, E]    = x · W_routerᵀ                  (matmul)
//! ids, w  [m, k]    = router(logits)                 (moe/router.wgsl: softmax, top-k, renorm)
//! g, u    [m·k, f]  = W_gate[ids] x, W_up[ids] x     (moe/matvec_id.wgsl, X row per token)
//! h       [m·k, f]  = silu(g) ⊙ u                    (glu.wgsl)
//! y       [m·k, d]  = W_down[ids] h                  (moe/matvec_id.wgsl, X row per slot)
//! out     [m, d]    = Σ_j w[·, j] y[·, j] (+ sigmoid(x·w_sh_gate) · shared(x))  (moe/combine.wgsl)
//! ```
//! The ids and weights stay on the device: one submission runs the whole block. Every kernel
//! computes a row from that row's inputs alone in a fixed order, so a row's bits are the same
//! alone or in a batch whose other rows route to other experts (`tests/moe_kernels.rs`).

use crate::gguf::GgmlType;
use crate::gpu::{BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;
use crate::kernels::matmul::variants::type_defines;
use crate::kernels::matmul::{Family, GpuWeight, Reduce};

pub use super::moe_block::{MoeBlock, MoeGpuWeights, MoeScratch};
use super::{bad_input, build, check_f32s, grid, params_uniform, read, write, PARAMS};

/// Experts per layer the router handles at most (`MAX_EXPERT` in `moe/router.wgsl`).
pub const MAX_EXPERT: u32 = 512;
/// Invocations per workgroup of the router and the combine kernel.
pub const WG_SIZE: u32 = 64;

const ID_BINDINGS: &[BindingSpec] = &[PARAMS, read(1), read(2), write(3), read(4)];
const ROUTER_BINDINGS: &[BindingSpec] = &[PARAMS, read(1), write(2), write(3)];
const COMBINE_BINDINGS: &[BindingSpec] = &[PARAMS, read(1), read(2), write(3)];
const COMBINE_SHARED_BINDINGS: &[BindingSpec] =
    &[PARAMS, read(1), read(2), write(3), read(4), read(5)];

/// Mirrors `struct Params` of `moe/router.wgsl` and `moe/combine.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MoeParams {
    /// Token rows.
    pub m: u32,
    /// Router: experts; combine: the hidden size.
    pub n: u32,
    /// Experts used per row.
    pub n_used: u32,
    pub _pad: u32,
}

/// The expert mat-vec variant for `ty` weights in `family` (its lanes, rows and reduction).
pub fn matvec_id_variant(
    ty: GgmlType,
    family: Family,
    f16: bool,
) -> Result<ShaderVariant, GpuError> {
    let (mut defines, f16) = type_defines(ty, f16)?;
    defines.push(("LANES", format!("{}u", family.lanes)));
    defines.push(("ROWS", format!("{}u", family.rows)));
    match family.reduce {
        Reduce::None => {}
        Reduce::Subgroup => defines.push(("RED_SUBGROUP", String::new())),
        Reduce::Shared => defines.push(("RED_SHARED", String::new())),
    }
    Ok(ShaderVariant {
        shader: "moe/matvec_id",
        entry_point: "main",
        defines,
        overrides: Vec::new(),
        requires_f16: f16,
        requires_subgroups: family.reduce == Reduce::Subgroup,
        requires_int64: false,
        bindings: ID_BINDINGS,
    })
}

fn router_variant() -> ShaderVariant {
    ShaderVariant {
        shader: "moe/router",
        entry_point: "main",
        defines: Vec::new(),
        overrides: vec![("WG_SIZE", f64::from(WG_SIZE))],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: ROUTER_BINDINGS,
    }
}

fn combine_variant(shared: bool) -> ShaderVariant {
    ShaderVariant {
        shader: "moe/combine",
        entry_point: "main",
        defines: match shared {
            true => vec![("SHARED", String::new())],
            false => Vec::new(),
        },
        overrides: vec![("WG_SIZE", f64::from(WG_SIZE))],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: match shared {
            true => COMBINE_SHARED_BINDINGS,
            false => COMBINE_BINDINGS,
        },
    }
}

/// Every variant of this family: the router, the combine kernel, and the expert mat-vec for
/// every matmul weight type in every registered matmul family, f16 on and off.
pub fn variants() -> Vec<ShaderVariant> {
    use crate::kernels::matmul::variants::REGISTERED_FAMILIES;
    let mut out = vec![
        router_variant(),
        combine_variant(false),
        combine_variant(true),
    ];
    for ty in crate::kernels::matmul::SUPPORTED_TYPES {
        for family in REGISTERED_FAMILIES {
            for f16 in [false, true] {
                if let Ok(v) = matvec_id_variant(ty, family, f16) {
                    if !out.contains(&v) {
                        out.push(v);
                    }
                }
            }
        }
    }
    out
}

/// Where an expert mat-vec reads and writes.
#[derive(Debug, Clone, Copy)]
pub struct IdIo<'a> {
    /// `[rows, K]`: one row per token (`per_slot = false`) or per (token, slot).
    pub x: &'a wgpu::Buffer,
    pub per_slot: bool,
    /// `[m · n_used, N]`.
    pub y: &'a wgpu::Buffer,
    /// `[m, n_used]` expert ids.
    pub ids: &'a wgpu::Buffer,
    pub m: u32,
    pub n_used: u32,
}

/// Dispatches of `Y[z] = W[ids[z]] · X[row of z]` for expert tensor `w` (`[K, N · n_expert]`
/// rows, `n_expert` experts of `N = w.n / n_expert` rows), one per split; each split must hold
/// whole experts.
pub fn matvec_id_dispatches(
    ctx: &GpuContext,
    family: Family,
    w: &GpuWeight,
    n_expert: u32,
    io: &IdIo<'_>,
) -> Result<Vec<Dispatch>, GpuError> {
    if n_expert == 0 || !w.n.is_multiple_of(n_expert) || io.n_used == 0 {
        return Err(bad_input(
            &format!("expert tensor {}", w.name),
            format!("rows a multiple of {n_expert} experts, experts used > 0"),
            format!("{} rows, {} used", w.n, io.n_used),
        ));
    }
    let n = w.n / n_expert;
    let slots = io.m * io.n_used;
    let x_rows = if io.per_slot { slots } else { io.m };
    check_f32s(
        "expert mat-vec input",
        io.x,
        u64::from(x_rows) * u64::from(w.k),
    )?;
    check_f32s(
        "expert mat-vec output",
        io.y,
        u64::from(slots) * u64::from(n),
    )?;
    check_f32s("expert ids", io.ids, u64::from(slots))?;
    let variant = matvec_id_variant(w.ty, family, ctx.has_f16())?;
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    if slots > max_dim {
        let what = format!("expert mat-vec {} (token rows × experts used)", w.name);
        return Err(GpuError::DispatchTooLarge {
            what,
            groups: u64::from(slots),
            max_per_dim: max_dim,
        });
    }
    let mut out = Vec::with_capacity(w.splits.len());
    for (i, s) in w.splits.iter().enumerate() {
        if s.plan.row0 % u64::from(n) != 0 || s.plan.n_rows % u64::from(n) != 0 {
            return Err(bad_input(
                &format!("expert tensor {} split {i}", w.name),
                format!("whole experts of {n} rows"),
                format!("rows {}..+{}", s.plan.row0, s.plan.n_rows),
            ));
        }
        let mut params = w.params(s)?;
        params.m = io.m;
        params.n_out = n;
        params.split1 = io.n_used;
        params.col0 = u32::from(io.per_slot);
        let blocks = u64::from(n).div_ceil(u64::from(family.rows));
        let (gx, gy) = crate::kernels::dispatch_grid(&w.name, blocks, max_dim)?;
        let label = format!("expert mat-vec {} split {i}", w.name);
        let uniform = params_uniform(ctx, &label, &params)?;
        let bufs = [&s.buffer, io.x, io.y, io.ids];
        out.push(build(
            ctx,
            &variant,
            &label,
            &uniform,
            &bufs,
            [gx, gy, slots],
        )?);
    }
    Ok(out)
}

/// The router of `m` rows of logits `[m, n_expert]` into ids and weights `[m, n_used]`.
pub fn router_dispatch(
    ctx: &GpuContext,
    logits: &wgpu::Buffer,
    ids: &wgpu::Buffer,
    weights: &wgpu::Buffer,
    p: MoeParams,
) -> Result<Dispatch, GpuError> {
    if p.n == 0 || p.n > MAX_EXPERT || p.n_used == 0 || p.n_used > p.n {
        return Err(bad_input(
            "router shape",
            format!("1..={MAX_EXPERT} experts, 1..=experts used"),
            format!("{} experts, {} used", p.n, p.n_used),
        ));
    }
    check_f32s("router logits", logits, u64::from(p.m) * u64::from(p.n))?;
    for (what, b) in [("expert ids", ids), ("expert weights", weights)] {
        check_f32s(what, b, u64::from(p.m) * u64::from(p.n_used))?;
    }
    let uniform = params_uniform(ctx, "moe router", &p)?;
    let g = grid(
        ctx,
        "moe router",
        u64::from(p.m).div_ceil(u64::from(WG_SIZE)),
        WG_SIZE,
    )?;
    build(
        ctx,
        &router_variant(),
        "moe router",
        &uniform,
        &[logits, ids, weights],
        g,
    )
}

/// The weighted sum `out [m, d]` of `y [m · n_used, d]` by `weights [m, n_used]`, plus the
/// gated shared expert `(s [m, d], gate logits [m])` where given.
pub fn combine_dispatch(
    ctx: &GpuContext,
    y: &wgpu::Buffer,
    weights: &wgpu::Buffer,
    out: &wgpu::Buffer,
    shared: Option<(&wgpu::Buffer, &wgpu::Buffer)>,
    p: MoeParams,
) -> Result<Dispatch, GpuError> {
    let n = u64::from(p.m) * u64::from(p.n);
    check_f32s("expert outputs", y, n * u64::from(p.n_used))?;
    check_f32s("MoE output", out, n)?;
    let uniform = params_uniform(ctx, "moe combine", &p)?;
    let g = grid(ctx, "moe combine", n.div_ceil(u64::from(WG_SIZE)), WG_SIZE)?;
    let mut bufs = vec![y, weights, out];
    if let Some((s, gate)) = shared {
        check_f32s("shared expert output", s, n)?;
        check_f32s("shared expert gate", gate, u64::from(p.m))?;
        bufs.extend([s, gate]);
    }
    build(
        ctx,
        &combine_variant(shared.is_some()),
        "moe combine",
        &uniform,
        &bufs,
        g,
    )
}
