//! What a layer does between the q/k/v projections and the attention: RoPE on q and k and the
//! KV store of k and v, as one fused dispatch where the caches are f16 ([`RopeKv`]) or as the
//! four separate ops otherwise (quantized caches). Both give the same bits.

use crate::gpu::GpuContext;
use crate::kernels::attention::{KvStore, RopeKv};
use crate::kernels::launch::Dispatch;
use crate::kernels::ops::rope::Rope;
use crate::Result;

#[derive(Debug)]
pub(crate) enum RopeStore {
    Fused(RopeKv),
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
            RopeStore::Split(ops) => vec![
                &ops.rope_q.dispatch,
                &ops.rope_k.dispatch,
                &ops.store_k.dispatch,
                &ops.store_v.dispatch,
            ],
        }
    }
}
