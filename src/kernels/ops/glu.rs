//! Gated linear units on the GPU (`shaders/glu.wgsl`): gate and up `[n_rows, n_ff]` (separate
//! buffers, flattened to n elements) → y `[n_rows, n_ff]`:
//! [`Glu::Swiglu`] `y = silu(gate) * up`, [`Glu::Geglu`] `y = gelu_tanh(gate) * up`, as
//! ggml_swiglu_split / ggml_geglu_split, and [`Glu::Sigmoid`] `y = sigmoid(gate) * up` (qwen35's
//! attention output gate). Variants: `SWIGLU`, `GEGLU`, `SIGMOID_GATE`.

use crate::gpu::buffers::create_storage;
use crate::gpu::{BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;

use super::{bad_input, build, check_f32s, grid, params_uniform, read, rewrite_params, to_u32};
use super::{upload_f32, write, PARAMS};

/// Invocations per workgroup (the `WG_SIZE` override).
pub const WG_SIZE: u32 = 64;

/// Mirrors `struct Params` of `glu.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GluParams {
    pub n: u32,
    pub _pad: [u32; 3],
}

const _: () = assert!(std::mem::size_of::<GluParams>() == 16);

/// The activation applied to the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Glu {
    /// `silu(g) = g / (1 + exp(-g))`
    Swiglu,
    /// `gelu(g) = 0.5 g (1 + tanh(√(2/π) g (1 + 0.044715 g²)))`
    Geglu,
    /// `sigmoid(g) = 1 / (1 + exp(-g))`: the output gate of qwen35's attention.
    Sigmoid,
}

const BINDINGS: &[BindingSpec] = &[PARAMS, read(1), read(2), write(3)];

impl Glu {
    /// The shader define selecting this activation (`glu.wgsl`, `common/glu_act.wgsl`).
    pub fn define(self) -> &'static str {
        match self {
            Glu::Swiglu => "SWIGLU",
            Glu::Geglu => "GEGLU",
            Glu::Sigmoid => "SIGMOID_GATE",
        }
    }
}

/// The variant of `kind`.
pub fn variant(kind: Glu) -> ShaderVariant {
    ShaderVariant {
        shader: "glu",
        entry_point: "main",
        defines: vec![(kind.define(), String::new())],
        overrides: vec![("WG_SIZE", f64::from(WG_SIZE))],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: BINDINGS,
    }
}

/// Every variant this kernel may use, on any device.
pub fn variants() -> Vec<ShaderVariant> {
    vec![
        variant(Glu::Swiglu),
        variant(Glu::Geglu),
        variant(Glu::Sigmoid),
    ]
}

/// A built GLU over at most `max_n` elements.
#[derive(Debug)]
pub struct GluOp {
    pub dispatch: Dispatch,
    params: GluParams,
    max_n: u32,
}

impl GluOp {
    /// `dst[i] = act(gate[i]) * up[i]` for i < n; the three buffers must be distinct.
    pub fn new(
        ctx: &GpuContext,
        kind: Glu,
        gate: &wgpu::Buffer,
        up: &wgpu::Buffer,
        dst: &wgpu::Buffer,
        n: u32,
    ) -> Result<GluOp, GpuError> {
        for (what, b) in [("GLU gate", gate), ("GLU up", up), ("GLU output", dst)] {
            check_f32s(what, b, u64::from(n))?;
        }
        let params = GluParams { n, _pad: [0; 3] };
        let label = "glu";
        let uniform = params_uniform(ctx, label, &params)?;
        let g = grid(
            ctx,
            label,
            u64::from(n).div_ceil(u64::from(WG_SIZE)),
            WG_SIZE,
        )?;
        let dispatch = build(ctx, &variant(kind), label, &uniform, &[gate, up, dst], g)?;
        Ok(GluOp {
            dispatch,
            params,
            max_n: n,
        })
    }

    /// Computes the first `n` elements from the next submission on (at most the built count).
    pub fn set_len(&mut self, ctx: &GpuContext, n: u32) -> Result<(), GpuError> {
        if n > self.max_n {
            let expected = format!("at most {} (the built length)", self.max_n);
            return Err(bad_input("GLU elements", expected, n));
        }
        self.params.n = n;
        rewrite_params(ctx, &self.dispatch, &self.params)?;
        let groups = u64::from(n).div_ceil(u64::from(WG_SIZE));
        self.dispatch.grid = grid(ctx, "glu", groups, WG_SIZE)?;
        Ok(())
    }

    pub fn params(&self) -> GluParams {
        self.params
    }
}

/// Runs `kind` now on equal-length `gate` and `up`; returns y (same length).
pub fn glu_on_gpu(
    ctx: &GpuContext,
    kind: Glu,
    gate: &[f32],
    up: &[f32],
) -> Result<Vec<f32>, GpuError> {
    if gate.len() != up.len() {
        return Err(bad_input(
            "GLU up",
            format!("{} elements (as gate)", gate.len()),
            up.len(),
        ));
    }
    let n = to_u32("GLU elements", gate.len() as u64)?;
    let g = upload_f32(ctx, "glu gate", gate)?;
    let u = upload_f32(ctx, "glu up", up)?;
    let dst = create_storage(ctx, "glu output", u64::from(n) * 4)?;
    let op = GluOp::new(ctx, kind, &g, &u, &dst, n)?;
    super::run_and_read_f32(ctx, "glu", &[&op.dispatch], &dst, gate.len())
}
