//! Weights on the device and the kernels that read them: matrix × vector (decode), matrix ×
//! small batch (2..=16 columns, speculative verification), matrix × matrix (prefill ubatches)
//! and the embedding gather, for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K,
//! Q5_K, Q6_K, the 1-bit / ternary Q1_0, Q2_0, Q2_0_G128, PQ2_0, TQ1_0, TQ2_0, the codebook
//! IQ4_NL, IQ4_XS, MXFP4 and the lattice IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M
//! weights
//! (docs/shaders-matmul.md).
//!
//! Shapes: a weight is GGUF `[ne0 = K, ne1 = N]` (N rows of K); activations X are f32 `[M, K]`
//! (row stride `x_stride`), outputs Y f32 `[M, N]` (row stride `y_stride`): `Y = X . W^T`, i.e.
//! `Y[m, n] = sum_k W[n, k] X[m, k]`.
//!
//! - [`layout`]: repacked word-aligned planes, row splits past the binding limit, exact
//!   [`device_bytes`] for the memory planner.
//! - [`weights`]: [`GpuWeight`] (upload = repack + split).
//! - [`variants`]: kernel [`Family`] per device, shader variants, the registry.
//! - [`epilogue`]: what `matmul_rows.wgsl` does as it writes (GLU, split output of a stacked
//!   q | k | v weight) and where it can.
//! - `io`: [`MatmulIo`] and [`SplitOut`], where X and Y live, and their checks.
//! - [`dispatch`]: [`Dispatch`](crate::kernels::launch::Dispatch) builders (one per split) and
//!   run-now helpers.
//! - `window`: X bound as 64 KiB uniform windows where CPU drivers load it faster.
//!
//! Batch invariance: within one [`Family`], an output row is bit-identical whether computed by
//! mat-vec (M = 1), in a batch of 2..=16 or in a prefill tile (any M), because every path runs
//! the same per-unit operations in the same order (shaders/matmul.wgsl). Tested in
//! `tests/kernels_matmul_invariance.rs`.

pub mod dispatch;
pub mod epilogue;
mod io;
pub mod layout;
pub mod variants;
pub mod weights;
mod window;

pub use dispatch::{
    baseline_dispatches, baseline_now, embed_dispatches, embed_now, matmul_dispatches,
    matmul_dispatches_with, matmul_now, matmul_now_with, path_for, MatmulIo, SplitOut, SplitRope,
};
pub use epilogue::glu_epilogue;
pub use layout::{binding_limit, device_bytes, split_plan, SplitPlan, SUPPORTED_TYPES};
pub use variants::{
    variants, Family, Reduce, BATCH_TMS, SERIAL_INT64, SERIAL_INT64_BCAST, STAGED_TM,
};
pub use weights::{GpuWeight, WeightSplit};

/// Mirrors `struct Params` of `shaders/common/quant_common.wgsl` (shared by `matmul.wgsl`,
/// `matmul_baseline.wgsl` and `embed.wgsl`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MatmulParams {
    /// Elements per row (K).
    pub k: u32,
    /// Rows in this split.
    pub n_rows: u32,
    /// Columns of X / Y (tokens).
    pub m: u32,
    /// First row of this split in the whole weight.
    pub row0: u32,
    /// Row stride of Y in elements (embed: K).
    pub n_out: u32,
    /// Row stride of X in elements (multiple of 4).
    pub x_stride: u32,
    /// First element of X (multiple of 4); embed: first token id.
    pub x_off: u32,
    /// First element of Y.
    pub y_off: u32,
    /// Word offset of plane 1 in the split buffer.
    pub plane1: u32,
    /// Word offset of plane 2 in the split buffer.
    pub plane2: u32,
    /// Blocks per row.
    pub nb: u32,
    /// Kernel units per row (K / unit).
    pub n_units: u32,
    /// `matmul_rows.wgsl` with a split output (`SPLIT3`): rows `[0, split1)` go to Y,
    /// `[split1, split2)` to Y2 and `[split2, N)` to Y3, each `[m, its rows]` (0 otherwise).
    pub split1: u32,
    pub split2: u32,
    /// First column of this dispatch in the whole product (X read through windows cuts the
    /// columns into dispatches; the split output writes whole-product columns).
    pub col0: u32,
    pub _pad: u32,
}

const _: () = assert!(std::mem::size_of::<MatmulParams>() == 64);
