// common/quant_ternary.wgsl: the 1-bit and ternary block formats Q1_0, Q2_0 (ggml's 64-element
// block), Q2_0_G128 / PQ2_0 (PrismML's 128-element block, one define for both), TQ1_0 and TQ2_0
// (decoder interface: common/quant_common.wgsl; CPU decoders and element orders:
// src/quant/ternary.rs). One f16 scale d per block; a weight is +-d (Q1_0) or (q - 1) d with a
// 2-bit code q (0..3; TQ2_0 codes are 0..2 in ggml's files, 3 decodes as 2 d like the CPU) or
// a base-3 digit q (TQ1_0, 0..2).
//
// Repacked planes (the f16 scale moves to plane 1, so plane 0 is whole words):
//   Q1_0       plane 0: qs[16], 4 words/block    plane 1: d (f16)   UNIT 128 (one block)
//   Q2_0       plane 0: qs[16], 4 words/block    plane 1: d (f16)   UNIT 64 (one block)
//   Q2_0_G128  plane 0: qs[32], 8 words/block    plane 1: d (f16)   UNIT 128 (one block)
//   TQ2_0      plane 0: qs[64], 16 words/block   plane 1: d (f16)   UNIT 128 (half h = u % 2:
//              qs words 8h..8h+7)
//   TQ1_0      plane 0: qs[48], qh[4], 13 words  plane 1: d (f16)   UNIT 256 (one block)
// Element orders, as bits of the unit's words (little-endian bytes):
//   Q1_0       element e is bit e % 32 of word e / 32
//   Q2_0(_G128) element e is bits 2 (e % 16), +1 of word e / 16
//   TQ2_0      element 32 l + m of a half is bits 8 (m % 4) + 2 l, +1 of word m / 4
//   TQ1_0      digit n of byte b: c = b; then n times c = (3 c) & 255; digit = (3 c) >> 8 (ggml's
//              ((b 3^n mod 256) 3) >> 8); elements 32 n + m from qs[m] (words 0..7, n < 5),
//              160 + 16 n + m from qs[32 + m] (words 8..11, n < 5), 240 + 4 n + j from qh[j]
//              (word 12, n < 4)
//
// The unit dot multiplies no weight: sign flips and masks pick +-x, one multiply by d per unit.
//   Q1_0: s = sum of (bit ? x : -x) (the sign bit of x xored), in two vec4 chains: sa over
//         words 0, 2 and sb over words 1, 3 (each word's vec4s in increasing element order, word
//         2i before word 2i + 2), then acc = fma(d, sa + sb, acc).
//   2-bit codes (q - 1 = 2 hi + lo - 1): sp = sum of (hi ? x : -x), sl = sum of (lo ? x : +0),
//         each a vec4 chain in the unit's word order (Q2_0: word i, byte j = elements
//         16 i + 4 j; TQ2_0: word i, then bit pair l = elements 32 l + 4 i), then
//         acc = fma(d, sp + sl, acc). (codes 0, 1, 2, 3: -x, -x + x = 0, x, x + x, all exact.)
//   TQ1_0: sp = sum of x over digits 2, sn = sum of x over digits 0 (selects), one vec4 chain
//         each in the order words 0..7 (digits 0..4 inner), words 8..11 (digits 0..4 inner),
//         word 12 (digits 0..3), then acc = fma(d, sp - sn, acc).
// w_get4 computes (f32(q) - 1) * d (or select(-d, d, bit)) like the CPU: exact, one rounding.

#ifdef TYPE_Q1_0
#define TN_SIGNS
const UNIT: u32 = 128u;
const TN_BLOCK_WORDS: u32 = 4u;
const TN_UNIT_WORDS: u32 = 4u;
#endif
#ifdef TYPE_Q2_0
#define TN_CODES
const UNIT: u32 = 64u;
const TN_BLOCK_WORDS: u32 = 4u;
const TN_UNIT_WORDS: u32 = 4u;
#endif
#ifdef TYPE_Q2_0_G128
#define TN_CODES
const UNIT: u32 = 128u;
const TN_BLOCK_WORDS: u32 = 8u;
const TN_UNIT_WORDS: u32 = 8u;
#endif
#ifdef TYPE_TQ2_0
#define TN_TQ2
const UNIT: u32 = 128u;
const TN_BLOCK_WORDS: u32 = 16u;
const TN_UNIT_WORDS: u32 = 8u;
#endif
#ifdef TYPE_TQ1_0
#define TN_TQ1
const UNIT: u32 = 256u;
const TN_BLOCK_WORDS: u32 = 13u;
const TN_UNIT_WORDS: u32 = 13u;
#endif

#ifdef TN_SIGNS
#define TN_ANY
#endif
#ifdef TN_CODES
#define TN_ANY
#define TN_2BIT
#endif
#ifdef TN_TQ2
#define TN_ANY
#define TN_2BIT
#endif
#ifdef TN_TQ1
#define TN_ANY
#endif

#ifdef TN_ANY
// Elements per block (a unit is a block, or half of one for TQ2_0).
const TN_BLOCK: u32 = UNIT * (TN_BLOCK_WORDS / TN_UNIT_WORDS);

struct WU {
    d: f32,
    q: array<u32, TN_UNIT_WORDS>, // the unit's plane-0 words
}

fn wu_load(r: u32, u: u32) -> WU {
    let per_block = TN_BLOCK_WORDS / TN_UNIT_WORDS;
    let g = r * params.nb + u / per_block;
    let base = g * TN_BLOCK_WORDS + (u % per_block) * TN_UNIT_WORDS;
    var out: WU;
    out.d = plane_f16(params.plane1, g);
    for (var i = 0u; i < TN_UNIT_WORDS; i++) {
        out.q[i] = w[base + i];
    }
    return out;
}

// x with its sign flipped where the bit of `nw` that `sh` moves to bit 31 is set (nw = ~word:
// flipped where the weight's bit is clear).
fn tn_flip(x: vec4<f32>, nw: u32, sh: vec4<u32>) -> vec4<f32> {
    let s = (vec4<u32>(nw) << sh) & vec4<u32>(0x80000000u);
    return bitcast<vec4<f32>>(bitcast<vec4<u32>>(x) ^ s);
}

// x where the bit of `word` that `sh` moves to bit 31 is set, else +0.
fn tn_keep(x: vec4<f32>, word: u32, sh: vec4<u32>) -> vec4<f32> {
    let m = bitcast<vec4<u32>>(bitcast<vec4<i32>>(vec4<u32>(word) << sh) >> vec4<u32>(31u));
    return bitcast<vec4<f32>>(bitcast<vec4<u32>>(x) & m);
}
#endif

#ifdef TN_SIGNS
fn wu_dot(wu: WU, t: u32, k0: u32, acc: vec4<f32>) -> vec4<f32> {
    var q = wu.q;
    var sa = vec4<f32>(0.0);
    var sb = vec4<f32>(0.0);
    for (var i = 0u; i < 2u; i++) {
        let na = ~q[2u * i];
        let nb = ~q[2u * i + 1u];
        for (var j = 0u; j < 8u; j++) {
            // Bits 4j..4j+3 of the word to bit 31.
            let sh = vec4<u32>(31u - 4u * j) - vec4<u32>(0u, 1u, 2u, 3u);
            sa = sa + tn_flip(xq(t, k0 + 64u * i + 4u * j), na, sh);
            sb = sb + tn_flip(xq(t, k0 + 64u * i + 32u + 4u * j), nb, sh);
        }
    }
    return fma(vec4<f32>(wu.d), sa + sb, acc);
}

fn w_get4(r: u32, k: u32) -> vec4<f32> {
    let g = r * params.nb + k / TN_BLOCK;
    let e = k % TN_BLOCK;
    let word = w[g * TN_BLOCK_WORDS + e / 32u];
    let s = e % 32u;
    let bits = (vec4<u32>(word) >> vec4<u32>(s, s + 1u, s + 2u, s + 3u)) & vec4<u32>(1u);
    let d = plane_f16(params.plane1, g);
    return select(vec4<f32>(-d), vec4<f32>(d), bits == vec4<u32>(1u));
}
#endif

#ifdef TN_2BIT
// One vec4 of 2-bit codes whose low bits are at positions p of `word` (nw = ~word).
fn tn_code_sums(x: vec4<f32>, word: u32, nw: u32, p: vec4<u32>, sp: ptr<function, vec4<f32>>,
                sl: ptr<function, vec4<f32>>) {
    *sp = *sp + tn_flip(x, nw, vec4<u32>(30u) - p);
    *sl = *sl + tn_keep(x, word, vec4<u32>(31u) - p);
}

fn wu_dot(wu: WU, t: u32, k0: u32, acc: vec4<f32>) -> vec4<f32> {
    var q = wu.q;
    var sp = vec4<f32>(0.0);
    var sl = vec4<f32>(0.0);
    for (var i = 0u; i < TN_UNIT_WORDS; i++) {
        let word = q[i];
        let nw = ~word;
#ifdef TN_TQ2
        for (var l = 0u; l < 4u; l++) {
            let p = vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(2u * l);
            tn_code_sums(xq(t, k0 + 32u * l + 4u * i), word, nw, p, &sp, &sl);
        }
#else
        for (var j = 0u; j < 4u; j++) {
            let p = vec4<u32>(8u * j) + vec4<u32>(0u, 2u, 4u, 6u);
            tn_code_sums(xq(t, k0 + 16u * i + 4u * j), word, nw, p, &sp, &sl);
        }
#endif
    }
    return fma(vec4<f32>(wu.d), sp + sl, acc);
}

fn w_get4(r: u32, k: u32) -> vec4<f32> {
    let g = r * params.nb + k / TN_BLOCK;
    let e = k % TN_BLOCK;
#ifdef TN_TQ2
    // Half h = e / 128, bit pair l = (e % 128) / 32, byte m = e % 32 of the half.
    let word = w[g * TN_BLOCK_WORDS + 8u * (e / 128u) + (e % 32u) / 4u];
    let p = vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(2u * ((e % 128u) / 32u));
#else
    let word = w[g * TN_BLOCK_WORDS + e / 16u];
    let p = vec4<u32>(2u * (e % 16u)) + vec4<u32>(0u, 2u, 4u, 6u);
#endif
    let c = (vec4<u32>(word) >> p) & vec4<u32>(3u);
    return (vec4<f32>(c) - vec4<f32>(1.0)) * plane_f16(params.plane1, g);
}
#endif

#ifdef TN_TQ1
// The four bytes of `word` (byte 0 first).
fn tn_bytes(word: u32) -> vec4<u32> {
    return (vec4<u32>(word) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
}

// One vec4 of digits: tt = 3 c (digit = tt >> 8, 0..2); x joins sp where the digit is 2 and sn
// where it is 0.
fn tn_trit_sums(x: vec4<f32>, tt: vec4<u32>, sp: ptr<function, vec4<f32>>,
                sn: ptr<function, vec4<f32>>) {
    *sp = *sp + select(vec4<f32>(0.0), x, tt >= vec4<u32>(512u));
    *sn = *sn + select(vec4<f32>(0.0), x, tt < vec4<u32>(256u));
}

fn wu_dot(wu: WU, t: u32, k0: u32, acc: vec4<f32>) -> vec4<f32> {
    var q = wu.q;
    var sp = vec4<f32>(0.0);
    var sn = vec4<f32>(0.0);
    for (var i = 0u; i < 8u; i++) {
        var c = tn_bytes(q[i]);
        for (var n = 0u; n < 5u; n++) {
            let tt = c * 3u;
            c = tt & vec4<u32>(255u);
            tn_trit_sums(xq(t, k0 + 32u * n + 4u * i), tt, &sp, &sn);
        }
    }
    for (var i = 0u; i < 4u; i++) {
        var c = tn_bytes(q[8u + i]);
        for (var n = 0u; n < 5u; n++) {
            let tt = c * 3u;
            c = tt & vec4<u32>(255u);
            tn_trit_sums(xq(t, k0 + 160u + 16u * n + 4u * i), tt, &sp, &sn);
        }
    }
    var c = tn_bytes(q[12]);
    for (var n = 0u; n < 4u; n++) {
        let tt = c * 3u;
        c = tt & vec4<u32>(255u);
        tn_trit_sums(xq(t, k0 + 240u + 4u * n), tt, &sp, &sn);
    }
    return fma(vec4<f32>(wu.d), sp - sn, acc);
}

fn w_get4(r: u32, k: u32) -> vec4<f32> {
    let g = r * params.nb + k / TN_BLOCK;
    let e = k % TN_BLOCK;
    var word = 12u;
    var n = (e - 240u) / 4u;
    if (e < 160u) {
        word = (e % 32u) / 4u;
        n = e / 32u;
    } else if (e < 240u) {
        word = 8u + (e % 16u) / 4u;
        n = (e - 160u) / 16u;
    }
    var c = tn_bytes(w[g * TN_BLOCK_WORDS + word]);
    for (var i = 0u; i < n; i++) {
        c = (c * 3u) & vec4<u32>(255u);
    }
    let digit = (c * 3u) >> vec4<u32>(8u);
    return (vec4<f32>(digit) - vec4<f32>(1.0)) * plane_f16(params.plane1, g);
}
#endif
