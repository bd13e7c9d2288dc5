//! KV cache and attention kernels.
//!
//! - [`layout`]: [`KvType`] (f16, q8_0, q4_0), the GPU row layout of a cache buffer, exact sizes
//!   ([`kv_bytes`], [`kv_bytes_per_token`]) and ggml-block ⇄ GPU-row conversion.
//! - [`store`]: f32 rows → cache at scattered positions, quantized on the way with llama.cpp's
//!   reference rules, bit for bit (`shaders/kv_store.wgsl`).
//! - [`attend`]: attention over the cache for one or many query rows, grouped-query heads,
//!   causal / explicit / no mask, split over the keys in fixed-size splits and folded in a second
//!   pass (`shaders/attn_split.wgsl`, `shaders/attn_reduce.wgsl`); batch-invariant by
//!   construction. [`oneshot`]: run-now convenience for tests.
//!
//! CPU oracle: `crate::reference::attention`. Shader docs: `docs/shaders-attention.md`.

pub mod attend;
pub mod layout;
pub mod oneshot;
pub mod store;

pub use attend::{Attention, AttnBuffers, AttnParams, AttnShape, MaskMode, SPLIT_SIZE};
pub use layout::{kv_bytes, kv_bytes_per_token, KvLayout, KvType, MAX_HEAD_DIM};
pub use oneshot::{attention_now, AttnMask};
pub use store::{create_cache, store_rows_now, KvStore, KvStoreParams};

use crate::gpu::ShaderVariant;

/// Every variant of this family.
pub fn variants() -> Vec<ShaderVariant> {
    let mut out: Vec<ShaderVariant> = KvType::ALL
        .iter()
        .map(|&t| store::store_variant(t))
        .collect();
    out.extend(KvType::ALL.iter().map(|&t| attend::split_variant(t, false)));
    out.push(attend::split_variant(KvType::F16, true));
    out.push(attend::reduce_variant());
    out
}
