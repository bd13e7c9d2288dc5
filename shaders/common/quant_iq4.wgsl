// common/quant_iq4.wgsl: the 4-bit codebook formats IQ4_NL, IQ4_XS and MXFP4 (decoder interface:
// common/quant_common.wgsl; CPU decoders: src/quant/iq4.rs). A unit is a 32-element run of 16
// quant bytes (UNIT = 32): an IQ4_NL or MXFP4 block, or one of the eight sub-blocks of an IQ4_XS
// super-block. Byte j of the run holds element j (low nibble) and j + 16 (high nibble); a code c
// decodes to the codebook value kv[c], an exact small integer, times the unit's scale.
//
// Codebooks (16 i8 values packed four to a word, code c in byte c % 4 of word c / 4):
//   IQ4_NL, IQ4_XS  ggml's kvalues_iq4nl (-127 .. 113, non-linear)
//   MXFP4           kvalues_mxfp4: the E2M1 values doubled (0, 1, 2, 3, 4, 6, 8, 12, then negated)
// Scales:
//   IQ4_NL  d (f16)
//   IQ4_XS  d (f16) * (ls - 32), ls = scales_l nibble | 2 bits of scales_h << 4 (exact in f32)
//   MXFP4   2^(e - 128) from the E8M0 byte e (ggml_e8m0_to_fp32_half; subnormal for e < 2)
//
// Repacked planes (src/kernels/matmul/layout.rs; entry g = r * nb + b):
//   IQ4_NL  plane 0: qs, 4 words/block                 plane 1: d (f16)
//   IQ4_XS  plane 0: scales_l, qs: 33 words/block      plane 1: d | scales_h << 16, 1 word/block
//   MXFP4   plane 0: qs, 4 words/block                 plane 1: e, 1 byte/block
//
// Unit dot (fixed order): s = q[0] * x[0..4]; s = fma(q[i], x[4i..4i+4], s) for i = 1..7;
// acc = fma(scale, (s.x + s.y) + (s.z + s.w), acc) on a scalar acc (acc.x), as
// common/quant_legacy.wgsl. w_get4 computes scale * kv[c] like the CPU: exact.

#ifdef TYPE_IQ4_NL
#define IQ4_ANY
#define IQ4_NL_BOOK
#endif
#ifdef TYPE_IQ4_XS
#define IQ4_ANY
#define IQ4_NL_BOOK
#endif
#ifdef TYPE_MXFP4
#define IQ4_ANY
#endif

#ifdef IQ4_ANY
const UNIT: u32 = 32u;

#ifdef IQ4_NL_BOOK
const IQ4_BOOK: vec4<u32> = vec4<u32>(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
#else
const IQ4_BOOK: vec4<u32> = vec4<u32>(0x03020100u, 0x0c080604u, 0xfdfeff00u, 0xf4f8fafcu);
#endif

struct WU {
    d: f32,
    q: array<vec4<f32>, 8>,
}

// The codebook values of the four nibbles of `word` at shift `s` (0: low nibbles, 4: high).
fn iq4_codes(word: u32, s: u32) -> vec4<f32> {
    let book = IQ4_BOOK;
    var out: vec4<f32>;
    for (var b = 0u; b < 4u; b++) {
        let c = (word >> (8u * b + s)) & 15u;
        out[b] = f32(extractBits(bitcast<i32>(book[c >> 2u]), 8u * (c & 3u), 8u));
    }
    return out;
}

#ifdef TYPE_MXFP4
// ggml_e8m0_to_fp32_half: 2^(e - 128) built from its bits.
fn iq4_e8m0_half(e: u32) -> f32 {
    if (e < 2u) {
        return bitcast<f32>(0x00200000u << e);
    }
    return bitcast<f32>((e - 1u) << 23u);
}
#endif

// (scale, first qs word) of unit u of split-local row r.
fn iq4_unit(r: u32, u: u32) -> vec2<u32> {
#ifdef TYPE_IQ4_XS
    let g = r * params.nb + u / 8u;
    let ib = u % 8u;
    let hdr = w[params.plane1 + g];
    let base = g * 33u;
    let lo = (w_byte(base, ib / 2u) >> (4u * (ib % 2u))) & 15u;
    let hi = (hdr >> (16u + 2u * ib)) & 3u;
    let ls = i32(lo | (hi << 4u)) - 32;
    let d = bytes_f16_to_f32(hdr & 0xffffu) * f32(ls);
    return vec2<u32>(bitcast<u32>(d), base + 1u + 4u * ib);
#else
    let g = r * params.nb + u;
#ifdef TYPE_MXFP4
    let d = iq4_e8m0_half(w_byte(params.plane1, g));
#else
    let d = plane_f16(params.plane1, g);
#endif
    return vec2<u32>(bitcast<u32>(d), g * 4u);
#endif
}

fn wu_load(r: u32, u: u32) -> WU {
    let at = iq4_unit(r, u);
    var out: WU;
    out.d = bitcast<f32>(at.x);
    for (var j = 0u; j < 4u; j++) {
        let word = w[at.y + j];
        out.q[j] = iq4_codes(word, 0u);
        out.q[j + 4u] = iq4_codes(word, 4u);
    }
    return out;
}

fn wu_dot(wu: WU, t: u32, k0: u32, acc: vec4<f32>) -> vec4<f32> {
    var q = wu.q;
    var s = q[0] * xq(t, k0);
    for (var i = 1u; i < 8u; i++) {
        s = fma(q[i], xq(t, k0 + 4u * i), s);
    }
    // The running sum is a scalar in acc.x, as common/quant_legacy.wgsl's.
    return vec4<f32>(fma(wu.d, (s.x + s.y) + (s.z + s.w), acc.x), 0.0, 0.0, 0.0);
}

// Exact: the scale times a codebook value is exact in f32, as on the CPU.
fn w_get4(r: u32, k: u32) -> vec4<f32> {
    let at = iq4_unit(r, k / 32u);
    let e = k % 32u;
    let word = w[at.y + (e % 16u) / 4u];
    return iq4_codes(word, 4u * (e / 16u)) * bitcast<f32>(at.x);
}
#endif
