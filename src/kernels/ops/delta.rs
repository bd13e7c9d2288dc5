//! The Gated DeltaNet kernels of hybrid (`qwen35`) layers, held to `crate::reference`'s hybrid
//! forward:
//!
//! - [`SsmConv`] (`shaders/ssm_conv.wgsl`): the causal depthwise conv1d over the layer's conv
//!   state and this step's pre-conv rows `[m, conv_dim]`, then SiLU; updates the state.
//! - [`DeltaRule`] (`shaders/delta_rule.wgsl`): q/k L2 norms, `g = softplus(alpha + dt) · a`,
//!   `beta = sigmoid(b)` and the delta-rule recurrence per v head, token by token; updates the
//!   state `[n_v, head_v, head_k]` and writes `o [m, value_dim]` (before the gated norm).
//!
//! Both run one sequence's rows of a step in order inside one dispatch, so each row's arithmetic
//! is the same at any row count: a verify batch gives every row the bits of decoding it alone.
//! A [`Segment`] says which rows (`row0..row0 + n_rows` of the step's buffers: a batched step
//! runs one dispatch per sequence, each bound to that sequence's state) and what the state does
//! around them inside the same dispatch: start from zeros (position 0) or from the checkpoint (a
//! rollback), and copy itself into the checkpoint before a given row. No copy or clear of its
//! own is recorded for those.

use crate::gpu::{BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;

use super::PARAMS;
use super::{bad_input, build, check_f32s, grid, params_uniform, read, rewrite_params, write};

/// Invocations per workgroup of the conv (one channel each).
pub const CONV_WG: u32 = 64;
/// Largest conv kernel (`win` and `taps` arrays of `ssm_conv.wgsl`).
pub const MAX_D_CONV: u32 = 16;
/// Largest head_k / head_v the delta rule runs (`K_MAX` of the `STATE_256` variant).
pub const MAX_HEAD: u32 = 256;

/// Mirrors `struct Params` of `ssm_conv.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SsmConvParams {
    pub n_rows: u32,
    pub conv_dim: u32,
    pub d_conv: u32,
    pub row0: u32,
    pub init: u32,
    pub ckpt_row: u32,
    pub _pad: [u32; 2],
}

const _: () = assert!(std::mem::size_of::<SsmConvParams>() == 32);

/// Mirrors `struct Params` of `delta_rule.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DeltaRuleParams {
    pub n_rows: u32,
    pub n_k: u32,
    pub n_v: u32,
    pub head_k: u32,
    pub head_v: u32,
    pub conv_dim: u32,
    pub eps: f32,
    pub scale: f32,
    pub row0: u32,
    pub init: u32,
    pub ckpt_row: u32,
    pub _pad: u32,
}

const _: () = assert!(std::mem::size_of::<DeltaRuleParams>() == 48);

/// Where a segment's state comes from (`init` of both shaders).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateInit {
    /// The sequence's state as the last step left it.
    #[default]
    Carry = 0,
    /// Zeros: the segment starts at position 0.
    Zero = 1,
    /// The sequence's checkpoint: a rollback.
    Checkpoint = 2,
}

/// One sequence's rows of a step, as the conv and the delta rule run them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// First row in the step's buffers.
    pub row0: u32,
    pub n_rows: u32,
    pub init: StateInit,
    /// Copy the state into the checkpoint before this row (`n_rows`: after the last one).
    pub ckpt_row: Option<u32>,
}

impl Segment {
    /// `m` rows from row 0 carrying the state, no checkpoint (a single sequence's step).
    pub fn rows(m: u32) -> Segment {
        Segment {
            row0: 0,
            n_rows: m,
            init: StateInit::Carry,
            ckpt_row: None,
        }
    }

    /// `(row0, init, ckpt_row)` as the shaders read them, after checking the rows fit in
    /// `max_rows`.
    fn words(&self, what: &str, max_rows: u32) -> Result<(u32, u32, u32), GpuError> {
        let end = self.row0.checked_add(self.n_rows);
        let ckpt = self.ckpt_row.unwrap_or(u32::MAX);
        if end.is_none_or(|e| e > max_rows) || (ckpt != u32::MAX && ckpt > self.n_rows) {
            let actual = format!(
                "rows {}..+{} (checkpoint before {:?})",
                self.row0, self.n_rows, self.ckpt_row
            );
            return Err(bad_input(what, format!("within {max_rows} rows"), actual));
        }
        Ok((self.row0, self.init as u32, ckpt))
    }
}

const CONV_BINDINGS: &[BindingSpec] = &[PARAMS, read(1), read(2), write(3), write(4), write(5)];
const RULE_BINDINGS: &[BindingSpec] = &[
    PARAMS,
    read(1),
    read(2),
    read(3),
    read(4),
    read(5),
    write(6),
    write(7),
    write(8),
];

/// The conv variant.
pub fn conv_variant() -> ShaderVariant {
    ShaderVariant {
        shader: "ssm_conv",
        entry_point: "main",
        defines: Vec::new(),
        overrides: vec![("WG_SIZE", f64::from(CONV_WG))],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: CONV_BINDINGS,
    }
}

/// The delta-rule variant for heads of `head_k` (state column in registers of 128 or 256 floats,
/// loops to the compile-time `HEAD_K`; one invocation per v column, [`RULE_WG`] columns per
/// workgroup).
pub fn rule_variant(head_k: u32) -> ShaderVariant {
    let defines = if head_k > 128 {
        vec![("STATE_256", String::new())]
    } else {
        Vec::new()
    };
    ShaderVariant {
        shader: "delta_rule",
        entry_point: "main",
        defines,
        overrides: vec![
            ("WG_SIZE", f64::from(RULE_WG)),
            ("HEAD_K", f64::from(head_k)),
        ],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: RULE_BINDINGS,
    }
}

/// v columns per delta-rule workgroup: a 128-wide v head spreads over 4 workgroups.
pub const RULE_WG: u32 = 32;

/// The delta rule's grid: (v heads, workgroups per head).
pub fn rule_grid(n_v: u32, head_v: u32) -> [u32; 3] {
    [n_v, head_v.div_ceil(RULE_WG).max(1), 1]
}

/// Every variant of these kernels (the registry validates them).
pub fn variants() -> Vec<ShaderVariant> {
    let mut all = vec![conv_variant()];
    for k in [16, 128, 256] {
        all.push(rule_variant(k));
    }
    all
}

/// A built conv over at most `max_rows` rows.
#[derive(Debug)]
pub struct SsmConv {
    pub dispatch: Dispatch,
    params: SsmConvParams,
    max_rows: u32,
}

/// The buffers of one conv: pre-conv rows `x [m, conv_dim]`, taps `w [conv_dim, d_conv]`,
/// `state` and its checkpoint `ckpt [conv_dim, d_conv − 1]`, output `y [m, conv_dim]`.
#[derive(Debug, Clone, Copy)]
pub struct ConvIo<'a> {
    pub x: &'a wgpu::Buffer,
    pub w: &'a wgpu::Buffer,
    pub state: &'a wgpu::Buffer,
    pub ckpt: &'a wgpu::Buffer,
    pub y: &'a wgpu::Buffer,
}

impl SsmConv {
    pub fn new(
        ctx: &GpuContext,
        io: ConvIo<'_>,
        conv_dim: u32,
        d_conv: u32,
        max_rows: u32,
    ) -> Result<SsmConv, GpuError> {
        if !(2..=MAX_D_CONV).contains(&d_conv) {
            return Err(bad_input("conv kernel", "2 to 16 taps", d_conv));
        }
        let c = u64::from(conv_dim);
        let rows = u64::from(max_rows) * c;
        check_f32s("conv input", io.x, rows)?;
        check_f32s("conv taps", io.w, c * u64::from(d_conv))?;
        check_f32s("conv state", io.state, c * u64::from(d_conv - 1))?;
        check_f32s("conv checkpoint", io.ckpt, c * u64::from(d_conv - 1))?;
        check_f32s("conv output", io.y, rows)?;
        let params = SsmConvParams {
            n_rows: max_rows,
            conv_dim,
            d_conv,
            row0: 0,
            init: 0,
            ckpt_row: u32::MAX,
            _pad: [0; 2],
        };
        let label = "ssm conv";
        let uniform = params_uniform(ctx, label, &params)?;
        let g = grid(ctx, label, c.div_ceil(u64::from(CONV_WG)), CONV_WG)?;
        let buffers = [io.x, io.w, io.state, io.y, io.ckpt];
        let dispatch = build(ctx, &conv_variant(), label, &uniform, &buffers, g)?;
        Ok(SsmConv {
            dispatch,
            params,
            max_rows,
        })
    }

    /// Runs `m` rows from row 0 from the next submission on.
    pub fn set_rows(&mut self, ctx: &GpuContext, m: u32) -> Result<(), GpuError> {
        self.set_segment(ctx, Segment::rows(m))
    }

    /// Runs `seg` from the next submission on.
    pub fn set_segment(&mut self, ctx: &GpuContext, seg: Segment) -> Result<(), GpuError> {
        let (row0, init, ckpt_row) = seg.words("conv rows", self.max_rows)?;
        let p = SsmConvParams {
            n_rows: seg.n_rows,
            row0,
            init,
            ckpt_row,
            ..self.params
        };
        if p != self.params {
            self.params = p;
            rewrite_params(ctx, &self.dispatch, &self.params)?;
        }
        Ok(())
    }
}

/// The buffers of one delta rule (shapes in [`DeltaRule`]'s module header).
#[derive(Debug, Clone, Copy)]
pub struct RuleIo<'a> {
    pub y: &'a wgpu::Buffer,
    pub alpha: &'a wgpu::Buffer,
    pub beta: &'a wgpu::Buffer,
    pub dt: &'a wgpu::Buffer,
    pub a: &'a wgpu::Buffer,
    pub state: &'a wgpu::Buffer,
    pub ckpt: &'a wgpu::Buffer,
    pub out: &'a wgpu::Buffer,
}

/// The DeltaNet head shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuleShape {
    pub n_k: u32,
    pub n_v: u32,
    pub head_k: u32,
    pub head_v: u32,
    /// The L2-norm epsilon (the model's RMS epsilon).
    pub eps: f32,
}

/// A built delta rule over at most `max_rows` rows.
#[derive(Debug)]
pub struct DeltaRule {
    pub dispatch: Dispatch,
    params: DeltaRuleParams,
    max_rows: u32,
}

impl DeltaRule {
    pub fn new(
        ctx: &GpuContext,
        io: RuleIo<'_>,
        shape: RuleShape,
        max_rows: u32,
    ) -> Result<DeltaRule, GpuError> {
        let RuleShape {
            n_k,
            n_v,
            head_k,
            head_v,
            eps,
        } = shape;
        if n_k == 0 || n_v == 0 || n_v % n_k != 0 {
            let actual = format!("{n_v} v heads over {n_k} k heads");
            return Err(bad_input(
                "delta rule heads",
                "v heads a multiple of k heads",
                actual,
            ));
        }
        if head_k == 0 || head_k > MAX_HEAD || head_v == 0 || head_v > MAX_HEAD {
            let actual = format!("head_k {head_k}, head_v {head_v}");
            return Err(bad_input("delta rule head sizes", "1 to 256", actual));
        }
        let key_dim = u64::from(n_k * head_k);
        let value_dim = u64::from(n_v * head_v);
        let conv_dim = 2 * key_dim + value_dim;
        let m = u64::from(max_rows);
        check_f32s("delta rule input", io.y, m * conv_dim)?;
        check_f32s("delta rule alpha", io.alpha, m * u64::from(n_v))?;
        check_f32s("delta rule beta", io.beta, m * u64::from(n_v))?;
        check_f32s("delta rule dt bias", io.dt, u64::from(n_v))?;
        check_f32s("delta rule a", io.a, u64::from(n_v))?;
        check_f32s("delta rule state", io.state, value_dim * u64::from(head_k))?;
        check_f32s(
            "delta rule checkpoint",
            io.ckpt,
            value_dim * u64::from(head_k),
        )?;
        check_f32s("delta rule output", io.out, m * value_dim)?;
        let params = DeltaRuleParams {
            n_rows: max_rows,
            n_k,
            n_v,
            head_k,
            head_v,
            conv_dim: u32::try_from(conv_dim)
                .map_err(|_| bad_input("conv width", "below 2^32", conv_dim))?,
            eps,
            scale: 1.0 / (head_k as f32).sqrt(),
            row0: 0,
            init: 0,
            ckpt_row: u32::MAX,
            _pad: 0,
        };
        let label = "delta rule";
        let uniform = params_uniform(ctx, label, &params)?;
        let buffers = [
            io.y, io.alpha, io.beta, io.dt, io.a, io.state, io.out, io.ckpt,
        ];
        let variant = rule_variant(head_k);
        let g = rule_grid(n_v, head_v);
        let dispatch = build(ctx, &variant, label, &uniform, &buffers, g)?;
        Ok(DeltaRule {
            dispatch,
            params,
            max_rows,
        })
    }

    /// Runs `m` rows from row 0 from the next submission on.
    pub fn set_rows(&mut self, ctx: &GpuContext, m: u32) -> Result<(), GpuError> {
        self.set_segment(ctx, Segment::rows(m))
    }

    /// Runs `seg` from the next submission on.
    pub fn set_segment(&mut self, ctx: &GpuContext, seg: Segment) -> Result<(), GpuError> {
        let (row0, init, ckpt_row) = seg.words("delta rule rows", self.max_rows)?;
        let p = DeltaRuleParams {
            n_rows: seg.n_rows,
            row0,
            init,
            ckpt_row,
            ..self.params
        };
        if p != self.params {
            self.params = p;
            rewrite_params(ctx, &self.dispatch, &self.params)?;
        }
        Ok(())
    }
}
