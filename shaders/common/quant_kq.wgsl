// common/quant_kq.wgsl: k-quants with a scale per 16 elements, Q2_K, Q3_K, Q6_K (decoder
// interface: common/quant_common.wgsl). 256-element super-blocks; a unit is a 64-element chunk
// c of super-block b (u = 4b + c, UNIT = 64), i.e. half n = c / 2, second quarter-pair c % 2.
// Repacked planes (the trailing f16 scales move to their own plane so plane 0 is word aligned):
//   Q2_K  plane 0: 20 words/block: w0..3 = scales[16] (sc | m << 4), w4..19 = qs[64]
//         plane 1: d | dmin << 16, 1 word/block
//   Q3_K  plane 0: 27 words/block: w0..7 = hmask[32], w8..23 = qs[64], w24..26 = scales[12]
//         plane 1: d (f16)
//   Q6_K  plane 0: 52 words/block: w0..31 = ql[128], w32..47 = qh[64], w48..51 = scales[16] (i8)
//         plane 1: d (f16)
// Decoded unit: q[v] = elements 4v..4v+3 of the unit (v = 0..15) as exact integers, and one
// scale per 16-element group (groups = q[4g..4g+4]).
//
// Unit dot (fixed order), for group g = 0..3: s = q[4g] * x; s = fma(q[4g+i], x, s), i = 1..3;
// acc = fma(ds[g], s, acc); Q2_K also sx = sum of the x vec4s in order, acc = fma(-dm[g], sx, acc).

#ifdef TYPE_Q2_K
#define KQ16
#define KQ16_MIN
const KQ_WORDS: u32 = 20u;
#endif
#ifdef TYPE_Q3_K
#define KQ16
const KQ_WORDS: u32 = 27u;
#endif
#ifdef TYPE_Q6_K
#define KQ16
const KQ_WORDS: u32 = 52u;
#endif

#ifdef KQ16
const UNIT: u32 = 64u;

struct WU {
    ds: vec4<f32>, // scale of each 16-element group
    dm: vec4<f32>, // Q2_K: dmin * m of each group (0 otherwise)
    q: array<vec4<f32>, 16>,
}

// Elements 4v..4v+3 (v = 0..15) of chunk c of the block at `base`, as exact integers.
fn kq16_q4(base: u32, c: u32, v: u32) -> vec4<f32> {
    let n = c / 2u;
#ifdef TYPE_Q6_K
    // Quarter r = 2 (c % 2) + v / 8, l = 4 (v % 8) + e: ql byte 64n + 32 (r % 2) + l, nibble
    // r / 2; qh byte 32n + l, bits 2r, 2r + 1.
    let r = 2u * (c % 2u) + v / 8u;
    let i = v % 8u;
    let lo = bytes_field(w[base + 16u * n + 8u * (r % 2u) + i], 4u * (r / 2u), 15u);
    let hi = bytes_field(w[base + 32u + 8u * n + i], 2u * r, 3u);
    return lo + hi * 16.0 - vec4<f32>(32.0);
#else
    // j = 2 (c % 2) + v / 8 (2-bit plane), h = (v / 4) % 2, l = 4 (v % 4) + e:
    // qs byte 32n + 16h + l at shift 2j.
    let j = 2u * (c % 2u) + v / 8u;
    let h = (v / 4u) % 2u;
    let i = v % 4u;
#ifdef TYPE_Q2_K
    return bytes_field(w[base + 4u + 8u * n + 4u * h + i], 2u * j, 3u);
#else
    let q2 = bytes_field(w[base + 8u + 8u * n + 4u * h + i], 2u * j, 3u);
    let hb = vec4<f32>(byte_bits(w[base + 4u * h + i], 4u * n + j));
    return q2 + hb * 4.0 - vec4<f32>(4.0);
#endif
#endif
}

// (scale, min-scale) of 16-element group k (0..15) of the block at `base`, split-local row r.
fn kq16_scale(base: u32, g: u32, k: u32) -> vec2<f32> {
#ifdef TYPE_Q6_K
    let sc = extractBits(i32(w_byte(base + 48u, k)), 0u, 8u);
    return vec2<f32>(plane_f16(params.plane1, g) * f32(sc), 0.0);
#endif
#ifdef TYPE_Q3_K
    let s = base + 24u;
    var low = w_byte(s, k % 8u);
    if (k >= 8u) {
        low = low >> 4u;
    }
    let high = (w_byte(s, 8u + k % 4u) >> (2u * (k / 4u))) & 3u;
    let sc = i32((low & 15u) | (high << 4u)) - 32;
    return vec2<f32>(plane_f16(params.plane1, g) * f32(sc), 0.0);
#endif
#ifdef TYPE_Q2_K
    let sc = w_byte(base, k);
    let dd = f16_pair(w[params.plane1 + g]);
    return vec2<f32>(dd.x * f32(sc & 15u), dd.y * f32(sc >> 4u));
#endif
}

fn wu_load(r: u32, u: u32) -> WU {
    let g = r * params.nb + u / 4u;
    let c = u % 4u;
    let base = g * KQ_WORDS;
    var out: WU;
    for (var gr = 0u; gr < 4u; gr++) {
        // Group gr of chunk c is group 4c + gr of the block (both orders are 16-element runs).
        let s = kq16_scale(base, g, 4u * c + gr);
        out.ds[gr] = s.x;
        out.dm[gr] = s.y;
    }
    for (var v = 0u; v < 16u; v++) {
        out.q[v] = kq16_q4(base, c, v);
    }
    return out;
}

fn wu_dot(wu: WU, t: u32, k0: u32, acc: vec4<f32>) -> vec4<f32> {
    var q = wu.q;
    var a = acc;
    for (var gr = 0u; gr < 4u; gr++) {
        let x0 = xq(t, k0 + 16u * gr);
        var s = q[4u * gr] * x0;
#ifdef KQ16_MIN
        var sx = x0;
#endif
        for (var i = 1u; i < 4u; i++) {
            let xv = xq(t, k0 + 16u * gr + 4u * i);
            s = fma(q[4u * gr + i], xv, s);
#ifdef KQ16_MIN
            sx = sx + xv;
#endif
        }
        a = fma(vec4<f32>(wu.ds[gr]), s, a);
#ifdef KQ16_MIN
        a = fma(vec4<f32>(-wu.dm[gr]), sx, a);
#endif
    }
    return a;
}

// Exact: every scale product is exact in f32, so the result rounds once, as on the CPU.
fn w_get4(r: u32, k: u32) -> vec4<f32> {
    let g = r * params.nb + k / 256u;
    let base = g * KQ_WORDS;
    let c = (k % 256u) / 64u;
    let v = (k % 64u) / 4u;
    let s = kq16_scale(base, g, 4u * c + v / 4u);
    let q = kq16_q4(base, c, v);
#ifdef KQ16_MIN
    return q * s.x - vec4<f32>(s.y);
#else
    return q * s.x;
#endif
}
#endif
