//! CPU block formats (placeholder until the quant module lands).

/// Errors of the quant module.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("unsupported type {0}")]
    Unsupported(crate::gguf::GgmlType),
}
