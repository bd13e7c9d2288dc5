//! Elementwise add and scale on the GPU (`shaders/binary.wgsl`), any f32 tensor flattened to
//! n elements:
//! [`Binary::Add`] `y[i] = a[i] + b[i % n_b]` (b the same shape as a, `n_b = n`, or one row
//! `[n_cols]` broadcast over a `[n / n_cols, n_cols]`, `n_b = n_cols`);
//! [`Binary::Scale`] `y[i] = a[i] * s`; [`Binary::Softcap`] `y[i] = c · tanh(a[i] · (1/c))`
//! (Gemma's final logit soft-capping, as llama.cpp's scale, tanh, scale). In place (`a`
//! overwritten) or out of place. Variants: `OP_ADD` / `OP_SCALE` / `OP_SOFTCAP`, `IN_PLACE`.

use crate::gpu::{GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;

use super::{bad_input, build, check_f32s, grid, params_uniform, rewrite_params, to_u32};
use super::{upload_f32, HostIo, Io, IO_BINDINGS};

/// Invocations per workgroup (the `WG_SIZE` override).
pub const WG_SIZE: u32 = 64;

/// Mirrors `struct Params` of `binary.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BinaryParams {
    pub n: u32,
    /// Add: elements of b (>= 1, divides n); 1 for scale.
    pub n_b: u32,
    /// Scale: the factor; softcap: the cap c; 1 for add.
    pub scale: f32,
    pub _pad: u32,
}

const _: () = assert!(std::mem::size_of::<BinaryParams>() == 16);

/// The op and its second operand.
#[derive(Debug, Clone, Copy)]
pub enum Binary<'a> {
    /// `+ b[i % n_b]`, b holding n_b f32.
    Add { b: &'a wgpu::Buffer, n_b: u32 },
    /// `* s`
    Scale(f32),
    /// `c · tanh(x · (1/c))`, c > 0.
    Softcap(f32),
}

impl Binary<'_> {
    /// The shader define of the op.
    fn define(&self) -> &'static str {
        match self {
            Binary::Add { .. } => "OP_ADD",
            Binary::Scale(_) => "OP_SCALE",
            Binary::Softcap(_) => "OP_SOFTCAP",
        }
    }
}

/// The variant for add (`true`) or scale, in place or not.
pub fn variant(add: bool, in_place: bool) -> ShaderVariant {
    variant_of(if add { "OP_ADD" } else { "OP_SCALE" }, in_place)
}

/// The variant of op `define` (`OP_ADD`, `OP_SCALE`, `OP_SOFTCAP`), in place or not.
fn variant_of(op: &'static str, in_place: bool) -> ShaderVariant {
    let add = op == "OP_ADD";
    let mut defines = vec![(op, String::new())];
    if in_place {
        defines.push(("IN_PLACE", String::new()));
    }
    ShaderVariant {
        shader: "binary",
        entry_point: "main",
        defines,
        overrides: vec![("WG_SIZE", f64::from(WG_SIZE))],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: IO_BINDINGS[usize::from(in_place)][usize::from(add)],
    }
}

/// Every variant this kernel may use, on any device.
pub fn variants() -> Vec<ShaderVariant> {
    let mut out = Vec::new();
    for op in ["OP_ADD", "OP_SCALE", "OP_SOFTCAP"] {
        for in_place in [false, true] {
            out.push(variant_of(op, in_place));
        }
    }
    out
}

/// A built add or scale over at most `max_n` elements.
#[derive(Debug)]
pub struct BinaryOp {
    pub dispatch: Dispatch,
    params: BinaryParams,
    max_n: u32,
}

fn groups(n: u32) -> u64 {
    u64::from(n).div_ceil(u64::from(WG_SIZE))
}

impl BinaryOp {
    /// `op` over the first `n` elements of `io`.
    pub fn new(ctx: &GpuContext, io: Io<'_>, op: Binary<'_>, n: u32) -> Result<BinaryOp, GpuError> {
        io.check("add/scale a", u64::from(n))?;
        let mut buffers = io.buffers();
        let params = match op {
            Binary::Add { b, n_b } => {
                if n_b == 0 || !n.is_multiple_of(n_b) {
                    let expected = format!("a divisor of n = {n}, at least 1");
                    return Err(bad_input("add: elements of b", expected, n_b));
                }
                check_f32s("add b", b, u64::from(n_b))?;
                buffers.push(b);
                BinaryParams {
                    n,
                    n_b,
                    scale: 1.0,
                    _pad: 0,
                }
            }
            Binary::Scale(s) => BinaryParams {
                n,
                n_b: 1,
                scale: s,
                _pad: 0,
            },
            Binary::Softcap(c) => {
                if !(c.is_finite() && c > 0.0) {
                    return Err(bad_input("softcap cap", "finite and > 0", c));
                }
                BinaryParams {
                    n,
                    n_b: 1,
                    scale: c,
                    _pad: 0,
                }
            }
        };
        let label = match op {
            Binary::Add { .. } => "add",
            Binary::Scale(_) => "scale",
            Binary::Softcap(_) => "softcap",
        };
        let uniform = params_uniform(ctx, label, &params)?;
        let g = grid(ctx, label, groups(n), WG_SIZE)?;
        let dispatch = build(
            ctx,
            &variant_of(op.define(), io.in_place()),
            label,
            &uniform,
            &buffers,
            g,
        )?;
        Ok(BinaryOp {
            dispatch,
            params,
            max_n: n,
        })
    }

    /// From the next submission on: the first `n` elements (at most the built count; for add,
    /// still a multiple of n_b).
    pub fn set_len(&mut self, ctx: &GpuContext, n: u32) -> Result<(), GpuError> {
        if n > self.max_n || !n.is_multiple_of(self.params.n_b) {
            let expected = format!(
                "at most {} (the built length), a multiple of {}",
                self.max_n, self.params.n_b
            );
            return Err(bad_input("add/scale elements", expected, n));
        }
        self.params.n = n;
        rewrite_params(ctx, &self.dispatch, &self.params)?;
        self.dispatch.grid = grid(ctx, &self.dispatch.label, groups(n), WG_SIZE)?;
        Ok(())
    }

    /// Sets the scale factor (scale ops) from the next submission on.
    pub fn set_scale(&mut self, ctx: &GpuContext, s: f32) -> Result<(), GpuError> {
        self.params.scale = s;
        rewrite_params(ctx, &self.dispatch, &self.params)
    }

    pub fn params(&self) -> BinaryParams {
        self.params
    }
}

/// Runs `a + b` now, b of length `a.len()` or a row broadcast (length dividing `a.len()`).
pub fn add_on_gpu(
    ctx: &GpuContext,
    a: &[f32],
    b: &[f32],
    in_place: bool,
) -> Result<Vec<f32>, GpuError> {
    let n = to_u32("add elements", a.len() as u64)?;
    let n_b = to_u32("add: elements of b", b.len() as u64)?;
    let host = HostIo::new(ctx, "add a", a, in_place)?;
    let b_buf = upload_f32(ctx, "add b", b)?;
    let op = BinaryOp::new(ctx, host.io(), Binary::Add { b: &b_buf, n_b }, n)?;
    super::run_and_read_f32(ctx, "add", &[&op.dispatch], host.out(), a.len())
}

/// Runs `a * s` now.
pub fn scale_on_gpu(
    ctx: &GpuContext,
    a: &[f32],
    s: f32,
    in_place: bool,
) -> Result<Vec<f32>, GpuError> {
    let n = to_u32("scale elements", a.len() as u64)?;
    let host = HostIo::new(ctx, "scale a", a, in_place)?;
    let op = BinaryOp::new(ctx, host.io(), Binary::Scale(s), n)?;
    super::run_and_read_f32(ctx, "scale", &[&op.dispatch], host.out(), a.len())
}
