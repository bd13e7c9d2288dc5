// common/quant_kq_min.wgsl: k-quants with a scale and a minimum per 32 elements, Q4_K and Q5_K
// (decoder interface: common/quant_common.wgsl). 256-element super-blocks, already 4-byte
// aligned, so plane 0 is the GGUF block unchanged:
//   Q4_K  36 words/block: w0 = d | dmin << 16, w1..3 = scales[12], w4..35 = qs[128]
//   Q5_K  44 words/block: w0 = d | dmin << 16, w1..3 = scales[12], w4..11 = qh[32], w12..43 = qs
// A unit is one 64-element chunk c of super-block b (u = 4b + c, UNIT = 64): qs bytes
// 32c..32c+32, low nibbles = sub-block 2c (elements 0..31 of the unit), high nibbles = sub-block
// 2c + 1 (elements 32..63); Q5_K's fifth bit of element l of sub-block j is bit j of qh[l].
// Sub-block j has d1 = d * sc[j] and m1 = dmin * m[j] (6-bit scales, llama.cpp get_scale_min_k4).
//
// Unit dot (fixed order), for half h = 0 then 1: s = q[8h] * x; s = fma(q[8h+i], x, s) for
// i = 1..7; sx = sum of the same x vec4s in order; acc = fma(d1, s, acc); acc = fma(-m1, sx, acc).

#ifdef TYPE_Q4_K
#define KQ_MIN
const KQ_WORDS: u32 = 36u;
const KQ_QS: u32 = 4u;
#endif
#ifdef TYPE_Q5_K
#define KQ_MIN
const KQ_WORDS: u32 = 44u;
const KQ_QS: u32 = 12u;
#endif

#ifdef KQ_MIN
const UNIT: u32 = 64u;

struct WU {
    d1: vec2<f32>, // d * sc of sub-blocks 2c, 2c + 1
    m1: vec2<f32>, // dmin * m of sub-blocks 2c, 2c + 1
    q: array<vec4<f32>, 16>,
}

// (sc, m) of sub-block j (0..7) of the block whose word 0 is `base`.
fn kq_scale_min(base: u32, j: u32) -> vec2<f32> {
    let s = base + 1u;
    if (j < 4u) {
        return vec2<f32>(f32(w_byte(s, j) & 63u), f32(w_byte(s, j + 4u) & 63u));
    }
    let c = w_byte(s, j + 4u);
    let sc = (c & 15u) | ((w_byte(s, j - 4u) >> 6u) << 4u);
    let m = (c >> 4u) | ((w_byte(s, j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

// Elements 4i..4i+3 of half h of chunk c of the block at `base`, as exact integers.
fn kq_min_q4(base: u32, c: u32, h: u32, i: u32) -> vec4<f32> {
    var q = bytes_field(w[base + KQ_QS + 8u * c + i], 4u * h, 15u);
#ifdef TYPE_Q5_K
    q = q + vec4<f32>(byte_bits(w[base + 4u + i], 2u * c + h) * 16u);
#endif
    return q;
}

fn wu_load(r: u32, u: u32) -> WU {
    let b = u / 4u;
    let c = u % 4u;
    let base = (r * params.nb + b) * KQ_WORDS;
    let dd = f16_pair(w[base]);
    let sm0 = kq_scale_min(base, 2u * c);
    let sm1 = kq_scale_min(base, 2u * c + 1u);
    var out: WU;
    out.d1 = dd.x * vec2<f32>(sm0.x, sm1.x);
    out.m1 = dd.y * vec2<f32>(sm0.y, sm1.y);
    for (var i = 0u; i < 8u; i++) {
        out.q[i] = kq_min_q4(base, c, 0u, i);
        out.q[8u + i] = kq_min_q4(base, c, 1u, i);
    }
    return out;
}

fn wu_dot(wu: WU, t: u32, k0: u32, acc: vec4<f32>) -> vec4<f32> {
    var q = wu.q;
    var a = acc;
    for (var h = 0u; h < 2u; h++) {
        let x0 = xq(t, k0 + 32u * h);
        var s = q[8u * h] * x0;
        var sx = x0;
        for (var i = 1u; i < 8u; i++) {
            let xv = xq(t, k0 + 32u * h + 4u * i);
            s = fma(q[8u * h + i], xv, s);
            sx = sx + xv;
        }
        a = fma(vec4<f32>(wu.d1[h]), s, a);
        a = fma(vec4<f32>(-wu.m1[h]), sx, a);
    }
    return a;
}

// Exact: d1 = d * sc and m1 = dmin * m are exact, so is d1 * q; only "- m1" rounds, as on the CPU.
fn w_get4(r: u32, k: u32) -> vec4<f32> {
    let base = (r * params.nb + k / 256u) * KQ_WORDS;
    let c = (k % 256u) / 64u;
    let h = (k % 64u) / 32u;
    let dd = f16_pair(w[base]);
    let sm = kq_scale_min(base, 2u * c + h);
    let q = kq_min_q4(base, c, h, (k % 32u) / 4u);
    return q * (dd.x * sm.x) - vec4<f32>(dd.y * sm.y);
}
#endif
