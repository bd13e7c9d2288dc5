// common/quant_legacy.wgsl: the 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (decoder
// interface: common/quant_common.wgsl). A unit is one block (UNIT = 32), decoded into
// q[0..8] (q[i] = elements 4i..4i+3 as exact small integers in f32) plus its scale d (and
// minimum m for the _1 types).
//
// Repacked planes (entry g = r * nb + b; src/kernels/matmul/layout.rs):
//   Q8_0  plane 0: qs, 8 words/block      plane 1: d (f16)
//   Q4_0  plane 0: qs, 4 words/block      plane 1: d (f16)
//   Q4_1  plane 0: qs, 4 words/block      plane 1: d | m << 16, 1 word/block
//   Q5_0  plane 0: qs, 4 words/block      plane 1: qh, 1 word/block   plane 2: d (f16)
//   Q5_1  plane 0: qs, 4 words/block      plane 1: qh, 1 word/block   plane 2: d | m << 16
// Nibble formats: byte j of qs holds element j (low nibble) and j + 16 (high nibble); the fifth
// bit of element e is bit e of qh.
//
// Unit dot (fixed order): s = q[0] * x[0..4]; s = fma(q[i], x[4i..4i+4], s) for i = 1..7;
// acc = fma(d, (s.x + s.y) + (s.z + s.w), acc) with a scalar acc; with a minimum also
// sx = x[0..4] + x[4..8] + ... (in order) and then acc = fma(m, (sx.x + sx.y) + (sx.z + sx.w),
// acc). A scalar running sum: a vec4 one costs 4 multiplies and 4 adds per term, which a
// CPU driver runs without FMA (an 8-column verify step on lavapipe: 8 % less matmul time).

#include "common/quant_legacy_units.wgsl"

#ifdef LEGACY_BLOCK
const UNIT: u32 = 32u;

struct WU {
    d: f32,
    m: f32,
    q: array<vec4<f32>, 8>,
}

// The fifth bits of block g (Q5_*; 0 for the other formats).
fn legacy_qh(g: u32) -> u32 {
#ifdef TYPE_Q5_0
    return w[params.plane1 + g];
#else
#ifdef TYPE_Q5_1
    return w[params.plane1 + g];
#else
    return 0u;
#endif
#endif
}

// Elements 4i..4i+3 (i = 0..7) of block g, as exact integers (before d, m).
fn legacy_q4(g: u32, i: u32) -> vec4<f32> {
#ifdef TYPE_Q8_0
    return legacy_elems(w[g * 8u + i], 0u, i);
#else
    return legacy_elems(w[g * 4u + (i & 3u)], legacy_qh(g), i);
#endif
}

// (d, m) of block g (m = 0 for the symmetric types).
fn legacy_dm(g: u32) -> vec2<f32> {
#ifdef TYPE_Q8_0
    return vec2<f32>(plane_f16(params.plane1, g), 0.0);
#endif
#ifdef TYPE_Q4_0
    return vec2<f32>(plane_f16(params.plane1, g), 0.0);
#endif
#ifdef TYPE_Q4_1
    return f16_pair(w[params.plane1 + g]);
#endif
#ifdef TYPE_Q5_0
    return vec2<f32>(plane_f16(params.plane2, g), 0.0);
#endif
#ifdef TYPE_Q5_1
    return f16_pair(w[params.plane2 + g]);
#endif
}

// Each qs word is loaded once (a nibble word holds q[j] and q[j + 4]).
fn wu_load(r: u32, u: u32) -> WU {
    let g = r * params.nb + u;
    let dm = legacy_dm(g);
    var out: WU;
    out.d = dm.x;
    out.m = dm.y;
#ifdef TYPE_Q8_0
    for (var i = 0u; i < 8u; i++) {
        out.q[i] = legacy_elems(w[g * 8u + i], 0u, i);
    }
#else
    let qh = legacy_qh(g);
    for (var j = 0u; j < 4u; j++) {
        let word = w[g * 4u + j];
        out.q[j] = legacy_elems(word, qh, j);
        out.q[j + 4u] = legacy_elems(word, qh, j + 4u);
    }
#endif
    return out;
}

fn wu_dot(wu: WU, t: u32, k0: u32, acc: vec4<f32>) -> vec4<f32> {
    var q = wu.q;
    let x0 = xq(t, k0);
    var s = q[0] * x0;
#ifdef LEGACY_MIN
    var sx = x0;
#endif
    for (var i = 1u; i < 8u; i++) {
        let xv = xq(t, k0 + 4u * i);
        s = fma(q[i], xv, s);
#ifdef LEGACY_MIN
        sx = sx + xv;
#endif
    }
    // The running sum is a scalar in acc.x (y, z, w stay 0, so the caller's final
    // (acc.x + acc.y) + (acc.z + acc.w) is acc.x: it is never -0, being a sum started at +0).
    let ss = legacy_hsum(s);
#ifdef LEGACY_MIN
    let sxs = legacy_hsum(sx);
    return vec4<f32>(fma(wu.m, sxs, fma(wu.d, ss, acc.x)), 0.0, 0.0, 0.0);
#else
    return vec4<f32>(fma(wu.d, ss, acc.x), 0.0, 0.0, 0.0);
#endif
}

// Exact: d * q is exact in f32 (11 x 8 significant bits), so only "+ m" rounds, as on the CPU.
fn w_get4(r: u32, k: u32) -> vec4<f32> {
    let g = r * params.nb + k / 32u;
    let dm = legacy_dm(g);
    let q = legacy_q4(g, (k % 32u) / 4u);
#ifdef LEGACY_MIN
    return q * dm.x + vec4<f32>(dm.y);
#else
    return q * dm.x;
#endif
}
#endif
