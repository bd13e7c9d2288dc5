// dequant.wgsl: dequantize a GGUF tensor (its raw block bytes) to f32.
//
// Variants (Rust side: src/kernels/dequant.rs), exactly one TYPE_* per variant:
//   TYPE_Q4_1  20-byte blocks {f16 d, f16 m, u8 qs[16]}: y[j] = d*(qs[j] & 15) + m and
//              y[j+16] = d*(qs[j] >> 4) + m. 4 invocations per block, 8 outputs each.
//   TYPE_Q8_0  34-byte blocks {f16 d, i8 qs[32]}: y[j] = qs[j]*d. 34 = 2 mod 4, so blocks are not
//              word aligned: bytes are addressed through the u32 words (src_u32_at).
//              8 invocations per block, 4 outputs each.
//   TYPE_F16   one u32 word (2 halves, 2 outputs) per invocation.
//   USE_F16        (TYPE_F16) convert with the native f16 type; needs the shader-f16 feature.
//   USE_SUBGROUPS  (TYPE_Q4_1, TYPE_Q8_0) the first invocation of a block loads its header word
//                  and hands it to the others with subgroupShuffle; the hand-over is verified,
//                  so any lane layout stays correct (a mismatch just loads the word itself).
//
// Exactness: d and m come from f16 (11 significant bits) and |q| < 2^8, so d*q is exact in f32
// and d*q + m rounds once whether or not the compiler fuses it into an fma: the output is
// bit-identical to the CPU reference (flint::quant::dequantize).
//
// Dispatch: 1D, or 2D when more than max_compute_workgroups_per_dimension groups are needed.
// Invocation index t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid; t >= n_units writes nothing.
// Bindings: 0 uniform Params, 1 src (read), 2 dst (read_write).

#ifdef USE_F16
enable f16;
#endif

#include "common/bytes.wgsl"

// Mirrors DequantParams in src/kernels/dequant.rs (16 bytes).
struct Params {
    n_elements: u32, // outputs: dst[0..n_elements]
    n_units: u32,    // invocations that do work
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
#ifdef USE_F16
@group(0) @binding(1) var<storage, read> src: array<vec2<f16>>; // TYPE_F16 only
#else
@group(0) @binding(1) var<storage, read> src: array<u32>;
#endif
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

override WG_SIZE: u32 = 64u;

#ifdef TYPE_Q4_1
const UNITS_PER_BLOCK: u32 = 4u;
const BLOCK_WORDS: u32 = 5u;

// The word holding d (low half) and m (high half) of block b.
fn header_word(b: u32) -> u32 {
    return src[b * BLOCK_WORDS];
}

// Unit u (0..3) of block b: qs word u gives outputs 4u..4u+3 (low nibbles) and +16 (high).
fn dequant_unit(b: u32, u: u32, hdr: u32) {
    let d = bytes_f16_to_f32(bytes_u16(hdr, 0u));
    let m = bytes_f16_to_f32(bytes_u16(hdr, 1u));
    let qs = src[b * BLOCK_WORDS + 1u + u];
    let o = b * 32u + 4u * u;
    for (var i = 0u; i < 4u; i++) {
        let q = bytes_u8(qs, i);
        dst[o + i] = f32(q & 0xfu) * d + m;
        dst[o + 16u + i] = f32(q >> 4u) * d + m;
    }
}
#endif

#ifdef TYPE_Q8_0
const UNITS_PER_BLOCK: u32 = 8u;
const BLOCK_BYTES: u32 = 34u;

// The u32 at byte address `off` of src (any alignment). The second word is read only when the
// address is unaligned, and then it still holds bytes of the same block (blocks end on an even
// byte and the buffer is padded to whole words), so no read goes past the data.
fn src_u32_at(off: u32) -> u32 {
    let k = off >> 2u;
    let shift = off & 3u;
    if (shift == 0u) {
        return src[k];
    }
    return bytes_funnel(src[k], src[k + 1u], shift);
}

// The word holding d of block b (d is its low or high half: block starts are even).
fn header_word(b: u32) -> u32 {
    return src[(b * BLOCK_BYTES) >> 2u];
}

// Unit u (0..7) of block b: outputs 4u..4u+3 from qs bytes 4u..4u+3.
fn dequant_unit(b: u32, u: u32, hdr: u32) {
    let start = b * BLOCK_BYTES;
    let d = bytes_f16_to_f32(bytes_u16(hdr, (start >> 1u) & 1u));
    let qs = src_u32_at(start + 2u + 4u * u);
    let o = b * 32u + 4u * u;
    for (var i = 0u; i < 4u; i++) {
        dst[o + i] = f32(bytes_i8(qs, i)) * d;
    }
}
#endif

#ifdef TYPE_F16
// Word t holds elements 2t (low half) and 2t+1 (high half; absent when n_elements is odd).
fn dequant_f16(t: u32) {
    let o = 2u * t;
#ifdef USE_F16
    let h = src[t];
    dst[o] = f32(h.x);
    if (o + 1u < params.n_elements) {
        dst[o + 1u] = f32(h.y);
    }
#else
    let w = src[t];
    dst[o] = bytes_f16_to_f32(bytes_u16(w, 0u));
    if (o + 1u < params.n_elements) {
        dst[o + 1u] = bytes_f16_to_f32(bytes_u16(w, 1u));
    }
#endif
}
#endif

#ifdef USE_SUBGROUPS
// Header word of block b for unit u, shared through the subgroup. Called by every lane.
fn block_header(b: u32, u: u32, lane: u32) -> u32 {
    var own = 0u;
    if (u == 0u) {
        own = header_word(b);
    }
    // With the usual linear lane layout, unit 0 of this block sits u lanes below.
    let leader = lane - min(lane, u);
    let got = subgroupShuffle(own, leader);
    let got_unit = subgroupShuffle(b * UNITS_PER_BLOCK + u, leader);
    if (got_unit == b * UNITS_PER_BLOCK) {
        return got;
    }
    return header_word(b);
}
#endif

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
#ifdef USE_SUBGROUPS
    @builtin(subgroup_invocation_id) lane: u32,
#endif
) {
    let t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
#ifdef TYPE_F16
    if (t >= params.n_units) {
        return;
    }
    dequant_f16(t);
#else
    // Clamp rather than return early: every lane must reach the subgroup shuffles.
    let tc = min(t, params.n_units - 1u);
    let b = tc / UNITS_PER_BLOCK;
    let u = tc % UNITS_PER_BLOCK;
#ifdef USE_SUBGROUPS
    let hdr = block_header(b, u, lane);
#else
    let hdr = header_word(b);
#endif
    if (t >= params.n_units) {
        return;
    }
    dequant_unit(b, u, hdr);
#endif
}
