//! KV cache and attention kernels.
//!
//! - [`layout`]: [`KvType`] (f16, q8_0, q4_0), the GPU row layout of a cache buffer, exact sizes
//!   ([`kv_bytes`], [`kv_bytes_per_token`]) and ggml-block ⇄ GPU-row conversion.
//! - [`store`]: f32 rows → cache at scattered positions, quantized on the way with llama.cpp's
//!   reference rules, bit for bit (`shaders/kv_store.wgsl`).
//! - [`shape`]: what every attention pass shares: [`AttnShape`] (heads, cache, capacities, scale,
//!   [`MaskMode`]), the params uniform, the non-scratch buffers [`AttnIo`], and
//!   [`decode_partials_bytes`] for the memory planner.
//! - [`attend`]: two-pass attention, the decode path: split partials over fixed 256-key splits,
//!   folded in a second pass (`shaders/attn_split.wgsl`, `shaders/attn_reduce.wgsl`), with a
//!   partials scratch buffer.
//! - [`fused`]: single-pass attention for multi-row calls (prefill, verify, the drafter's block):
//!   the same per-split code and fold in one workgroup per (row, KV head, head chunk), no
//!   partials (a 16-byte state per row and head), in passes of [`pass_splits`] splits
//!   (`shaders/attn_fused.wgsl`). Bit-identical per row to [`attend`].
//! - [`serial`]: the fused pass's CPU-driver form (`shaders/attn_serial.wgsl`): one invocation
//!   per (row, head), same contract and bits, chosen on CPU adapters for the f16 cache; and
//!   its row-block form (`shaders/attn_rows.wgsl`) for steps of 7+ rows where subgroups are 8
//!   wide: K/V rows loaded once per workgroup and shared by subgroup broadcast.
//! - [`oneshot`]: run-now convenience for tests (either path).
//!
//! Both attention paths handle grouped-query heads and causal / explicit / no mask, and are
//! batch-invariant by construction.
//!
//! CPU oracle: `crate::reference::attention`. Shader docs: `docs/shaders-attention.md`.

pub mod attend;
pub mod fused;
pub mod layout;
pub mod oneshot;
pub mod rope_kv;
pub mod serial;
pub mod shape;
pub mod shift;
pub mod store;

pub use attend::{Attention, AttnBuffers};
pub use fused::{pass_splits, FusedAttention};
pub use layout::{kv_bytes, kv_bytes_per_token, KvLayout, KvType, MAX_HEAD_DIM};
pub use oneshot::{attention_fused_now, attention_now, attention_now_with, AttnMask, AttnPath};
pub use rope_kv::{RopeKv, RopeKvIo, RopeKvParams};
pub use shape::{decode_partials_bytes, AttnIo, AttnParams, AttnShape, MaskMode, SPLIT_SIZE};
pub use shift::{KvShift, Rotation};
pub use store::{create_cache, store_rows_now, KvStore, KvStoreParams};

use crate::gpu::ShaderVariant;

/// Every variant of this family.
pub fn variants() -> Vec<ShaderVariant> {
    let mut out: Vec<ShaderVariant> = KvType::ALL
        .iter()
        .map(|&t| store::store_variant(t))
        .collect();
    out.extend(rope_kv::variants());
    out.extend(shift::variants());
    out.extend(KvType::ALL.iter().map(|&t| attend::split_variant(t, false)));
    out.push(attend::split_variant(KvType::F16, true));
    out.push(attend::reduce_variant());
    for first in [true, false] {
        out.extend(
            KvType::ALL
                .iter()
                .map(|&t| fused::fused_variant(t, false, first)),
        );
        out.push(fused::fused_variant(KvType::F16, true, first));
        for d in [64, 128] {
            for (f16, int64) in [(false, false), (true, false), (false, true)] {
                out.push(serial::serial_variant(d, f16, int64, first));
            }
            out.push(serial::rows_variant(d, first));
        }
    }
    out
}
