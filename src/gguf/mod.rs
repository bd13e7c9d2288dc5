//! GGUF (placeholder).
pub mod types;
pub use types::GgmlType;

/// Errors of the GGUF reader.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("bad magic")]
    BadMagic,
}
