//! Dequantization on the GPU: raw GGUF block bytes `[n_blocks * type_size]` → f32
//! `[n_elements]`, bit-identical to `crate::quant::dequantize` (see `shaders/dequant.wgsl` for
//! why the arithmetic is exact).
//!
//! Work split (one invocation = one "unit"):
//! - Q4_1: 4 units per 20-byte block (one qs word each), 8 outputs per unit.
//! - Q8_0: 8 units per 34-byte block (4 qs bytes each, byte-addressed), 4 outputs per unit.
//! - F16: one unit per u32 word, 2 outputs (1 for the last word of an odd count).
//!
//! Variants: `TYPE_*` per type; `USE_F16` (F16 only, when the device has `SHADER_F16`) converts
//! with native f16; `USE_SUBGROUPS` (Q4_1, Q8_0, when the device has `SUBGROUP`) shares block
//! headers through the subgroup. Workgroups of [`WG_SIZE`] (a WGSL override), spread over a 2D
//! grid when more than `max_compute_workgroups_per_dimension` are needed.

use crate::gguf::GgmlType;
use crate::gpu::buffers::{create_storage, create_storage_init, create_uniform, read_back};
use crate::gpu::{BindingKind, BindingSpec, GpuContext, GpuError, ShaderVariant};

use super::{dispatch_grid, spec};

/// Invocations per workgroup (the `WG_SIZE` override of `dequant.wgsl`).
pub const WG_SIZE: u32 = 64;

/// The types the kernel handles.
pub const SUPPORTED_TYPES: [GgmlType; 3] = [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::F16];

/// Mirrors `struct Params` of `dequant.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DequantParams {
    /// Outputs written: `dst[0..n_elements]`.
    pub n_elements: u32,
    /// Invocations that do work (see the module docs).
    pub n_units: u32,
    pub _pad0: u32,
    pub _pad1: u32,
}

const _: () = assert!(std::mem::size_of::<DequantParams>() == 16);

/// The bindings of `dequant.wgsl`, in declaration order.
pub const BINDINGS: &[BindingSpec] = &[
    spec(0, BindingKind::Uniform),
    spec(1, BindingKind::StorageRead),
    spec(2, BindingKind::StorageReadWrite),
];

fn unsupported(ty: GgmlType) -> GpuError {
    GpuError::UnsupportedType {
        op: "GPU dequantize".to_string(),
        ty,
    }
}

/// The variant for `ty`; `use_f16` / `use_subgroups` apply only where the variant has a use for
/// them (F16 / Q4_1 and Q8_0), so asking for both is always fine.
pub fn variant(
    ty: GgmlType,
    use_f16: bool,
    use_subgroups: bool,
) -> Result<ShaderVariant, GpuError> {
    let (define, f16, subgroups) = match ty {
        GgmlType::Q4_1 => ("TYPE_Q4_1", false, use_subgroups),
        GgmlType::Q8_0 => ("TYPE_Q8_0", false, use_subgroups),
        GgmlType::F16 => ("TYPE_F16", use_f16, false),
        other => return Err(unsupported(other)),
    };
    let mut defines = vec![(define, String::new())];
    if f16 {
        defines.push(("USE_F16", String::new()));
    }
    if subgroups {
        defines.push(("USE_SUBGROUPS", String::new()));
    }
    Ok(ShaderVariant {
        shader: "dequant",
        entry_point: "main",
        defines,
        overrides: vec![("WG_SIZE", f64::from(WG_SIZE))],
        requires_f16: f16,
        requires_subgroups: subgroups,
        requires_int64: false,
        bindings: BINDINGS,
    })
}

/// The variant the runtime uses for `ty` on this device.
pub fn variant_for(ctx: &GpuContext, ty: GgmlType) -> Result<ShaderVariant, GpuError> {
    variant(ty, ctx.has_f16(), ctx.has_subgroups())
}

/// Every variant this kernel may use, on any device.
pub fn variants() -> Vec<ShaderVariant> {
    let mut out: Vec<ShaderVariant> = Vec::new();
    for ty in SUPPORTED_TYPES {
        for (f16, subgroups) in [(false, false), (true, false), (false, true), (true, true)] {
            if let Ok(v) = variant(ty, f16, subgroups) {
                if !out.contains(&v) {
                    out.push(v);
                }
            }
        }
    }
    out
}

/// Invocations that do work for `n_elements` of `ty` (`n_elements` a multiple of the block size).
pub fn n_units(ty: GgmlType, n_elements: u64) -> Result<u64, GpuError> {
    match ty {
        GgmlType::Q4_1 => Ok(n_elements / 32 * 4),
        GgmlType::Q8_0 => Ok(n_elements / 32 * 8),
        GgmlType::F16 => Ok(n_elements.div_ceil(2)),
        other => Err(unsupported(other)),
    }
}

fn bad_input(what: &str, expected: String, actual: String) -> GpuError {
    GpuError::BadInput {
        what: what.to_string(),
        expected,
        actual,
    }
}

/// Dequantizes `n_elements` of `ty` from its raw GGUF bytes on the GPU of `ctx`.
///
/// `bytes` must be exactly `n_elements / block_size * type_size` long. The input and the f32
/// output must each fit one storage binding (else [`GpuError::BufferTooLarge`]).
pub fn dequantize_on_gpu(
    ctx: &GpuContext,
    ty: GgmlType,
    bytes: &[u8],
    n_elements: usize,
) -> Result<Vec<f32>, GpuError> {
    let variant = variant_for(ctx, ty)?;
    let n = n_elements as u64;
    let expected = ty.row_bytes(n).ok_or_else(|| {
        bad_input(
            "element count",
            format!("a multiple of {}", ty.block_size()),
            n.to_string(),
        )
    })?;
    if bytes.len() as u64 != expected {
        let what = format!("{ty} data for {n} elements");
        return Err(bad_input(
            &what,
            format!("{expected} bytes"),
            format!("{} bytes", bytes.len()),
        ));
    }
    let n32 = u32::try_from(n).map_err(|_| {
        bad_input(
            "element count",
            format!("at most {}", u32::MAX),
            n.to_string(),
        )
    })?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let units = n_units(ty, n)?;
    let groups = units.div_ceil(u64::from(WG_SIZE));
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    let (gx, gy) = dispatch_grid("dequantize", groups, max_dim)?;
    // The shader's flat invocation index must not wrap around u32.
    let invocations = u64::from(gx) * u64::from(gy) * u64::from(WG_SIZE);
    if invocations > u64::from(u32::MAX) {
        return Err(bad_input(
            "element count",
            "fewer invocations than 2^32".into(),
            n.to_string(),
        ));
    }
    let params = DequantParams {
        n_elements: n32,
        n_units: u32::try_from(units)
            .map_err(|_| bad_input("units", "< 2^32".into(), units.to_string()))?,
        _pad0: 0,
        _pad1: 0,
    };

    let src = create_storage_init(ctx, "dequantize input", bytes)?;
    let dst = create_storage(ctx, "dequantize output", n * 4)?;
    let uniform = create_uniform(ctx, "dequantize params", &params)?;
    let pipeline = ctx.pipelines().get(ctx, &variant)?;
    let compute = pipeline.ready()?;
    let layout = pipeline
        .bind_group_layouts
        .first()
        .ok_or_else(|| GpuError::Shader {
            name: variant.shader.to_string(),
            variant: variant.key(),
            message: "no bind group layout".to_string(),
        })?;
    ctx.scoped("dequantize dispatch", 0, |device| {
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("dequantize"),
            layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: uniform.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: src.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: dst.as_entire_binding(),
                },
            ],
        });
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("dequantize"),
        });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("dequantize"),
                timestamp_writes: None,
            });
            pass.set_pipeline(compute);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(gx, gy, 1);
        }
        ctx.queue().submit([encoder.finish()]);
    })?;
    let raw = read_back(ctx, &dst, 0, n * 4)?;
    Ok(raw
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}
