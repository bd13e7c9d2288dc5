//! [`GpuWeight`]: a GGUF weight `[ne0 = K, ne1 = N]` on the device, repacked into word-aligned
//! planes and split by rows across buffers that each fit one storage binding (layouts and split
//! rules: [`super::layout`]). Every kernel of this family takes a `GpuWeight` and issues one
//! dispatch per split, so splitting is invisible to callers.

use crate::gguf::GgmlType;
use crate::gpu::buffers::create_storage_init;
use crate::gpu::host_buffers::create_host_storage_init;
use crate::gpu::{GpuContext, GpuError};

use super::layout::{binding_limit, check_shape, repack_split, SplitPlan};
use super::MatmulParams;

/// One row split: rows `[row0, row0 + n_rows)` in `buffer`.
#[derive(Debug, Clone)]
pub struct WeightSplit {
    pub buffer: wgpu::Buffer,
    pub plan: SplitPlan,
    /// Word offsets of planes 1 and 2 (`params.plane1`, `params.plane2`).
    pub plane_words: [u32; 2],
}

/// A weight on the device.
#[derive(Debug, Clone)]
pub struct GpuWeight {
    pub name: String,
    pub ty: GgmlType,
    /// Elements per row (ne0).
    pub k: u32,
    /// Rows (ne1).
    pub n: u32,
    /// Blocks per row.
    pub nb: u32,
    /// Elements per kernel unit.
    pub unit: u32,
    pub splits: Vec<WeightSplit>,
}

fn to_u32(what: &str, v: u64) -> Result<u32, GpuError> {
    u32::try_from(v).map_err(|_| GpuError::BadInput {
        what: what.to_string(),
        expected: "a value below 2^32".to_string(),
        actual: v.to_string(),
    })
}

impl GpuWeight {
    /// Uploads the GGUF bytes of a `[K, N]` weight of `ty` (`N * K / block * type_size` bytes),
    /// repacked and split for `ctx`'s binding limit.
    pub fn upload(
        ctx: &GpuContext,
        name: &str,
        ty: GgmlType,
        shape: [u64; 2],
        gguf: &[u8],
    ) -> Result<GpuWeight, GpuError> {
        Self::upload_padded(ctx, name, ty, shape, gguf, 0)
    }

    /// [`GpuWeight::upload`] with a single split's buffer zero-padded to at least `pad_to`
    /// bytes (its [`GpuWeight::device_bytes`]): a stacked weight taking exactly the bytes the
    /// memory plan gave its parts. Ignored when the weight takes several splits.
    pub fn upload_padded(
        ctx: &GpuContext,
        name: &str,
        ty: GgmlType,
        shape: [u64; 2],
        gguf: &[u8],
        pad_to: u64,
    ) -> Result<GpuWeight, GpuError> {
        Self::upload_with(ctx, name, ty, shape, gguf, pad_to, 1, false)
    }

    /// [`GpuWeight::upload`] split by whole groups of `group` rows (a 3-D expert tensor
    /// `[K, N, E]` uploaded as `[K, N · E]` with `group = N`: no split cuts an expert).
    pub fn upload_grouped(
        ctx: &GpuContext,
        name: &str,
        ty: GgmlType,
        shape: [u64; 2],
        gguf: &[u8],
        group: u64,
    ) -> Result<GpuWeight, GpuError> {
        Self::upload_with(ctx, name, ty, shape, gguf, 0, group, false)
    }

    /// [`GpuWeight::upload_grouped`] into host memory the kernels read directly when `host`
    /// ([`crate::gpu::host_buffers`]; `memory::placement`): the same splits and layout.
    pub fn upload_grouped_placed(
        ctx: &GpuContext,
        name: &str,
        ty: GgmlType,
        shape: [u64; 2],
        gguf: &[u8],
        group: u64,
        host: bool,
    ) -> Result<GpuWeight, GpuError> {
        Self::upload_with(ctx, name, ty, shape, gguf, 0, group, host)
    }

    #[allow(clippy::too_many_arguments)]
    fn upload_with(
        ctx: &GpuContext,
        name: &str,
        ty: GgmlType,
        shape: [u64; 2],
        gguf: &[u8],
        pad_to: u64,
        group: u64,
        host: bool,
    ) -> Result<GpuWeight, GpuError> {
        let (l, nb) = check_shape(ty, shape)?;
        let limit = binding_limit(ctx.limits());
        let mut plan = super::layout::split_plan_grouped(ty, shape, limit, group)?;
        if let [only] = plan.as_mut_slice() {
            only.bytes = only.bytes.max(pad_to);
        }
        let mut splits = Vec::with_capacity(plan.len());
        for (i, p) in plan.iter().enumerate() {
            let bytes = repack_split(ty, shape, p, gguf)?; // p.bytes long, zero-padded
            let what = format!("weight {name} split {i}");
            let buffer = match host {
                true => create_host_storage_init(ctx, &what, &bytes)?,
                false => create_storage_init(ctx, &what, &bytes)?,
            };
            splits.push(WeightSplit {
                buffer,
                plan: *p,
                plane_words: [
                    to_u32("plane offset", p.plane_offsets[1] / 4)?,
                    to_u32("plane offset", p.plane_offsets[2] / 4)?,
                ],
            });
        }
        Ok(GpuWeight {
            name: name.to_string(),
            ty,
            k: to_u32("K", shape[0])?,
            n: to_u32("N", shape[1])?,
            nb: to_u32("blocks per row", nb)?,
            unit: to_u32("unit", l.unit)?,
            splits,
        })
    }

    /// Device bytes of all splits (equals [`super::device_bytes`] for the same limits).
    pub fn device_bytes(&self) -> u64 {
        self.splits.iter().map(|s| s.plan.bytes).sum()
    }

    /// Bytes of the device buffers actually created for the splits (what wgpu reports), which
    /// the memory record holds; equal to [`Self::device_bytes`] unless a buffer was rounded.
    pub fn buffer_bytes(&self) -> u64 {
        self.splits.iter().map(|s| s.buffer.size()).sum()
    }

    /// Params for split `s` with everything about the weight filled in; the caller sets the
    /// X / Y fields (`m`, `n_out`, `x_stride`, `x_off`, `y_off`).
    pub fn params(&self, s: &WeightSplit) -> Result<MatmulParams, GpuError> {
        Ok(MatmulParams {
            k: self.k,
            n_rows: to_u32("split rows", s.plan.n_rows)?,
            m: 0,
            row0: to_u32("split row0", s.plan.row0)?,
            n_out: self.n,
            x_stride: self.k,
            x_off: 0,
            y_off: 0,
            plane1: s.plane_words[0],
            plane2: s.plane_words[1],
            nb: self.nb,
            n_units: self.k / self.unit,
            split1: 0,
            split2: 0,
            col0: 0,
            _pad: 0,
        })
    }
}
