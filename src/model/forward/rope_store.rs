//! What a layer does between the q/k/v projections and the attention: RoPE on q and k and the
//! KV store of k and v, as one fused dispatch where the caches are f16 ([`RopeKv`]), done by the
//! stacked q | k | v matmul itself where it can ([`RopeStore::InQkv`]), or as the four
//! separate ops otherwise (quantized caches). All give the same bits.

use crate::gpu::GpuContext;
use crate::kernels::attention::{KvStore, RopeKv, RopeKvParams};
use crate::kernels::launch::Dispatch;
use crate::kernels::matmul::SplitRope;
use crate::kernels::ops::rope::{Rope, RopeMode};
use crate::Result;

#[derive(Debug)]
pub(crate) enum RopeStore {
    Fused(RopeKv),
    /// The q | k | v matmul's epilogue does the op's work (`common/matmul_rope.wgsl`): only
    /// the op's params, as the uniform the epilogue binds.
    InQkv {
        shape: RopeKvParams,
        uniform: wgpu::Buffer,
    },
    Split(Box<SplitOps>),
}

/// The four separate ops (quantized caches).
#[derive(Debug)]
pub(crate) struct SplitOps {
    pub rope_q: Rope,
    pub rope_k: Rope,
    pub store_k: KvStore,
    pub store_v: KvStore,
}

impl RopeStore {
    /// Sets the op for `m` rows from the next submission on.
    pub(crate) fn set_tokens(&mut self, ctx: &GpuContext, m: u32) -> Result<()> {
        match self {
            RopeStore::Fused(op) => op.set_tokens(ctx, m)?,
            RopeStore::InQkv { .. } => {}
            RopeStore::Split(ops) => {
                ops.rope_q.set_tokens(ctx, m)?;
                ops.rope_k.set_tokens(ctx, m)?;
                ops.store_k.set_n_tokens(ctx, m)?;
                ops.store_v.set_n_tokens(ctx, m)?;
            }
        }
        Ok(())
    }

    /// The dispatches, in order.
    pub(crate) fn dispatches(&self) -> Vec<&Dispatch> {
        match self {
            RopeStore::Fused(op) => vec![&op.dispatch],
            RopeStore::InQkv { .. } => Vec::new(),
            RopeStore::Split(ops) => vec![
                &ops.rope_q.dispatch,
                &ops.rope_k.dispatch,
                &ops.store_k.dispatch,
                &ops.store_v.dispatch,
            ],
        }
    }

    /// The q | k | v matmul's RoPE epilogue over these buffers, where it does this op's work.
    pub(crate) fn split_rope<'a>(
        &'a self,
        positions: &'a wgpu::Buffer,
        freqs: &'a wgpu::Buffer,
        [k_cache, v_cache]: &'a [wgpu::Buffer; 2],
    ) -> Option<SplitRope<'a>> {
        let RopeStore::InQkv { shape, uniform } = self else {
            return None;
        };
        Some(SplitRope {
            shape: *shape,
            mode: RopeMode::Normal,
            uniform,
            positions,
            freqs,
            k_cache,
            v_cache,
        })
    }
}
