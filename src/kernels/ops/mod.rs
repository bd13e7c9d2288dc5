//! (ops kernels: being written.)

use crate::gpu::ShaderVariant;

/// Every variant of this family.
pub fn variants() -> Vec<ShaderVariant> {
    Vec::new()
}
