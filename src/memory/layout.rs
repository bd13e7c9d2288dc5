//! Byte sizes of device buffers: the single place the planner and the allocators agree on.
//! Every size is rounded up to whole 4-byte words (storage buffers are bound as `array<u32>`).

use crate::gguf::{GgmlType, TensorInfo};
use crate::kernels::attention::KvType;
use crate::model::Hparams;

/// `bytes` rounded up to a multiple of 4.
pub fn words(bytes: u64) -> u64 {
    bytes.div_ceil(4) * 4
}

/// f32 elements → bytes.
pub fn f32s(n: u64) -> u64 {
    n * 4
}

/// Device bytes of a weight tensor as `model::weights` uploads it: matrices as the matmul kernels
/// repack and split them (`kernels::matmul::device_bytes`), vectors (norms, biases) as f32, and
/// `rope_freqs.weight` not at all (it stays on the host). Types the kernels cannot read fall back
/// to their GGUF bytes split by rows ([`raw_weight_bytes`]); loading refuses them anyway.
pub fn weight_bytes(t: &TensorInfo, max_buffer: u64, max_binding: u64) -> u64 {
    if t.name == "rope_freqs.weight" {
        return 0;
    }
    if t.shape.len() == 1 {
        return words(t.n_elements() * 4);
    }
    let limits = wgpu::Limits {
        max_buffer_size: max_buffer,
        max_storage_buffer_binding_size: max_binding,
        ..wgpu::Limits::default()
    };
    // 3-D expert tensors `[K, N, E]` split by whole experts (`model::moe::upload_layer`).
    let group = if t.shape.len() == 3 { t.shape[1] } else { 1 };
    let shape = [t.row_len(), t.n_rows()];
    crate::kernels::matmul::layout::device_bytes_grouped(t.ty, shape, &limits, group)
        .unwrap_or_else(|_| raw_weight_bytes(t, max_binding))
}

/// The GGUF bytes of a tensor split by rows so that no part exceeds `max_binding`, each part
/// rounded to whole words.
pub fn raw_weight_bytes(t: &TensorInfo, max_binding: u64) -> u64 {
    let rows = t.n_rows().max(1);
    let row_bytes = t.n_bytes / rows;
    if t.n_bytes <= max_binding || row_bytes == 0 {
        return words(t.n_bytes);
    }
    let rows_per_part = (max_binding / row_bytes).max(1);
    let full = rows / rows_per_part;
    let rest = rows % rows_per_part;
    full * words(rows_per_part * row_bytes) + if rest > 0 { words(rest * row_bytes) } else { 0 }
}

/// Bytes of one K or V cache buffer: `n_rows × n_heads` rows of `head_dim` elements of `ty`
/// (f16, q8_0, q4_0) in the attention kernels' own layout (`KvType::row_bytes`: quant words
/// then packed f16 scales, which equals ggml's size when `head_dim` is a multiple of 64). A type
/// the cache cannot hold is charged as f32.
pub fn kv_bytes(ty: GgmlType, n_rows: u64, n_heads: u64, head_dim: u64) -> u64 {
    let head_dim32 = u32::try_from(head_dim).unwrap_or(u32::MAX);
    let per_row = KvType::from_ggml(ty).map_or(head_dim * 4, |t| t.row_bytes(head_dim32));
    words(n_rows * n_heads * per_row)
}

/// KV types the cache can hold.
pub const KV_TYPES: [GgmlType; 3] = [GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0];

/// `(name, bytes)` of every layer's K then V cache, named `{prefix}kv.k.{il}` /
/// `{prefix}kv.v.{il}`: `n_rows` rows of `n_head_kv` heads of `head_dim` (K) / `head_dim_v` (V).
pub fn kv_caches(
    prefix: &str,
    hp: &Hparams,
    types: (GgmlType, GgmlType),
    n_rows: u64,
) -> Vec<(String, u64)> {
    kv_caches_by_layer(prefix, hp, types, |_| n_rows)
}

/// [`kv_caches`] with `rows_of(il)` rows for layer `il` (Gemma 3's sliding layers: a ring).
pub fn kv_caches_by_layer(
    prefix: &str,
    hp: &Hparams,
    (type_k, type_v): (GgmlType, GgmlType),
    rows_of: impl Fn(u32) -> u64,
) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    // Only attention layers have a cache (every layer of a dense model; not Gemma 4's shared
    // layers), each of its own width (Gemma 4's head sizes and KV heads differ by layer).
    for il in hp.kv_layers() {
        let [nkv, hd, hdv] = hp.layer_kv_shape(il).map(u64::from);
        let n_rows = rows_of(il);
        out.push((
            format!("{prefix}kv.k.{il}"),
            kv_bytes(type_k, n_rows, nkv, hd),
        ));
        out.push((
            format!("{prefix}kv.v.{il}"),
            kv_bytes(type_v, n_rows, nkv, hdv),
        ));
    }
    out
}

/// Bytes of the decode attention partials (per sequence, head and 256-key split: a running max,
/// a sum and `head_dim_v` weighted values), as the attention kernels define them.
pub fn attn_partials_bytes(n_seq: u64, n_head: u64, n_ctx: u64, head_dim_v: u64) -> u64 {
    crate::kernels::attention::decode_partials_bytes(n_seq, n_head, n_ctx, head_dim_v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_split_by_rows_past_the_binding_limit() {
        let t = TensorInfo {
            name: "w".into(),
            shape: vec![64, 1000],
            ty: GgmlType::Q4_1,
            offset: 0,
            n_bytes: 40 * 1000,
        };
        assert_eq!(raw_weight_bytes(&t, 1 << 30), 40_000);
        // 4,000-byte parts hold 100 rows: 10 parts of 4,000 bytes.
        assert_eq!(raw_weight_bytes(&t, 4_000), 40_000);
        assert_eq!(kv_bytes(GgmlType::F16, 10, 3, 64), 10 * 3 * 128);
        assert_eq!(kv_bytes(GgmlType::Q8_0, 10, 3, 64), 10 * 3 * 68);
        assert_eq!(kv_bytes(GgmlType::Q4_0, 1, 1, 64), 36);
    }
}
