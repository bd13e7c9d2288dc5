//! Softmax over rows on the GPU (`shaders/softmax.wgsl`): x `[n_rows, n_cols]` →
//! y `[n_rows, n_cols]`, `y = softmax(x * scale + mask[r % n_mask_rows])`, numerically stable
//! (max subtracted), one workgroup per row.
//!
//! Batch invariant like [`super::norm`]: a row gives the same bits whatever the row count.
//! Masking: entries whose scaled (and masked) value is below -3e38, `-inf` included, are exactly
//! 0; a fully masked row is all zeros.
//!
//! Variants: `HAS_MASK`, `IN_PLACE`, `USE_SUBGROUPS` (when the device has `SUBGROUP`).

use crate::gpu::{GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;

use super::{bad_input, build_rows, check_f32s, check_rows, grid, rewrite_params, rows_of};
use super::{row_variant, row_variants, upload_f32, HostIo, Io};

/// Invocations per workgroup (the `WG_SIZE` override; at most `REDUCE_MAX_WG` = 256).
pub const WG_SIZE: u32 = 64;
const _: () = assert!(
    WG_SIZE <= 256,
    "common/reduce.wgsl holds at most 256 partials"
);

/// Mirrors `struct Params` of `softmax.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SoftmaxParams {
    pub n_rows: u32,
    pub n_cols: u32,
    /// Rows of the mask (row r uses mask row `r % n_mask_rows`); 1 without a mask.
    pub n_mask_rows: u32,
    pub scale: f32,
}

const _: () = assert!(std::mem::size_of::<SoftmaxParams>() == 16);

/// The variant for a mask or not, in place or not, subgroup reductions or not.
pub fn variant(mask: bool, in_place: bool, subgroups: bool) -> ShaderVariant {
    row_variant("softmax", "HAS_MASK", WG_SIZE, mask, in_place, subgroups)
}

/// Every variant this kernel may use, on any device.
pub fn variants() -> Vec<ShaderVariant> {
    row_variants(variant)
}

/// An additive mask `[n_mask_rows, n_cols]`: row r of x uses mask row `r % n_mask_rows`.
#[derive(Debug, Clone, Copy)]
pub struct Mask<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub n_mask_rows: u32,
}

/// A built softmax over at most `max_rows` rows.
#[derive(Debug)]
pub struct Softmax {
    pub dispatch: Dispatch,
    params: SoftmaxParams,
    max_rows: u32,
}

impl Softmax {
    /// Softmax of `x * scale (+ mask)` over rows of x `[n_rows, n_cols]` (from `io`).
    pub fn new(
        ctx: &GpuContext,
        io: Io<'_>,
        mask: Option<Mask<'_>>,
        n_rows: u32,
        n_cols: u32,
        scale: f32,
    ) -> Result<Softmax, GpuError> {
        if n_cols == 0 {
            return Err(bad_input("softmax columns", "at least 1", 0));
        }
        if !scale.is_finite() {
            return Err(bad_input("softmax scale", "a finite number", scale));
        }
        let n = u64::from(n_rows) * u64::from(n_cols);
        super::to_u32("softmax elements", n)?;
        io.check("softmax x", n)?;
        let mut buffers = io.buffers();
        let mut n_mask_rows = 1;
        if let Some(m) = mask {
            if m.n_mask_rows == 0 {
                return Err(bad_input("softmax mask rows", "at least 1", 0));
            }
            let len = u64::from(m.n_mask_rows) * u64::from(n_cols);
            super::to_u32("softmax mask elements", len)?;
            check_f32s("softmax mask", m.buffer, len)?;
            buffers.push(m.buffer);
            n_mask_rows = m.n_mask_rows;
        }
        let params = SoftmaxParams {
            n_rows,
            n_cols,
            n_mask_rows,
            scale,
        };
        let v = variant(mask.is_some(), io.in_place(), ctx.has_subgroups());
        let dispatch = build_rows(ctx, &v, "softmax", &params, &buffers, n_rows, WG_SIZE)?;
        Ok(Softmax {
            dispatch,
            params,
            max_rows: n_rows,
        })
    }

    /// From the next submission on: the first `n_rows` rows (at most the built count) and
    /// `scale`.
    pub fn set_rows(&mut self, ctx: &GpuContext, n_rows: u32, scale: f32) -> Result<(), GpuError> {
        check_rows("softmax rows", n_rows, self.max_rows)?;
        if !scale.is_finite() {
            return Err(bad_input("softmax scale", "a finite number", scale));
        }
        self.params.n_rows = n_rows;
        self.params.scale = scale;
        rewrite_params(ctx, &self.dispatch, &self.params)?;
        self.dispatch.grid = grid(ctx, "softmax", u64::from(n_rows), WG_SIZE)?;
        Ok(())
    }

    pub fn params(&self) -> SoftmaxParams {
        self.params
    }
}

/// Runs softmax now on x `[x.len() / n_cols, n_cols]` with `scale` and an optional mask
/// `[mask.len() / n_cols, n_cols]`; returns y (the shape of x).
pub fn softmax_on_gpu(
    ctx: &GpuContext,
    x: &[f32],
    n_cols: usize,
    scale: f32,
    mask: Option<&[f32]>,
    in_place: bool,
) -> Result<Vec<f32>, GpuError> {
    let (n_rows, n_cols) = rows_of(x.len(), n_cols, "softmax x")?;
    let mask_rows = match mask {
        Some(m) => Some(rows_of(m.len(), n_cols as usize, "softmax mask")?.0),
        None => None,
    };
    let host = HostIo::new(ctx, "softmax x", x, in_place)?;
    let mask_buf = mask
        .map(|m| upload_f32(ctx, "softmax mask", m))
        .transpose()?;
    let m = match (&mask_buf, mask_rows) {
        (Some(buffer), Some(n_mask_rows)) => Some(Mask {
            buffer,
            n_mask_rows,
        }),
        _ => None,
    };
    let op = Softmax::new(ctx, host.io(), m, n_rows, n_cols, scale)?;
    super::run_and_read_f32(ctx, "softmax", &[&op.dispatch], host.out(), x.len())
}
