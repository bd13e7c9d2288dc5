// common/attn_inputs.wgsl: bindings 0-5 of every attention pass (attn_split, attn_fused,
// attn_serial, attn_rows): 0 uniform Params, 1 q_in f32 [n_q, n_head, D], 2 k_cache, 3 v_cache
// (common/kv_layout.wgsl; array<vec2<f16>> under USE_F16: the same words, converted natively;
// array<vec4<u64>> under KV_U64: eight words per entry),
// 4 positions u32 [n_q] (causal and sliding modes), 5 mask f32 [n_q, mask_stride] (explicit mode). The
// includer declares `enable f16;` under USE_F16 and its outputs from binding 6 on.
// Needs common/kv_attn_common.wgsl (Params) first.

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q_in: array<f32>;
#ifdef KV_U64X2
// attn_rows.wgsl: 8 f16 dims per entry, one entry per lane of a subgroup.
@group(0) @binding(2) var<storage, read> k_cache: array<vec2<u64>>;
@group(0) @binding(3) var<storage, read> v_cache: array<vec2<u64>>;
#else
#ifdef KV_U64
// attn_serial.wgsl with 64-bit integers: 16 f16 dims per entry (a CPU driver loads a vector one
// component at a time, so a head row costs D / 16 loads instead of D / 2).
@group(0) @binding(2) var<storage, read> k_cache: array<vec4<u64>>;
@group(0) @binding(3) var<storage, read> v_cache: array<vec4<u64>>;
#else
#ifdef USE_F16
@group(0) @binding(2) var<storage, read> k_cache: array<vec2<f16>>;
@group(0) @binding(3) var<storage, read> v_cache: array<vec2<f16>>;
#else
@group(0) @binding(2) var<storage, read> k_cache: array<u32>;
@group(0) @binding(3) var<storage, read> v_cache: array<u32>;
#endif
#endif
#endif
@group(0) @binding(4) var<storage, read> positions: array<u32>;
@group(0) @binding(5) var<storage, read> mask: array<f32>;

// The additive mask of key j for `row`: the explicit mask's value (mode 2), the hidden score
// for a key past the sliding window (mode 3), else 0.
fn attn_mask_add(row: u32, j: u32) -> f32 {
    if (params.mask_mode == 2u) {
        return mask[row * params.mask_stride + j];
    }
    if (params.mask_mode == 3u && j + params.mask_stride <= positions[row]) {
        return ATTN_NEG_BIG;
    }
    return 0.0;
}
