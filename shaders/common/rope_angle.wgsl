// common/rope_angle.wgsl: what rope.wgsl and rope_kv.wgsl share: the angle reduction (exact
// Payne-Hanek reduction of theta to [-π, π] in integer arithmetic, see reduce_angle), the
// rotation of one pair (rope_rotate, or rope_cos_sin once and rope_apply per pair) and the
// element indices of a pair (rope_pair; NEOX from the includer's variant).

// 1/(2π) as a 0.64 fixed-point fraction: floor(2^64 / 2π) = INV_TWO_PI_HI:INV_TWO_PI_LO.
const INV_TWO_PI_HI: u32 = 0x28be60dbu;
const INV_TWO_PI_LO: u32 = 0x9391054au;
// 2π / 2^32: one unit of a 0.32 fixed-point turn, in radians.
const TURN_UNIT: f32 = 1.462918119976564e-9;

// The 64-bit product a * b as (low word, high word).
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let lo = (p00 & 0xffffu) | (mid << 16u);
    let hi = a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(lo, hi);
}

// Bits s..s+31 (s in 1..63) of the 96-bit number w.z:w.y:w.x.
fn bits_at(w: vec3<u32>, s: u32) -> u32 {
    if (s >= 32u) {
        let sh = s - 32u;
        if (sh == 0u) {
            return w.y;
        }
        return (w.y >> sh) | (w.z << (32u - sh));
    }
    return (w.x >> s) | (w.y << (32u - s));
}

// The same angle as x, in [-π, π]: x - 2πk for the nearest integer k, computed exactly on the
// f32 value x (Payne-Hanek in integers: x = m·2^e, frac(x / 2π) from m times the 64-bit fraction
// of 1/(2π)), so neither the driver's sin/cos range reduction nor fma fusion matter. Error about
// 2e-7 rad. |x| < 2 is returned as is; |x| >= 2^33 (far past any position × frequency) too.
fn reduce_angle(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    let biased_exp = (bits >> 23u) & 0xffu;
    if (biased_exp < 128u || biased_exp >= 160u) {
        return x;
    }
    let m = (bits & 0x7fffffu) | 0x800000u; // |x| = m · 2^(biased_exp - 150)
    let lo = mul_wide(m, INV_TWO_PI_LO);
    let hi = mul_wide(m, INV_TWO_PI_HI);
    let mid = lo.y + hi.x;
    let carry = select(0u, 1u, mid < lo.y);
    let product = vec3<u32>(lo.x, mid, hi.y + carry); // m · floor(2^64 / 2π)
    // frac(|x| / 2π) as a 0.32 fraction: bits 182 - biased_exp .. +31 of the product.
    let turn = bitcast<i32>(bits_at(product, 182u - biased_exp)); // [-1/2, 1/2) turn
    let coarse = turn & ~0xff; // both parts convert to f32 exactly
    let r = f32(coarse) * TURN_UNIT + f32(turn - coarse) * TURN_UNIT;
    return select(r, -r, (bits >> 31u) != 0u);
}

// (cos θ, sin θ) · scale for θ = pos * freq, reduced: the angle of rope_rotate, for callers
// that rotate several pairs by it (rope_kv.wgsl: every head of a token at one pair index).
// scale is the last entry of the RoPE table (src/kernels/ops/rope.rs, rope_table): YaRN's
// mscale, or 1, which leaves every bit as it was.
fn rope_cos_sin(pos: i32, freq: f32, scale: f32) -> vec2<f32> {
    let theta = reduce_angle(f32(pos) * freq);
    return vec2<f32>(cos(theta), sin(theta)) * scale;
}

// The pair rotated by the angle whose (cos, sin) is cs: (x0 c - x1 s, x0 s + x1 c).
fn rope_apply(x0: f32, x1: f32, cs: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(x0 * cs.x - x1 * cs.y, x0 * cs.y + x1 * cs.x);
}

// The rotated pair (x0 cos θ - x1 sin θ, x0 sin θ + x1 cos θ) for θ = pos * freq, cos and sin
// times scale, as rope.wgsl writes it (every kernel uses these expressions, so their bits agree).
fn rope_rotate(x0: f32, x1: f32, pos: i32, freq: f32, scale: f32) -> vec2<f32> {
    return rope_apply(x0, x1, rope_cos_sin(pos, freq, scale));
}

// Pair t (flat over token, head, pair) of x [n_tokens, n_heads, head_dim]: the first element of
// its head row (base), its two elements (i0, i1: (2i, 2i + 1), or with NEOX (i, i + n_rot / 2)),
// its rotation index i within the head and its token. Pairs with i >= n_rot / 2 pass through
// (both modes leave dims n_rot..head_dim unchanged; i0, i1 are then 2i, 2i + 1).
struct RopePair {
    base: u32,
    i0: u32,
    i1: u32,
    i: u32,
    token: u32,
}

fn rope_pair(t: u32, n_heads: u32, head_dim: u32, n_rot: u32) -> RopePair {
    let half_dim = head_dim / 2u;
    var p: RopePair;
    p.i = t % half_dim;
    let head_row = t / half_dim; // token * n_heads + head
    p.token = head_row / n_heads;
    p.base = head_row * head_dim;
    p.i0 = p.base + 2u * p.i;
    p.i1 = p.i0 + 1u;
#ifdef NEOX
    if (p.i < n_rot / 2u) {
        p.i0 = p.base + p.i;
        p.i1 = p.base + p.i + n_rot / 2u;
    }
#endif
    return p;
}
