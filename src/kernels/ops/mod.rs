//! Row and elementwise ops of the forward pass, on f32 activations laid out row-major
//! `[n_rows, n_cols]`, each held to the CPU oracle in `crate::reference::ops`:
//!
//! - [`norm`]: RMSNorm with or without a weight (`shaders/norm.wgsl`), batch invariant.
//! - [`rope`]: rotary embedding, normal and NEOX, partial rotary dims, frequency factors
//!   (`shaders/rope.wgsl`).
//! - [`glu`]: SwiGLU and GeGLU on separate gate/up buffers (`shaders/glu.wgsl`).
//! - [`binary`]: add (same shape or a broadcast row) and scale (`shaders/binary.wgsl`).
//! - [`delta`]: the Gated DeltaNet conv1d and delta rule of hybrid layers
//!   (`shaders/ssm_conv.wgsl`, `shaders/delta_rule.wgsl`), batch invariant.
//! - [`softmax`]: softmax over rows with scale and additive mask (`shaders/softmax.wgsl`), batch
//!   invariant.
//! - [`moe`]: the mixture-of-experts router, expert mat-vec by device ids and weighted sum
//!   (`shaders/moe/*.wgsl`), batch invariant.
//! - [`select`]: argmax and top-k over a vocabulary, two-stage (`shaders/argmax.wgsl`,
//!   `shaders/topk.wgsl`).
//! - [`logprob`]: each logits row's log-sum-exp and the logit of a chosen column
//!   (`shaders/logprob.wgsl`), for log-probabilities beside the top k.
//!
//! Each op has a builder (`RmsNorm::new`, `Rope::new`, …) that checks the shapes against the
//! buffers once and returns recorded-ready [`Dispatch`]es (bind group and params uniform built
//! once; a `set_*` method rewrites the uniform and the grid for a smaller row/token count between
//! steps), and a "run now" function (`rms_norm_on_gpu`, …) that uploads host slices, submits and
//! reads back, for tests and one-off use. Buffers are bound whole; shapes in elements.
//! `docs/shaders-ops.md` lists every shader, variant, binding and params struct.

pub mod binary;
pub mod copy;
pub mod delta;
pub mod dspark;
pub mod glu;
pub mod logprob;
pub mod mask;
pub mod moe;
pub mod moe_block;
pub mod norm;
pub mod rope;
pub mod select;
pub mod softmax;

use crate::gpu::buffers::{create_storage_init, create_uniform, read_back, upload};
use crate::gpu::{BindingKind, BindingSpec, GpuContext, GpuError, ShaderVariant};

use super::launch::{bind_group, submit, Dispatch};
use super::{dispatch_grid, spec};

/// Every variant of this family.
pub fn variants() -> Vec<ShaderVariant> {
    let mut all = norm::variants();
    all.extend(rope::variants());
    all.extend(glu::variants());
    all.extend(binary::variants());
    all.extend(softmax::variants());
    all.extend(select::variants());
    all.extend(copy::variants());
    all.extend(dspark::variants());
    all.extend(delta::variants());
    all.extend(moe::variants());
    all.extend(mask::variants());
    all.extend(logprob::variants());
    all
}

/// Where an op reads its main input and writes its output.
#[derive(Debug, Clone, Copy)]
pub enum Io<'a> {
    /// Read and overwrite one buffer (bound `read_write` at binding 2).
    InPlace(&'a wgpu::Buffer),
    /// Read `src` (binding 1), write `dst` (binding 2): two different buffers.
    Out {
        src: &'a wgpu::Buffer,
        dst: &'a wgpu::Buffer,
    },
}

impl<'a> Io<'a> {
    pub fn in_place(&self) -> bool {
        matches!(self, Io::InPlace(_))
    }
    /// The buffers to bind, in binding order (src then dst, or the one in-place buffer).
    fn buffers(&self) -> Vec<&'a wgpu::Buffer> {
        match *self {
            Io::InPlace(b) => vec![b],
            Io::Out { src, dst } => vec![src, dst],
        }
    }
    /// Checks that every buffer holds `n` f32.
    fn check(&self, what: &str, n: u64) -> Result<(), GpuError> {
        match *self {
            Io::InPlace(b) => check_f32s(&format!("{what} (in place)"), b, n),
            Io::Out { src, dst } => {
                check_f32s(&format!("{what} input"), src, n)?;
                check_f32s(&format!("{what} output"), dst, n)
            }
        }
    }
}

/// Binding 0, the params uniform, in every shader of the family.
const PARAMS: BindingSpec = spec(0, BindingKind::Uniform);
const fn read(binding: u32) -> BindingSpec {
    spec(binding, BindingKind::StorageRead)
}
const fn write(binding: u32) -> BindingSpec {
    spec(binding, BindingKind::StorageReadWrite)
}

/// Bindings of the shaders laid out as 0 params, 1 src, 2 dst, 3 an optional extra input.
/// Index: `[in_place as usize][extra as usize]`.
const IO_BINDINGS: [[&[BindingSpec]; 2]; 2] = [
    [
        &[PARAMS, read(1), write(2)],
        &[PARAMS, read(1), write(2), read(3)],
    ],
    [&[PARAMS, write(2)], &[PARAMS, write(2), read(3)]],
];

/// The variant of a one-workgroup-per-row reduction laid out as [`IO_BINDINGS`] (`norm`,
/// `softmax`): `extra_define` and binding 3 when `extra`, then `IN_PLACE`, `USE_SUBGROUPS`.
fn row_variant(
    shader: &'static str,
    extra_define: &'static str,
    wg_size: u32,
    extra: bool,
    in_place: bool,
    subgroups: bool,
) -> ShaderVariant {
    let defines = [
        (extra, extra_define),
        (in_place, "IN_PLACE"),
        (subgroups, "USE_SUBGROUPS"),
    ]
    .into_iter()
    .filter(|&(on, _)| on)
    .map(|(_, name)| (name, String::new()))
    .collect();
    ShaderVariant {
        shader,
        entry_point: "main",
        defines,
        overrides: vec![("WG_SIZE", f64::from(wg_size))],
        requires_f16: false,
        requires_subgroups: subgroups,
        requires_int64: false,
        bindings: IO_BINDINGS[usize::from(in_place)][usize::from(extra)],
    }
}

/// `variant(extra, in_place, subgroups)` for all eight combinations (the variants of a
/// [`row_variant`] kernel).
fn row_variants(variant: impl Fn(bool, bool, bool) -> ShaderVariant) -> Vec<ShaderVariant> {
    let mut out = Vec::new();
    for extra in [false, true] {
        for in_place in [false, true] {
            for subgroups in [false, true] {
                out.push(variant(extra, in_place, subgroups));
            }
        }
    }
    out
}

/// A one-workgroup-per-row dispatch over `n_rows` rows: params uniform, grid and bind group.
fn build_rows<P: bytemuck::Pod>(
    ctx: &GpuContext,
    variant: &ShaderVariant,
    label: &str,
    params: &P,
    buffers: &[&wgpu::Buffer],
    n_rows: u32,
    wg_size: u32,
) -> Result<Dispatch, GpuError> {
    let uniform = params_uniform(ctx, label, params)?;
    let g = grid(ctx, label, u64::from(n_rows), wg_size)?;
    build(ctx, variant, label, &uniform, buffers, g)
}

/// [`GpuError::BadInput`] naming `what` unless `n_rows` is at most the built `max_rows`.
fn check_rows(what: &str, n_rows: u32, max_rows: u32) -> Result<(), GpuError> {
    if n_rows > max_rows {
        let expected = format!("at most {max_rows} (the built row count)");
        return Err(bad_input(what, expected, n_rows));
    }
    Ok(())
}

pub(crate) fn bad_input(
    what: &str,
    expected: impl Into<String>,
    actual: impl ToString,
) -> GpuError {
    GpuError::BadInput {
        what: what.to_string(),
        expected: expected.into(),
        actual: actual.to_string(),
    }
}

/// `v` as u32, or [`GpuError::BadInput`] naming `what`.
pub(crate) fn to_u32(what: &str, v: u64) -> Result<u32, GpuError> {
    u32::try_from(v).map_err(|_| bad_input(what, "at most 2^32 - 1", v))
}

/// `(n_rows, n_cols)` of a row-major slice of `len` elements with `n_cols` columns.
pub(crate) fn rows_of(len: usize, n_cols: usize, what: &str) -> Result<(u32, u32), GpuError> {
    if n_cols == 0 || !len.is_multiple_of(n_cols) {
        let expected = format!("a whole number of rows of {n_cols} columns");
        return Err(bad_input(what, expected, format!("{len} elements")));
    }
    Ok((
        to_u32(&format!("{what} rows"), (len / n_cols) as u64)?,
        to_u32(&format!("{what} columns"), n_cols as u64)?,
    ))
}

/// Checks that `buffer` holds at least `n` 4-byte elements.
pub(crate) fn check_f32s(what: &str, buffer: &wgpu::Buffer, n: u64) -> Result<(), GpuError> {
    let need = n.saturating_mul(4);
    if buffer.size() < need {
        return Err(bad_input(
            what,
            format!("a buffer of at least {need} bytes ({n} elements)"),
            format!("{} bytes", buffer.size()),
        ));
    }
    Ok(())
}

/// A grid of `groups` workgroups (2D past the per-dimension limit) whose flat invocation index
/// `flat_group * wg_size + lid` stays below 2^32.
pub(crate) fn grid(
    ctx: &GpuContext,
    what: &str,
    groups: u64,
    wg_size: u32,
) -> Result<[u32; 3], GpuError> {
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    let (x, y) = dispatch_grid(what, groups, max_dim)?;
    let invocations = u64::from(x) * u64::from(y) * u64::from(wg_size);
    if invocations > u64::from(u32::MAX) {
        return Err(bad_input(what, "fewer than 2^32 invocations", invocations));
    }
    Ok([x, y, 1])
}

/// Builds a dispatch of `variant` (entry point included) binding `uniform` then `buffers` in
/// the variant's binding order.
pub(crate) fn build(
    ctx: &GpuContext,
    variant: &ShaderVariant,
    label: &str,
    uniform: &wgpu::Buffer,
    buffers: &[&wgpu::Buffer],
    grid: [u32; 3],
) -> Result<Dispatch, GpuError> {
    let pipeline = ctx.pipelines().get(ctx, variant)?;
    let mut resources = vec![uniform.as_entire_binding()];
    resources.extend(buffers.iter().map(|b| b.as_entire_binding()));
    let bind_group = bind_group(ctx, &pipeline, label, &resources)?;
    Ok(Dispatch {
        label: label.to_string(),
        pipeline,
        bind_group,
        params: Some(uniform.clone()),
        grid,
    })
}

/// A params uniform holding `params`.
pub(crate) fn params_uniform<P: bytemuck::Pod>(
    ctx: &GpuContext,
    label: &str,
    params: &P,
) -> Result<wgpu::Buffer, GpuError> {
    create_uniform(ctx, &format!("{label} params"), params)
}

/// Rewrites the params uniform of `dispatch` (through the queue: takes effect for work
/// submitted after this call).
pub(crate) fn rewrite_params<P: bytemuck::Pod>(
    ctx: &GpuContext,
    dispatch: &Dispatch,
    params: &P,
) -> Result<(), GpuError> {
    let uniform = dispatch
        .params
        .as_ref()
        .ok_or_else(|| bad_input(&dispatch.label, "a dispatch with a params uniform", "none"))?;
    upload(ctx, &dispatch.label, uniform, 0, bytemuck::bytes_of(params))
}

/// Uploads `data` to a new storage buffer.
pub(crate) fn upload_f32(
    ctx: &GpuContext,
    what: &str,
    data: &[f32],
) -> Result<wgpu::Buffer, GpuError> {
    create_storage_init(ctx, what, bytemuck::cast_slice(data))
}

/// Submits `dispatches` in one pass and reads `n` 4-byte words of `out` back.
pub(crate) fn run_and_read(
    ctx: &GpuContext,
    label: &str,
    dispatches: &[&Dispatch],
    out: &wgpu::Buffer,
    n: usize,
) -> Result<Vec<[u8; 4]>, GpuError> {
    submit(ctx, label, dispatches)?;
    let bytes = read_back(ctx, out, 0, n as u64 * 4)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| [c[0], c[1], c[2], c[3]])
        .collect())
}

/// [`run_and_read`] as f32.
pub(crate) fn run_and_read_f32(
    ctx: &GpuContext,
    label: &str,
    dispatches: &[&Dispatch],
    out: &wgpu::Buffer,
    n: usize,
) -> Result<Vec<f32>, GpuError> {
    let words = run_and_read(ctx, label, dispatches, out, n)?;
    Ok(words.into_iter().map(f32::from_le_bytes).collect())
}

/// Host input for the "run now" functions: `(src, dst)` storage buffers holding `x` (one
/// buffer when in place), and the [`Io`] over them.
pub(crate) struct HostIo {
    src: wgpu::Buffer,
    dst: Option<wgpu::Buffer>,
}

impl HostIo {
    pub(crate) fn new(
        ctx: &GpuContext,
        what: &str,
        x: &[f32],
        in_place: bool,
    ) -> Result<HostIo, GpuError> {
        let src = upload_f32(ctx, what, x)?;
        let dst = if in_place {
            None
        } else {
            Some(crate::gpu::buffers::create_storage(
                ctx,
                &format!("{what} output"),
                x.len() as u64 * 4,
            )?)
        };
        Ok(HostIo { src, dst })
    }
    pub(crate) fn io(&self) -> Io<'_> {
        match &self.dst {
            None => Io::InPlace(&self.src),
            Some(dst) => Io::Out {
                src: &self.src,
                dst,
            },
        }
    }
    /// The buffer the op writes.
    pub(crate) fn out(&self) -> &wgpu::Buffer {
        self.dst.as_ref().unwrap_or(&self.src)
    }
}
