//! What log-probabilities need of logits rows besides their top k ([`super::select`]): each
//! row's log-sum-exp and the logit of one chosen column (`shaders/logprob.wgsl`), so
//! `log p(c) = logit(c) - lse` with nothing of the vocabulary read back.
//!
//! Input logits `[n_rows, n_cols]` f32 and targets `[n_rows]` u32 (a column, or
//! [`NO_TARGET`]); output `[n_rows, 2]` f32: `(lse, logit of the target)` (0 without one).
//! One workgroup per row; the result matches an f64 log-sum-exp within float rounding
//! (`tests/kernels_ops_select.rs`).

use crate::gpu::buffers::{create_storage, read_back, upload};
use crate::gpu::{GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;

use super::{bad_input, build_rows, check_f32s, read, rewrite_params, rows_of, write, PARAMS};

/// Invocations per workgroup (`WG_SIZE` of the shader).
pub const WG_SIZE: u32 = 64;
/// A row without a column asked for.
pub const NO_TARGET: u32 = u32::MAX;

/// Mirrors `struct Params` of `logprob.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct LogprobParams {
    pub n_rows: u32,
    pub n_cols: u32,
    pub _pad: [u32; 2],
}

const _: () = assert!(std::mem::size_of::<LogprobParams>() == 16);

const BINDINGS: &[crate::gpu::BindingSpec] = &[PARAMS, read(1), read(2), write(3)];

/// The one variant.
pub fn variant() -> ShaderVariant {
    ShaderVariant {
        shader: "logprob",
        entry_point: "main",
        defines: vec![],
        overrides: vec![],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: BINDINGS,
    }
}

pub fn variants() -> Vec<ShaderVariant> {
    vec![variant()]
}

/// The op over a logits buffer, built for at most `max_rows` rows, with its targets and output
/// buffers.
#[derive(Debug)]
pub struct RowLogprob {
    pub dispatch: Dispatch,
    /// Targets `[max_rows]` u32 (written by [`RowLogprob::set`]).
    pub targets: wgpu::Buffer,
    /// `[max_rows, 2]` f32: (lse, target logit).
    pub out: wgpu::Buffer,
    params: LogprobParams,
    max_rows: u32,
}

impl RowLogprob {
    pub fn new(
        ctx: &GpuContext,
        logits: &wgpu::Buffer,
        max_rows: u32,
        n_cols: u32,
    ) -> Result<RowLogprob, GpuError> {
        if max_rows == 0 || n_cols == 0 {
            let actual = format!("{max_rows} × {n_cols}");
            return Err(bad_input(
                "logprob rows × columns",
                "at least 1 × 1",
                actual,
            ));
        }
        check_f32s(
            "logprob logits",
            logits,
            u64::from(max_rows) * u64::from(n_cols),
        )?;
        let params = LogprobParams {
            n_rows: max_rows,
            n_cols,
            _pad: [0; 2],
        };
        let targets = create_storage(ctx, "logprob targets", u64::from(max_rows) * 4)?;
        let out = create_storage(ctx, "logprob out", u64::from(max_rows) * 8)?;
        let dispatch = build_rows(
            ctx,
            &variant(),
            "logprob",
            &params,
            &[logits, &targets, &out],
            max_rows,
            WG_SIZE,
        )?;
        Ok(RowLogprob {
            dispatch,
            targets,
            out,
            params,
            max_rows,
        })
    }

    /// Uploads `targets` (one per row) and runs over the first `targets.len()` rows from the
    /// next submission on.
    pub fn set(&mut self, ctx: &GpuContext, targets: &[u32]) -> Result<(), GpuError> {
        let n = targets.len();
        if n == 0 || n > self.max_rows as usize {
            let expected = format!("1..={} targets", self.max_rows);
            return Err(bad_input("logprob rows", expected, n));
        }
        upload(
            ctx,
            "logprob targets",
            &self.targets,
            0,
            bytemuck::cast_slice(targets),
        )?;
        if n as u32 != self.params.n_rows {
            self.params.n_rows = n as u32;
            rewrite_params(ctx, &self.dispatch, &self.params)?;
            self.dispatch.grid = super::grid(ctx, "logprob", n as u64, WG_SIZE)?;
        }
        Ok(())
    }

    /// `(lse, target logit)` of each row of the last run (`n_rows` of them).
    pub fn read(&self, ctx: &GpuContext) -> Result<Vec<(f32, f32)>, GpuError> {
        let bytes = read_back(ctx, &self.out, 0, u64::from(self.params.n_rows) * 8)?;
        let v: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes);
        Ok(v.chunks_exact(2).map(|p| (p[0], p[1])).collect())
    }
}

/// Runs the op now over host logits `[logits.len() / n_cols, n_cols]` with one target per row
/// (tests); returns `(lse, target logit)` per row.
pub fn logprob_on_gpu(
    ctx: &GpuContext,
    logits: &[f32],
    n_cols: usize,
    targets: &[u32],
) -> Result<Vec<(f32, f32)>, GpuError> {
    let (n_rows, n_cols) = rows_of(logits.len(), n_cols, "logprob logits")?;
    if targets.len() != n_rows as usize {
        return Err(bad_input(
            "logprob targets",
            format!("{n_rows} (one per row)"),
            targets.len(),
        ));
    }
    let x = super::upload_f32(ctx, "logprob logits", logits)?;
    let mut op = RowLogprob::new(ctx, &x, n_rows, n_cols)?;
    op.set(ctx, targets)?;
    crate::kernels::launch::submit(ctx, "logprob", &[&op.dispatch])?;
    op.read(ctx)
}
