//! Rust side of each WGSL kernel family: the `#[repr(C)]` params struct mirrored in WGSL, the
//! binding spec, the variants, the dispatch math and a host-facing entry point.
//!
//! - [`launch`]: [`launch::Dispatch`] (pipeline + bind group + params + grid), recorded into one
//!   compute pass per step.
//! - [`dequant`]: GGUF block bytes → f32 on the GPU (`shaders/dequant.wgsl`).
//! - [`matmul`]: weights on the device (repacking, splitting past the binding limit), matrix ×
//!   vector, matrix × small batch, matrix × matrix, embedding gather.
//! - [`ops`]: RMSNorm, RoPE, SwiGLU/GeGLU, add, scale, softmax, argmax and top-k.
//! - [`attention`]: KV-cache stores (f16, q8_0, q4_0) and attention (decode split-KV, multi-row).
//!
//! [`all_variants`] is the registry of every (shader, variant) the runtime can build; the tests
//! validate each with naga under the capabilities the runtime requests.

pub mod attention;
pub mod dequant;
pub mod launch;
pub mod matmul;
pub mod ops;

pub use dequant::dequantize_on_gpu;

use crate::gpu::{BindingKind, BindingSpec, GpuError, ShaderVariant};

/// Every (shader, variant) any kernel of the runtime may ask the pipeline cache for.
pub fn all_variants() -> Vec<ShaderVariant> {
    let mut all = dequant::variants();
    all.extend(matmul::variants());
    all.extend(ops::variants());
    all.extend(attention::variants());
    all
}

/// Binding `binding` of group 0 (every kernel binds group 0 only).
pub(crate) const fn spec(binding: u32, kind: BindingKind) -> BindingSpec {
    BindingSpec {
        group: 0,
        binding,
        kind,
    }
}

/// Spreads `groups` workgroups over x and, past `max_per_dim`, y: returns `(x, y)` with
/// `x * y >= groups`. Shaders rebuild the flat index as `(wid.y * nwg.x + wid.x)` and skip the
/// surplus (fewer than `x` groups).
pub fn dispatch_grid(what: &str, groups: u64, max_per_dim: u32) -> Result<(u32, u32), GpuError> {
    let too_large = || GpuError::DispatchTooLarge {
        what: what.to_string(),
        groups,
        max_per_dim,
    };
    if groups == 0 {
        return Ok((0, 0));
    }
    if max_per_dim == 0 {
        return Err(too_large());
    }
    let x = groups.min(u64::from(max_per_dim));
    let y = groups.div_ceil(x);
    let y = u32::try_from(y)
        .ok()
        .filter(|&y| y <= max_per_dim)
        .ok_or_else(too_large)?;
    // x <= max_per_dim, so the conversion cannot fail.
    let x = u32::try_from(x).map_err(|_| too_large())?;
    Ok((x, y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_grid_goes_2d_past_the_limit() {
        assert_eq!(dispatch_grid("t", 0, 65535).unwrap(), (0, 0));
        assert_eq!(dispatch_grid("t", 7, 65535).unwrap(), (7, 1));
        assert_eq!(dispatch_grid("t", 65535, 65535).unwrap(), (65535, 1));
        assert_eq!(dispatch_grid("t", 65536, 65535).unwrap(), (65535, 2));
        assert_eq!(dispatch_grid("t", 100, 16).unwrap(), (16, 7));
        assert!(matches!(
            dispatch_grid("t", 16 * 16 + 1, 16),
            Err(GpuError::DispatchTooLarge {
                groups: 257,
                max_per_dim: 16,
                ..
            })
        ));
    }
}
