//! A grammar's allowed-token bitmask applied to logits on the device (`shaders/mask_logits.wgsl`):
//! logits `[n_rows, n_cols]` in place, mask `[n_rows, ceil(n_cols / 32)]` u32, a refused token's
//! logit set to the most negative finite f32. Recorded after the LM head and before the argmax
//! in the same pass, so greedy picks, top-k candidates and logits read back for sampling all
//! see the masked values; the logits are never read back to mask them.

use crate::gpu::buffers::{create_storage, create_storage_init, read_back, upload};
use crate::gpu::{GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;

use super::{bad_input, build, grid, params_uniform, read, rewrite_params, write, PARAMS};

/// Invocations per workgroup.
pub const WG_SIZE: u32 = 64;
/// The value a refused token's logit gets (`LOWEST` of the shader).
pub const LOWEST: f32 = -3.402_823_5e38;

/// Mirrors `struct Params` of `mask_logits.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MaskParams {
    pub n_rows: u32,
    pub n_cols: u32,
    /// `ceil(n_cols / 32)`.
    pub n_words: u32,
    pub _pad: u32,
}

const _: () = assert!(std::mem::size_of::<MaskParams>() == 16);

const BINDINGS: &[crate::gpu::BindingSpec] = &[PARAMS, read(1), write(2)];

/// The one variant.
pub fn variant() -> ShaderVariant {
    ShaderVariant {
        shader: "mask_logits",
        entry_point: "main",
        defines: vec![],
        overrides: vec![("WG_SIZE", f64::from(WG_SIZE))],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: BINDINGS,
    }
}

pub fn variants() -> Vec<ShaderVariant> {
    vec![variant()]
}

/// The mask op over a logits buffer, built for at most `max_rows` rows, with its mask buffer.
#[derive(Debug)]
pub struct MaskLogits {
    pub dispatch: Dispatch,
    /// The mask rows, `[max_rows, n_words]` u32 (written by [`MaskLogits::set`]).
    pub mask: wgpu::Buffer,
    params: MaskParams,
    max_rows: u32,
}

fn groups(p: &MaskParams) -> u64 {
    (u64::from(p.n_rows) * u64::from(p.n_words)).div_ceil(u64::from(WG_SIZE))
}

impl MaskLogits {
    pub fn new(
        ctx: &GpuContext,
        logits: &wgpu::Buffer,
        max_rows: u32,
        n_cols: u32,
    ) -> Result<MaskLogits, GpuError> {
        if max_rows == 0 || n_cols == 0 {
            return Err(bad_input("mask rows × columns", "at least 1 × 1", 0));
        }
        let params = MaskParams {
            n_rows: max_rows,
            n_cols,
            n_words: n_cols.div_ceil(32),
            _pad: 0,
        };
        let n = u64::from(max_rows) * u64::from(n_cols);
        super::check_f32s("masked logits", logits, n)?;
        let words = u64::from(max_rows) * u64::from(params.n_words);
        let mask = create_storage(ctx, "grammar mask", words * 4)?;
        let uniform = params_uniform(ctx, "mask logits", &params)?;
        let g = grid(ctx, "mask logits", groups(&params), WG_SIZE)?;
        let dispatch = build(
            ctx,
            &variant(),
            "mask logits",
            &uniform,
            &[&mask, logits],
            g,
        )?;
        Ok(MaskLogits {
            dispatch,
            mask,
            params,
            max_rows,
        })
    }

    /// Words per mask row.
    pub fn n_words(&self) -> u32 {
        self.params.n_words
    }

    /// Uploads `rows` (`[n, n_words]` u32) and masks the first `n` logits rows from the next
    /// submission on.
    pub fn set(&mut self, ctx: &GpuContext, rows: &[u32]) -> Result<(), GpuError> {
        let w = self.params.n_words as usize;
        if rows.is_empty()
            || !rows.len().is_multiple_of(w)
            || rows.len() / w > self.max_rows as usize
        {
            let expected = format!("1..={} rows of {w} words", self.max_rows);
            return Err(bad_input("grammar mask", expected, rows.len()));
        }
        let n = (rows.len() / w) as u32;
        upload(
            ctx,
            "grammar mask",
            &self.mask,
            0,
            bytemuck::cast_slice(rows),
        )?;
        if n != self.params.n_rows {
            self.params.n_rows = n;
            rewrite_params(ctx, &self.dispatch, &self.params)?;
            self.dispatch.grid = grid(ctx, "mask logits", groups(&self.params), WG_SIZE)?;
        }
        Ok(())
    }
}

/// Runs the mask now over host logits `[mask.len() / ceil(n_cols / 32), n_cols]` (tests).
pub fn mask_on_gpu(
    ctx: &GpuContext,
    logits: &[f32],
    n_cols: u32,
    mask: &[u32],
) -> Result<Vec<f32>, GpuError> {
    let n_rows = (logits.len() / n_cols.max(1) as usize) as u32;
    let x = create_storage_init(ctx, "mask test logits", bytemuck::cast_slice(logits))?;
    let mut op = MaskLogits::new(ctx, &x, n_rows, n_cols)?;
    op.set(ctx, mask)?;
    crate::kernels::launch::submit(ctx, "mask logits", &[&op.dispatch])?;
    let bytes = read_back(ctx, &x, 0, logits.len() as u64 * 4)?;
    Ok(bytemuck::pod_collect_to_vec(&bytes))
}
