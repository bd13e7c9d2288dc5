// common/quant_legacy_units.wgsl: what the 32-element block decoders share between
// common/quant_legacy.wgsl (the generic decoder interface) and matmul_rows.wgsl (CPU drivers):
// the LEGACY_BLOCK / LEGACY_MIN defines, the block-sum order (legacy_hsum), the element decode
// (legacy_elems) and the fast scale
// loads (legacy_dm_fast, legacy_dm_pair: matmul_rows.wgsl only).
// Needs common/quant_common.wgsl (params, w) first.

#ifdef TYPE_Q8_0
#define LEGACY_BLOCK
#endif
#ifdef TYPE_Q4_0
#define LEGACY_BLOCK
#endif
#ifdef TYPE_Q4_1
#define LEGACY_BLOCK
#define LEGACY_MIN
#endif
#ifdef TYPE_Q5_0
#define LEGACY_BLOCK
#endif
#ifdef TYPE_Q5_1
#define LEGACY_BLOCK
#define LEGACY_MIN
#endif

#ifdef LEGACY_BLOCK
// A block's vec4 sum reduced to the scalar it scales, in the one order every block-format
// kernel uses (the bits of common/quant_legacy.wgsl's unit dot depend on it).
fn legacy_hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

// The fifth bits of elements s..s+3 (bits s..s+3 of qh), times 16.
fn qh_high4(qh: u32, s: u32) -> vec4<f32> {
    let bits = (vec4<u32>(qh) >> vec4<u32>(s, s + 1u, s + 2u, s + 3u)) & vec4<u32>(1u);
    return vec4<f32>(bits * 16u);
}

// Elements 4i..4i+3 (i = 0..7) of a block as exact integers in f32 (before d, m), from the qs
// word that holds them: word i for Q8_0; word i % 4 for the nibble formats, whose word j holds
// elements 4j..4j+3 in its low nibbles and 16+4j..16+4j+3 in its high ones. `qh` is the
// block's fifth bits (Q5_*; ignored by the other formats).
fn legacy_elems(word: u32, qh: u32, i: u32) -> vec4<f32> {
#ifdef TYPE_Q8_0
    return vec4<f32>(unpack4xI8(word));
#else
    let sh = 4u * (i >> 2u);
    var v = vec4<f32>((vec4<u32>(word) >> vec4<u32>(sh, sh + 8u, sh + 16u, sh + 24u)) & vec4<u32>(15u));
#ifdef TYPE_Q5_0
    v = v + qh_high4(qh, 4u * i) - vec4<f32>(16.0);
#endif
#ifdef TYPE_Q5_1
    v = v + qh_high4(qh, 4u * i);
#endif
#ifdef TYPE_Q4_0
    v = v - vec4<f32>(8.0);
#endif
    return v;
#endif
}

// The word offset of the scale plane: d | m << 16 per block for the formats with a minimum
// (plane 1 for Q4_1, 2 for Q5_1), else f16 d entries (plane 2 for Q5_0, after qh; else 1).
fn legacy_scale_plane() -> u32 {
#ifdef TYPE_Q5_0
    return params.plane2;
#endif
#ifdef TYPE_Q5_1
    return params.plane2;
#endif
#ifdef TYPE_Q4_0
    return params.plane1;
#endif
#ifdef TYPE_Q4_1
    return params.plane1;
#endif
#ifdef TYPE_Q8_0
    return params.plane1;
#endif
}

// (d, m) of block g for matmul_rows.wgsl: unpack2x16float converts every finite f16 exactly
// (one instruction on CPU drivers), where quant_legacy.wgsl's integer decode also keeps NaN
// payloads and costs a few dozen operations per block. Needs wgpu's SHADER_F16_IN_F32 downlevel
// flag (every Vulkan, Metal and DX12 adapter has it).
fn legacy_dm_fast(g: u32) -> vec2<f32> {
#ifdef LEGACY_MIN
    return unpack2x16float(w_word(legacy_scale_plane() + g));
#else
    let h = unpack2x16float(w_word(legacy_scale_plane() + (g >> 1u)));
    return vec2<f32>(select(h.x, h.y, (g & 1u) == 1u), 0.0);
#endif
}

#ifdef PAIRS
// (d, m, d', m') of blocks g and g + 1 (g even) for matmul_rows.wgsl, in one load: the same
// values as legacy_dm_fast(g), legacy_dm_fast(g + 1).
fn legacy_dm_pair(g: u32) -> vec4<f32> {
#ifdef LEGACY_MIN
    let v = w_u64(legacy_scale_plane() + g);
    return vec4<f32>(unpack2x16float(u32(v)), unpack2x16float(u32(v >> 32u)));
#else
    let h = unpack2x16float(w_word(legacy_scale_plane() + (g >> 1u)));
    return vec4<f32>(h.x, 0.0, h.y, 0.0);
#endif
}
#endif

#endif
