//! Rust side of each WGSL kernel family (placeholder).
