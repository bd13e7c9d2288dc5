//! Strided row copy on the GPU (`shaders/copy_rows.wgsl`): rows `[n_rows, n_cols]` of `src`
//! (row stride `src_stride`, first element `src_off`) into `dst` (row stride `dst_stride`, first
//! element `dst_off`). The forward pass uses it to write DSpark taps into their staging buffer
//! inside the step's compute pass.

use crate::gpu::{BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;

use super::PARAMS;
use super::{bad_input, build, check_f32s, grid, params_uniform, read, rewrite_params, write};

/// Invocations per workgroup (the `WG_SIZE` override).
pub const WG_SIZE: u32 = 64;

/// Mirrors `struct Params` of `copy_rows.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct CopyParams {
    pub n_rows: u32,
    pub n_cols: u32,
    pub src_stride: u32,
    pub dst_stride: u32,
    pub src_off: u32,
    pub dst_off: u32,
    pub _pad: [u32; 2],
}

const _: () = assert!(std::mem::size_of::<CopyParams>() == 32);

const BINDINGS: &[BindingSpec] = &[PARAMS, read(1), write(2)];

pub fn variant() -> ShaderVariant {
    ShaderVariant {
        shader: "copy_rows",
        entry_point: "main",
        defines: Vec::new(),
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

/// A built strided copy of at most `params.n_rows` rows.
#[derive(Debug)]
pub struct CopyRows {
    pub dispatch: Dispatch,
    params: CopyParams,
    max_rows: u32,
    /// f32 elements of the source and destination buffers.
    src_len: u64,
    dst_len: u64,
}

fn end(off: u32, rows: u32, stride: u32, cols: u32) -> u64 {
    u64::from(off) + u64::from(rows.saturating_sub(1)) * u64::from(stride) + u64::from(cols)
}

impl CopyRows {
    pub fn new(
        ctx: &GpuContext,
        src: &wgpu::Buffer,
        dst: &wgpu::Buffer,
        params: CopyParams,
    ) -> Result<CopyRows, GpuError> {
        let p = params;
        if p.n_cols > p.src_stride || p.n_cols > p.dst_stride {
            let actual = format!(
                "{} columns, strides {} / {}",
                p.n_cols, p.src_stride, p.dst_stride
            );
            return Err(bad_input("row copy", "strides of at least n_cols", actual));
        }
        check_f32s(
            "row copy source",
            src,
            end(p.src_off, p.n_rows, p.src_stride, p.n_cols),
        )?;
        check_f32s(
            "row copy destination",
            dst,
            end(p.dst_off, p.n_rows, p.dst_stride, p.n_cols),
        )?;
        let label = "copy rows";
        let uniform = params_uniform(ctx, label, &p)?;
        let groups = (u64::from(p.n_rows) * u64::from(p.n_cols)).div_ceil(u64::from(WG_SIZE));
        let g = grid(ctx, label, groups, WG_SIZE)?;
        let dispatch = build(ctx, &variant(), label, &uniform, &[src, dst], g)?;
        Ok(CopyRows {
            dispatch,
            params: p,
            max_rows: p.n_rows,
            src_len: src.size() / 4,
            dst_len: dst.size() / 4,
        })
    }

    /// Read from element `src_off` and write from element `dst_off` from the next submission
    /// on (the current row count must fit at the new offsets).
    pub fn set_offsets(
        &mut self,
        ctx: &GpuContext,
        src_off: u32,
        dst_off: u32,
    ) -> Result<(), GpuError> {
        let p = &self.params;
        let (src_end, dst_end) = (
            end(src_off, p.n_rows, p.src_stride, p.n_cols),
            end(dst_off, p.n_rows, p.dst_stride, p.n_cols),
        );
        if src_end > self.src_len || dst_end > self.dst_len {
            let actual = format!("offsets {src_off} / {dst_off}");
            return Err(bad_input("row copy offsets", "inside both buffers", actual));
        }
        self.params.src_off = src_off;
        self.params.dst_off = dst_off;
        rewrite_params(ctx, &self.dispatch, &self.params)
    }

    /// f32 elements of the destination buffer.
    pub fn dst_len(&self) -> u64 {
        self.dst_len
    }

    /// Copy the first `n_rows` rows from the next submission on.
    pub fn set_rows(&mut self, ctx: &GpuContext, n_rows: u32) -> Result<(), GpuError> {
        let (src_off, dst_off) = (self.params.src_off, self.params.dst_off);
        self.set_rows_at(ctx, n_rows, src_off, dst_off)
    }

    /// Copy `n_rows` rows read from element `src_off` and written from element `dst_off` from
    /// the next submission on (one uniform write; the rows must fit at the new offsets).
    pub fn set_rows_at(
        &mut self,
        ctx: &GpuContext,
        n_rows: u32,
        src_off: u32,
        dst_off: u32,
    ) -> Result<(), GpuError> {
        if n_rows > self.max_rows {
            return Err(bad_input(
                "row copy rows",
                format!("at most {}", self.max_rows),
                n_rows,
            ));
        }
        let p = &self.params;
        if end(src_off, n_rows, p.src_stride, p.n_cols) > self.src_len
            || end(dst_off, n_rows, p.dst_stride, p.n_cols) > self.dst_len
        {
            let actual = format!("{n_rows} rows at offsets {src_off} / {dst_off}");
            return Err(bad_input("row copy rows", "inside both buffers", actual));
        }
        self.params.n_rows = n_rows;
        self.params.src_off = src_off;
        self.params.dst_off = dst_off;
        rewrite_params(ctx, &self.dispatch, &self.params)?;
        let groups =
            (u64::from(n_rows) * u64::from(self.params.n_cols)).div_ceil(u64::from(WG_SIZE));
        self.dispatch.grid = grid(ctx, "copy rows", groups, WG_SIZE)?;
        Ok(())
    }
}
