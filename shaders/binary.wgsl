// binary.wgsl: elementwise f32 ops over n elements (any shape, flattened row-major).
//   OP_ADD    y[i] = a[i] + b[i % n_b]  (n_b = n: same shape; n_b = n_cols: a row vector
//             broadcast over every row of a [n / n_cols, n_cols])
//   OP_SCALE  y[i] = a[i] * scale
//   OP_SOFTCAP y[i] = scale * tanh(a[i] * (1 / scale))  (Gemma's final logit soft-cap)
// Exactly one OP_* per variant (Rust side: src/kernels/ops/binary.rs).
//   IN_PLACE  a is read from and y written to binding 2 (binding 1 absent).
// One invocation per element.
// Dispatch: 1D or 2D over ceil(n / WG_SIZE) groups; t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid.
// Bindings: 0 uniform Params, 1 a (read), 2 dst y (read_write), 3 b (read, OP_ADD only).

// Mirrors BinaryParams in src/kernels/ops/binary.rs (16 bytes).
struct Params {
    n: u32,
    n_b: u32, // OP_ADD: elements of b, >= 1, divides n
    scale: f32, // OP_SCALE: the factor; OP_SOFTCAP: the cap
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
#ifndef IN_PLACE
@group(0) @binding(1) var<storage, read> a: array<f32>; // [n]
#endif
@group(0) @binding(2) var<storage, read_write> dst: array<f32>; // [n]
#ifdef OP_ADD
@group(0) @binding(3) var<storage, read> b: array<f32>; // [n_b]
#endif

override WG_SIZE: u32 = 64u;

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    if (t >= params.n) {
        return;
    }
#ifdef IN_PLACE
    let x = dst[t];
#else
    let x = a[t];
#endif
#ifdef OP_ADD
    dst[t] = x + b[t % params.n_b];
#endif
#ifdef OP_SCALE
    dst[t] = x * params.scale;
#endif
#ifdef OP_SOFTCAP
    dst[t] = params.scale * tanh(x * (1.0 / params.scale));
#endif
}
