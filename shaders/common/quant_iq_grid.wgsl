// common/quant_iq_grid.wgsl: the lattice i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S
// and IQ1_M (decoder interface: common/quant_common.wgsl; CPU decoders and block layouts:
// src/quant/iq_lattice.rs). A unit is a 32-element sub-block ib of a 256-element super-block
// (UNIT = 32, u = 8 b + ib): 4 groups l of 8 elements, each a grid point (IQ3: two points of 4)
// with one sign bit per element, or (IQ1) a point of -1/0/1 coordinates plus +-1/8, times the
// group's scale. Decoded: q[2l], q[2l + 1] = the group's 8 signed coordinates (exact in f32),
// sc[l] = its scale (exact: d times a small integer, times 1/4 or 1/2).
//
// The grid is in the weight buffer after the planes, at word params.plane2 (layout.rs): 8 bytes
// a point (IQ2, IQ1: two words; IQ1 coordinates are i8) or 4 (IQ3: one word), ggml-common.h's
// iq*_grid. Sign bytes of IQ2_XXS, IQ2_XS and IQ3_XXS are 7 stored bits plus their parity as bit
// 7 (ggml's ksigns_iq2xs table, computed with countOneBits).
//
// Repacked planes (the f16 d moves to plane 1; IQ1_M keeps its block, d packed in its scales):
//   IQ2_XXS  plane 0: 16 words/block: qs (u16[32]; per sub-block two words a0, a1)
//   IQ2_XS   plane 0: 18 words/block: qs (u16[32]: 9-bit point | 7 sign bits), scales[8]
//   IQ2_S    plane 0: 20 words/block: qs[32] (low point bits), signs[32], qh[8], scales[8]
//   IQ3_XXS  plane 0: 24 words/block: qs[64] (points), scales_and_signs (u32[8])
//   IQ3_S    plane 0: 27 words/block: qs[64], qh[8], signs[32], scales[4]
//   IQ1_S    plane 0: 12 words/block: qs[32], qh (u16[8])
//   IQ1_M    plane 0: 14 words/block: qs[32], qh[16], scales (u16[4])
//
// Unit dot (fixed order): for l = 0..3: s = q[2l] * x[8l..8l+4]; s = fma(q[2l+1], x[8l+4..8l+8],
// s); acc = fma(sc[l], (s.x + s.y) + (s.z + s.w), acc) on a scalar acc (acc.x).
// w_get4 computes sc * q like the CPU: exact.

#ifdef TYPE_IQ2_XXS
#define IQG_ANY
const IQG_WORDS: u32 = 16u;
#endif
#ifdef TYPE_IQ2_XS
#define IQG_ANY
const IQG_WORDS: u32 = 18u;
#endif
#ifdef TYPE_IQ2_S
#define IQG_ANY
const IQG_WORDS: u32 = 20u;
#endif
#ifdef TYPE_IQ3_XXS
#define IQG_ANY
#define IQG_IQ3
const IQG_WORDS: u32 = 24u;
#endif
#ifdef TYPE_IQ3_S
#define IQG_ANY
#define IQG_IQ3
const IQG_WORDS: u32 = 27u;
#endif
#ifdef TYPE_IQ1_S
#define IQG_ANY
#define IQG_IQ1
const IQG_WORDS: u32 = 12u;
#endif
#ifdef TYPE_IQ1_M
#define IQG_ANY
#define IQG_IQ1
const IQG_WORDS: u32 = 14u;
#endif

#ifdef IQG_ANY
const UNIT: u32 = 32u;

struct WU {
    sc: vec4<f32>,
    q: array<vec4<f32>, 8>,
}

// One group: its scale and 8 decoded coordinates.
struct IqgGroup {
    sc: f32,
    lo: vec4<f32>,
    hi: vec4<f32>,
}

// ksigns_iq2xs[s7]: the 7 sign bits and their parity.
fn iqg_ksigns(s7: u32) -> u32 {
    let s = s7 & 127u;
    return s | ((countOneBits(s) & 1u) << 7u);
}

// The four bytes of `word` as f32 magnitudes, negated where bits 0..3 of `signs` are set.
fn iqg_signed4(word: u32, signs: u32) -> vec4<f32> {
    let m = bytes_field(word, 0u, 255u);
    let neg = ((vec4<u32>(signs) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u)) == vec4<u32>(1u);
    return select(m, -m, neg);
}

// The four i8 bytes of `word` plus delta.
fn iqg_i8x4(word: u32, delta: f32) -> vec4<f32> {
    let v = bitcast<vec4<i32>>(vec4<u32>(word) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u);
    return vec4<f32>(v) + vec4<f32>(delta);
}

// `d (0.5 + s) f`, in ggml's order.
fn iqg_half_step(d: f32, s: u32, f: f32) -> f32 {
    return d * (0.5 + f32(s)) * f;
}

// A group of 8 from grid point `idx` (two words) with 8 sign bits.
fn iqg_point8(idx: u32, signs: u32, sc: f32) -> IqgGroup {
    let at = params.plane2 + 2u * idx;
    return IqgGroup(sc, iqg_signed4(w[at], signs), iqg_signed4(w[at + 1u], signs >> 4u));
}

#ifdef IQG_IQ3
// A group of 8 from two IQ3 grid points of 4.
fn iqg_point4x2(i1: u32, i2: u32, signs: u32, sc: f32) -> IqgGroup {
    let lo = iqg_signed4(w[params.plane2 + i1], signs);
    return IqgGroup(sc, lo, iqg_signed4(w[params.plane2 + i2], signs >> 4u));
}
#endif

#ifdef IQG_IQ1
// An IQ1 group: point `idx`, coordinates + delta, scale d (2 s + 1).
fn iqg_iq1(idx: u32, neg: bool, sc: f32) -> IqgGroup {
    let delta = select(0.125, -0.125, neg);
    let at = params.plane2 + 2u * idx;
    return IqgGroup(sc, iqg_i8x4(w[at], delta), iqg_i8x4(w[at + 1u], delta));
}
#endif

// Group l (0..3) of sub-block ib of block g (plane-0 words from `base`).
fn iqg_group(g: u32, base: u32, ib: u32, l: u32) -> IqgGroup {
#ifdef TYPE_IQ2_XXS
    let d = plane_f16(params.plane1, g);
    let a0 = w[base + 2u * ib];
    let a1 = w[base + 2u * ib + 1u];
    let sc = iqg_half_step(d, a1 >> 28u, 0.25);
    return iqg_point8((a0 >> (8u * l)) & 255u, iqg_ksigns(a1 >> (7u * l)), sc);
#endif
#ifdef TYPE_IQ2_XS
    let d = plane_f16(params.plane1, g);
    let q = (w[base + 2u * ib + l / 2u] >> (16u * (l % 2u))) & 0xffffu;
    let s = (w_byte(base + 16u, ib) >> (4u * (l / 2u))) & 15u;
    return iqg_point8(q & 511u, iqg_ksigns(q >> 9u), iqg_half_step(d, s, 0.25));
#endif
#ifdef TYPE_IQ2_S
    let d = plane_f16(params.plane1, g);
    let qh = w_byte(base + 16u, ib);
    let idx = w_byte(base, 4u * ib + l) | ((qh << (8u - 2u * l)) & 0x300u);
    let s = (w_byte(base + 18u, ib) >> (4u * (l / 2u))) & 15u;
    return iqg_point8(idx, w_byte(base + 8u, 4u * ib + l), iqg_half_step(d, s, 0.25));
#endif
#ifdef TYPE_IQ3_XXS
    let d = plane_f16(params.plane1, g);
    let aux = w[base + 16u + ib];
    let i1 = w_byte(base, 8u * ib + 2u * l);
    let i2 = w_byte(base, 8u * ib + 2u * l + 1u);
    return iqg_point4x2(i1, i2, iqg_ksigns(aux >> (7u * l)), iqg_half_step(d, aux >> 28u, 0.5));
#endif
#ifdef TYPE_IQ3_S
    let d = plane_f16(params.plane1, g);
    let qh = w_byte(base + 16u, ib);
    let i1 = w_byte(base, 8u * ib + 2u * l) | ((qh << (8u - 2u * l)) & 256u);
    let i2 = w_byte(base, 8u * ib + 2u * l + 1u) | ((qh << (7u - 2u * l)) & 256u);
    let s = (w_byte(base + 26u, ib / 2u) >> (4u * (ib % 2u))) & 15u;
    return iqg_point4x2(i1, i2, w_byte(base + 18u, 4u * ib + l), d * f32(1u + 2u * s));
#endif
#ifdef TYPE_IQ1_S
    let d = plane_f16(params.plane1, g);
    let qh = (w[base + 8u + ib / 2u] >> (16u * (ib % 2u))) & 0xffffu;
    let idx = w_byte(base, 4u * ib + l) | (((qh >> (3u * l)) & 7u) << 8u);
    return iqg_iq1(idx, (qh & 0x8000u) != 0u, d * f32(2u * ((qh >> 12u) & 7u) + 1u));
#endif
#ifdef TYPE_IQ1_M
    let s01 = w[base + 12u];
    let s23 = w[base + 13u];
    let bits = ((s01 & 0xffffu) >> 12u) | ((s01 >> 24u) & 0xf0u) | ((s23 >> 4u) & 0xf00u)
        | ((s23 >> 16u) & 0xf000u);
    let d = bytes_f16_to_f32(bits);
    let sw = select(s01, s23, ib >= 4u);
    let sc = (sw >> (16u * ((ib / 2u) % 2u))) & 0xffffu;
    let s = (sc >> (6u * (ib % 2u) + 3u * (l / 2u))) & 7u;
    let qh = w_byte(base + 8u, 2u * ib + l / 2u);
    let idx = w_byte(base, 4u * ib + l) | ((qh << (8u - 4u * (l % 2u))) & 0x700u);
    let neg = (qh & select(0x80u, 0x08u, l % 2u == 0u)) != 0u;
    return iqg_iq1(idx, neg, d * f32(2u * s + 1u));
#endif
}

fn wu_load(r: u32, u: u32) -> WU {
    let g = r * params.nb + u / 8u;
    let base = g * IQG_WORDS;
    var out: WU;
    for (var l = 0u; l < 4u; l++) {
        let grp = iqg_group(g, base, u % 8u, l);
        out.sc[l] = grp.sc;
        out.q[2u * l] = grp.lo;
        out.q[2u * l + 1u] = grp.hi;
    }
    return out;
}

fn wu_dot(wu: WU, t: u32, k0: u32, acc: vec4<f32>) -> vec4<f32> {
    var q = wu.q;
    var a = acc.x;
    for (var l = 0u; l < 4u; l++) {
        var s = q[2u * l] * xq(t, k0 + 8u * l);
        s = fma(q[2u * l + 1u], xq(t, k0 + 8u * l + 4u), s);
        a = fma(wu.sc[l], (s.x + s.y) + (s.z + s.w), a);
    }
    return vec4<f32>(a, 0.0, 0.0, 0.0);
}

// Exact: the scale times a coordinate (or IQ1's g + delta) is exact in f32, as on the CPU.
fn w_get4(r: u32, k: u32) -> vec4<f32> {
    let u = k / 32u;
    let g = r * params.nb + u / 8u;
    let e = k % 32u;
    let grp = iqg_group(g, g * IQG_WORDS, u % 8u, e / 8u);
    return select(grp.lo, grp.hi, (e % 8u) >= 4u) * grp.sc;
}
#endif
