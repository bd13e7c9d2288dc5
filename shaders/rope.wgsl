// rope.wgsl: rotary position embedding on x [n_tokens, n_heads, head_dim] (row-major), as
// ggml_rope_ext, YaRN included:
//   theta(t, i) = f32(pos[t]) * freqs[i],  i in 0..n_rot/2
//   freqs[i]    = freq_scale * freq_base^(-2i/n_rot) / freq_factor[i]  (host-built table, f32;
//                 with YaRN freq_scale becomes freq_scale (1 - r_i) + r_i, r_i YaRN's ramp)
//   s           = freqs[n_rot/2]  (cos/sin scale: YaRN's mscale, else 1)
//   (y0, y1)    = (x0 c - x1 s', x0 s' + x1 c),  c = s cos θ, s' = s sin θ
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
//           4 freqs (read, f32 [n_rot/2 + 1]: frequencies, then the cos/sin scale).

#include "common/rope_angle.wgsl"

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
@group(0) @binding(4) var<storage, read> freqs: array<f32>; // [n_rot / 2 + 1]

override WG_SIZE: u32 = 64u;

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
    let p = rope_pair(t, params.n_heads, params.head_dim, params.n_rot);
    if (p.i >= params.n_rot / 2u) {
        // Pass-through pair (2i, 2i + 1).
#ifndef IN_PLACE
        dst[p.i0] = src[p.i0];
        dst[p.i1] = src[p.i1];
#endif
        return;
    }
    let scale = freqs[params.n_rot / 2u];
    let y = rope_rotate(load_x(p.i0), load_x(p.i1), pos[p.token], freqs[p.i], scale);
    dst[p.i0] = y.x;
    dst[p.i1] = y.y;
}
