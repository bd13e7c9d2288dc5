//! CPU oracle of the GPU row and elementwise ops kernels, in plain Rust. Activations
//! are f32, row-major `[n_rows, n_cols]`. Semantics follow ggml (named per function); where
//! ggml accumulates in f64 (RMSNorm, softmax sums) so does the oracle.
//!
//! - [`rms_norm`]: RMSNorm with an optional weight.
//! - [`rope`]: rotary embedding, normal / NEOX, partial rotary dims, frequency factors.
//! - [`swiglu`], [`geglu`], [`add`], [`scale`]: elementwise.
//! - [`softmax`]: softmax over rows with scale and additive mask.
//! - [`argmax`], [`top_k`]: selection over a vocabulary (value descending, ties to lower id).
//!
//! Shapes are checked with assertions: these functions are test oracles, fed by tests.

mod elementwise;
mod norm;
mod rope;
mod select;
mod softmax;

pub use elementwise::{add, geglu, gelu, scale, silu, swiglu};
pub use norm::rms_norm;
pub use rope::{rope, rope_freqs, RopeRef};
pub use select::{argmax, top_k};
pub use softmax::softmax;
