//! GPU device layer (placeholder until the device module lands).

/// Errors of the GPU layer.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no adapter found")]
    NoAdapter,
}
