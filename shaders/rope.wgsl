// rope.wgsl: rotary position embedding on x [n_tokens, n_heads, head_dim] (row-major), as
// ggml_rope_ext without YaRN (ext_factor 0, attn_factor 1):
//   theta(t, i) = f32(pos[t]) * freqs[i],  i in 0..n_rot/2
//   freqs[i]    = freq_scale * freq_base^(-2i/n_rot) / freq_factor[i]  (host-built table, f32)
//   (y0, y1)    = (x0 cos θ - x1 sin θ, x0 sin θ + x1 cos θ)
// where the pair (x0, x1) of rotation i is, within a head:
//   normal (llama)  (2i, 2i + 1)
//   NEOX            (i, i + n_rot/2)
// and elements n_rot..head_dim pass through unchanged (partial rotary dims).
// θ is one f32 product, identical to the CPU oracle's. It is reduced to [-π, π] here in integer
// arithmetic (reduce_angle) before sin/cos, which GPUs only compute accurately on that range;
// sin and cos still differ from the CPU's libm by a few ulp.
//
// One invocation per element pair: n_tokens * n_heads * head_dim/2 invocations.
// Variants (Rust side: src/kernels/ops/rope.rs):
//   NEOX      NEOX pairing (default: normal).
//   IN_PLACE  x is read from and y written to binding 2 (binding 1 absent); pass-through
//             elements are then left alone.
// Dispatch: 1D or 2D over ceil(pairs / WG_SIZE) groups; t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid.
// Bindings: 0 uniform Params, 1 src x (read), 2 dst y (read_write), 3 pos (read, i32 [n_tokens]),
//           4 freqs (read, f32 [n_rot/2]).

// Mirrors RopeParams in src/kernels/ops/rope.rs (16 bytes).
struct Params {
    n_tokens: u32,
    n_heads: u32,
    head_dim: u32, // even
    n_rot: u32,    // even, <= head_dim
}

@group(0) @binding(0) var<uniform> params: Params;
#ifndef IN_PLACE
@group(0) @binding(1) var<storage, read> src: array<f32>; // [n_tokens, n_heads, head_dim]
#endif
@group(0) @binding(2) var<storage, read_write> dst: array<f32>; // [n_tokens, n_heads, head_dim]
@group(0) @binding(3) var<storage, read> pos: array<i32>; // [n_tokens]
@group(0) @binding(4) var<storage, read> freqs: array<f32>; // [n_rot / 2]

override WG_SIZE: u32 = 64u;

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

fn load_x(i: u32) -> f32 {
#ifdef IN_PLACE
    return dst[i];
#else
    return src[i];
#endif
}

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    let half_dim = params.head_dim / 2u;
    let n_pairs = params.n_tokens * params.n_heads * half_dim;
    if (t >= n_pairs) {
        return;
    }
    let i = t % half_dim;             // pair index within the head
    let head_row = t / half_dim;      // token * n_heads + head
    let token = head_row / params.n_heads;
    let base = head_row * params.head_dim;
    let half_rot = params.n_rot / 2u;

    if (i >= half_rot) {
        // Pass-through pair (2i, 2i + 1): both modes leave n_rot..head_dim unchanged.
#ifndef IN_PLACE
        dst[base + 2u * i] = src[base + 2u * i];
        dst[base + 2u * i + 1u] = src[base + 2u * i + 1u];
#endif
        return;
    }
#ifdef NEOX
    let i0 = base + i;
    let i1 = base + i + half_rot;
#else
    let i0 = base + 2u * i;
    let i1 = base + 2u * i + 1u;
#endif
    let theta = reduce_angle(f32(pos[token]) * freqs[i]);
    let c = cos(theta);
    let s = sin(theta);
    let x0 = load_x(i0);
    let x1 = load_x(i1);
    dst[i0] = x0 * c - x1 * s;
    dst[i1] = x0 * s + x1 * c;
}
