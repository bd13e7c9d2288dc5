//! The CPU-driver form of the fused pass (`shaders/attn_serial.wgsl`): one invocation per
//! (query row, query head), no workgroup memory, no barrier, the same contract, passes and
//! state protocol as `attn_fused.wgsl` and the same bits ([`super::FusedAttention`] picks it by
//! [`use_serial`]). On lavapipe a 512-row prefill spent 60 % of its time in the workgroup
//! kernel, whose shared-memory phases llvmpipe runs one invocation at a time.
//!
//! It handles the f16 cache only (the default); quantized caches keep the workgroup kernel.

use crate::gpu::{GpuContext, ShaderVariant};

use super::fused::FUSED_BINDINGS;
use super::layout::KvType;
use super::shape::SPLIT_SIZE;

/// Invocations per workgroup (one SIMD group of lavapipe's 256-bit vectors).
pub const SERIAL_WG_SIZE: u32 = 8;

/// Loop iterations a pass may run per invocation: half of lavapipe's 65535.
const LOOP_BUDGET: u64 = 65535 / 2;

/// Whether multi-row attention over a `ty` cache runs the serial kernel here: CPU adapters
/// with the f16 cache.
pub fn use_serial(ctx: &GpuContext, ty: KvType) -> bool {
    ctx.is_cpu() && ty == KvType::F16
}

/// Splits one serial invocation folds per pass: the budget over an upper bound of its loop
/// iterations per split (every loop counted as if not unrolled, with its exit test): two key
/// loops of at most 256 keys, each key a loop of `head_dim / 8` blocks. At least 1. Head dim
/// 64: 7 splits (1792 keys) per pass; 128: 3; 256: 1.
pub fn serial_pass_splits(head_dim: u32) -> u32 {
    let blocks = u64::from(head_dim / 8);
    let split = u64::from(SPLIT_SIZE);
    let per_split = 2 * split * (blocks + 2) + blocks * 9 + 8;
    let fixed = 3 * blocks * 9 + 16;
    let n = LOOP_BUDGET.saturating_sub(fixed) / per_split;
    u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}

/// The serial variant for an f16 cache with `head_dim` dims; `use_f16` binds the caches as
/// `vec2<f16>` (as the workgroup kernel does), `int64` as `vec4<u64>` (16 dims per load; takes
/// precedence); `first` starts from the empty state.
pub fn serial_variant(head_dim: u32, use_f16: bool, int64: bool, first: bool) -> ShaderVariant {
    let (mut defines, use_f16) = KvType::F16.cache_defines(use_f16 && !int64);
    defines.push(("HEAD_DIM", format!("{head_dim}u")));
    if int64 {
        defines.push(("INT64", String::new()));
    }
    ShaderVariant {
        shader: "attn_serial",
        entry_point: "main",
        defines,
        overrides: vec![
            ("WG_SIZE", f64::from(SERIAL_WG_SIZE)),
            ("FIRST_PASS", f64::from(u8::from(first))),
        ],
        requires_f16: use_f16,
        requires_subgroups: false,
        requires_int64: int64,
        bindings: FUSED_BINDINGS,
    }
}

/// Whether multi-row attention over a `ty` cache with `head_dim` dims can run
/// `attn_rows.wgsl` here: [`use_serial`], with 64-bit integers, f16 unpacking in f32 and
/// subgroups of exactly [`SERIAL_WG_SIZE`] invocations (lavapipe), head dims a multiple of 64.
pub fn use_rows(ctx: &GpuContext, ty: KvType, head_dim: u32) -> bool {
    let info = ctx.info();
    use_serial(ctx, ty)
        && ctx.has_int64()
        && ctx.has_f16_in_f32()
        && ctx.has_subgroups()
        && info.limits.min_subgroup_size == SERIAL_WG_SIZE
        && info.limits.max_subgroup_size == SERIAL_WG_SIZE
        && head_dim.is_multiple_of(64)
}

/// Query rows from which [`use_rows`] adapters run `attn_rows.wgsl` (below it the lanes of a
/// workgroup are mostly idle and `attn_serial.wgsl`, one lane per (row, head), spreads better).
/// Measured on lavapipe at depth 1000 (`flint bench -p 4,5,6,7 -d 1000 -n 0 -r 2`, two
/// alternating runs): 4 rows 39.5 → 33–36 t/s and 5 rows 34–43 → 32–36 with this kernel, 6
/// rows even, 7 rows (a verify batch of γ = 6) 40–44 → 52–56.
pub const ROWS_MIN_Q: u32 = 7;

/// The multi-row attention kernel this adapter runs over a `ty` cache with `head_dim` dims, in
/// words (`flint bench`'s `kernels` field).
pub fn describe(ctx: &GpuContext, ty: KvType, head_dim: u32) -> String {
    if use_rows(ctx, ty, head_dim) {
        format!("attention serial, row blocks from {ROWS_MIN_Q} rows")
    } else if use_serial(ctx, ty) {
        "attention serial".to_string()
    } else {
        "attention fused, split decode".to_string()
    }
}

/// The `attn_rows.wgsl` variant (f16 cache as 64-bit pairs, subgroups) for `head_dim` dims;
/// `first` starts from the empty state. Same bits as [`serial_variant`].
pub fn rows_variant(head_dim: u32, first: bool) -> ShaderVariant {
    let (mut defines, _) = KvType::F16.cache_defines(false);
    defines.push(("HEAD_DIM", format!("{head_dim}u")));
    defines.push(("INT64", String::new()));
    ShaderVariant {
        shader: "attn_rows",
        entry_point: "main",
        defines,
        overrides: vec![
            ("WG_SIZE", f64::from(SERIAL_WG_SIZE)),
            ("FIRST_PASS", f64::from(u8::from(first))),
        ],
        requires_f16: false,
        requires_subgroups: true,
        requires_int64: true,
        bindings: FUSED_BINDINGS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_splits_fit_the_budget() {
        for d in [32u32, 64, 128, 256] {
            let n = u64::from(serial_pass_splits(d));
            let blocks = u64::from(d / 8);
            let per_split = 2 * 256 * (blocks + 2) + blocks * 9 + 8;
            assert!(n >= 1);
            assert!(
                n * per_split + 3 * blocks * 9 + 16 <= 65535,
                "head_dim {d}: {n} splits"
            );
        }
    }
}
