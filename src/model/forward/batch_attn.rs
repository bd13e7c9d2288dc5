//! Attention of one sequence's rows in a batched step: the fused kernel (one workgroup per
//! (row, KV head, chunk of ≤ 8 query heads), walking every 256-key split of the row in turn), or,
//! where that leaves most of the device idle, the two-pass split-KV path the single-sequence
//! decode takes (one workgroup per (split, row, KV head, chunk), then the in-order reduce).
//!
//! The choice, per step and per sequence segment of `n_q` rows over `kv_len` keys
//! ([`choose_split`]): the split path when the partials scratch holds the segment's rows, its
//! visible keys span at least two splits, and the fused kernel's workgroups
//! `n_q · n_kv_heads · ceil(group / 8)` are fewer than the device's parallelism estimate
//! ([`attn_parallelism`]). Both paths give the same bits per row (the same per-split code and
//! the same fold in split order: `docs/shaders-attention.md`), and the choice depends only on
//! the segment's own rows and keys, so it never changes a sequence's tokens.
//!
//! Scratch: the plan's `act.attn_partials` (the single-sequence decode partials,
//! `[rows, n_head, ceil(n_ctx / 256), head_dim + 2]` f32), shared by every sequence and layer of
//! the step (their dispatches run in order); the split kernel indexes it by the segment's own
//! rows, so its rows bound the segment rows the split path takes (1 as planned: decode rows).
//! Without it in the plan every segment takes the fused kernel.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::gpu::GpuContext;
use crate::kernels::attention::shape::MAX_GROUP;
use crate::kernels::attention::{
    Attention, AttnBuffers, AttnIo, AttnShape, FusedAttention, SPLIT_SIZE,
};
use crate::kernels::launch::Dispatch;
use crate::memory::alloc::Allocator;
use crate::{Error, Result};

/// Segment attention calls that took the split path, process-wide (a diagnostic: tests check
/// with it that a forced split happened).
static SPLIT_CALLS: AtomicU64 = AtomicU64::new(0);

/// Segment attention calls that took the split path so far in this process.
pub fn split_calls() -> u64 {
    SPLIT_CALLS.load(Ordering::Relaxed)
}

/// Environment variable overriding the device parallelism estimate (workgroups).
pub const PARALLELISM_ENV: &str = "FLINT_ATTN_PARALLELISM";

/// Workgroups a device runs at once, roughly, by adapter type: a discrete GPU 128 (100–150
/// multiprocessors on current large NVIDIA parts, one attention workgroup each), an integrated or
/// virtual GPU 32, a CPU driver 0 (its threads are busy with the fused kernel's rows already:
/// never split). `FLINT_ATTN_PARALLELISM=N` replaces the estimate (0: never split; a large N:
/// split whenever the keys span two splits).
pub fn attn_parallelism(ctx: &GpuContext) -> Result<u32> {
    if let Ok(v) = std::env::var(PARALLELISM_ENV) {
        return v.trim().parse().map_err(|_| {
            Error::Usage(format!(
                "{PARALLELISM_ENV}={v:?}: expected a number of workgroups (0 or more)"
            ))
        });
    }
    Ok(match ctx.adapter().get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 128,
        wgpu::DeviceType::IntegratedGpu | wgpu::DeviceType::VirtualGpu => 32,
        wgpu::DeviceType::Cpu | wgpu::DeviceType::Other => 0,
    })
}

/// Whether a segment of `n_q` rows over `kv_len` keys takes the split path: at most
/// `split_rows` rows (what the partials hold), `kv_len` spanning two or more 256-key splits,
/// and the fused kernel's `n_q · n_kv_heads · ceil(group / 8)` workgroups below `parallelism`.
pub fn choose_split(
    n_q: u32,
    kv_len: u32,
    n_kv_heads: u32,
    group: u32,
    split_rows: u32,
    parallelism: u32,
) -> bool {
    let fused = u64::from(n_q) * u64::from(n_kv_heads) * u64::from(group.div_ceil(MAX_GROUP));
    n_q >= 1
        && n_q <= split_rows
        && kv_len.div_ceil(SPLIT_SIZE) >= 2
        && fused < u64::from(parallelism)
}

/// The plan's decode partials, when the batched plan has them.
pub fn planned_partials(alloc: &mut Allocator<'_>) -> Result<Option<wgpu::Buffer>> {
    const NAME: &str = "act.attn_partials";
    if !alloc.plan_has(NAME) {
        return Ok(None);
    }
    Ok(Some(alloc.storage(NAME)?))
}

/// One attention layer's calls for one sequence: the fused kernel and, with partials and a
/// non-zero parallelism, the split path; which one the current step records.
#[derive(Debug)]
pub struct SeqAttention {
    fused: FusedAttention,
    split: Option<Attention>,
    parallelism: u32,
    /// The current step takes the split path.
    use_split: bool,
}

impl SeqAttention {
    /// Both paths over the same buffers (`state`: the fused kernel's scratch; `partials`: the
    /// split path's, whose size gives the rows it takes).
    ///
    /// With `leader` (an earlier layer's calls for the same sequence, set for the same rows and
    /// keys before this one every step) of the same shape, both paths bind its params uniforms
    /// and upload none: one upload per sequence per step instead of one per layer.
    pub fn new(
        ctx: &GpuContext,
        shape: AttnShape,
        io: AttnIo<'_>,
        (state, partials): (&wgpu::Buffer, Option<&wgpu::Buffer>),
        leader: Option<&SeqAttention>,
    ) -> Result<SeqAttention> {
        let leader = leader.filter(|l| l.fused.shape == shape);
        let shared = leader.and_then(|l| l.fused.first.params.as_ref());
        let fused = FusedAttention::new_sharing(ctx, shape, io, state, shared)?;
        let parallelism = attn_parallelism(ctx)?;
        let per_row = AttnShape { max_q: 1, ..shape }.partials_bytes();
        let split = match partials {
            Some(p) if parallelism > 0 && per_row > 0 => {
                let rows = u32::try_from(p.size() / per_row).unwrap_or(u32::MAX);
                let max_q = rows.min(shape.max_q);
                if max_q == 0 {
                    None
                } else {
                    let shape = AttnShape { max_q, ..shape };
                    let shared = leader
                        .and_then(|l| l.split.as_ref())
                        .filter(|a| a.shape == shape)
                        .and_then(|a| a.split.params.as_ref());
                    let b = AttnBuffers::new(io, p);
                    Some(Attention::new_sharing(ctx, shape, b, shared)?)
                }
            }
            _ => None,
        };
        Ok(SeqAttention {
            fused,
            split,
            parallelism,
            use_split: false,
        })
    }

    /// Sets the next recording to rows `row0..row0 + n_q` over `kv_len` keys, on the path
    /// [`choose_split`] picks.
    pub fn set_step_at(
        &mut self,
        ctx: &GpuContext,
        n_q: u32,
        kv_len: u32,
        row0: u32,
    ) -> Result<()> {
        self.use_split = match &mut self.split {
            Some(split) => {
                let kv = &split.shape.kv;
                let group = split.shape.n_head / kv.n_kv_heads.max(1);
                let take = choose_split(
                    n_q,
                    kv_len,
                    kv.n_kv_heads,
                    group,
                    split.shape.max_q,
                    self.parallelism,
                );
                if take {
                    split.set_step_at(ctx, n_q, kv_len, row0)?;
                    SPLIT_CALLS.fetch_add(1, Ordering::Relaxed);
                }
                take
            }
            None => false,
        };
        if !self.use_split {
            self.fused.set_step_at(ctx, n_q, kv_len, row0)?;
        }
        Ok(())
    }

    /// Whether the current step takes the split path.
    pub fn splits(&self) -> bool {
        self.use_split
    }

    /// The current step's dispatches, in order.
    /// The shape it was built for.
    pub fn shape(&self) -> AttnShape {
        self.fused.shape
    }

    pub fn dispatches(&self) -> Vec<&Dispatch> {
        match &self.split {
            Some(split) if self.use_split => split.dispatches().to_vec(),
            _ => self.fused.dispatches(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule's four conditions, each one failing alone.
    #[test]
    fn split_only_for_few_workgroups_over_several_splits() {
        // 1 row, 2 KV heads, group 4 (1 chunk): 2 fused workgroups.
        assert!(choose_split(1, 32768, 2, 4, 1, 128));
        assert!(choose_split(1, 257, 2, 4, 1, 3));
        // One split of keys: nothing to spread.
        assert!(!choose_split(1, 256, 2, 4, 1, 128));
        // More rows than the partials hold.
        assert!(!choose_split(2, 32768, 2, 4, 1, 128));
        // Fused already fills the device: 64 rows × 2 heads = 128 workgroups.
        assert!(!choose_split(64, 32768, 2, 4, 64, 128));
        assert!(choose_split(63, 32768, 2, 4, 64, 128));
        // Group 12: two chunks per KV head.
        assert!(!choose_split(1, 32768, 2, 12, 1, 4));
        assert!(choose_split(1, 32768, 2, 12, 1, 5));
        // Parallelism 0: never.
        assert!(!choose_split(1, 32768, 1, 1, 1, 0));
    }
}
