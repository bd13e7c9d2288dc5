// glu.wgsl: gated linear units on separate gate and up buffers, all f32 [n_rows, n_ff] flattened
// to n elements (as ggml_swiglu_split / ggml_geglu_split):
//   SWIGLU  y = silu(g) * u,  silu(g) = g / (1 + exp(-g))
//   GEGLU   y = gelu(g) * u,  gelu(g) = 0.5 g (1 + tanh(√(2/π) g (1 + 0.044715 g²)))
// tanh(z) is evaluated as 1 - 2 / (exp(2z) + 1), which stays finite for large |z| (exp → inf
// gives 1, exp → 0 gives -1). ggml's CPU backend reads gelu from an f16 table; its GPU backends
// use this f32 formula.
//
// One invocation per element. Exactly one of SWIGLU / GEGLU per variant
// (Rust side: src/kernels/ops/glu.rs).
// Dispatch: 1D or 2D over ceil(n / WG_SIZE) groups; t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid.
// Bindings: 0 uniform Params, 1 gate (read), 2 up (read), 3 dst (read_write).

#include "common/glu_act.wgsl"

// Mirrors GluParams in src/kernels/ops/glu.rs (16 bytes).
struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>; // [n]
@group(0) @binding(2) var<storage, read> up: array<f32>; // [n]
@group(0) @binding(3) var<storage, read_write> dst: array<f32>; // [n]

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
    dst[t] = glu_act(gate[t]) * up[t];
}
