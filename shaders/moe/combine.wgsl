// moe/combine.wgsl: the weighted sum of a token row's expert outputs, in slot order, plus (with
// SHARED) qwen35moe's shared expert scaled by the sigmoid of its gate logit:
//   out[c, i] = Σ_{j = 0..n_used} w[c, j] · y[c · n_used + j, i]      (j increasing)
//   SHARED:     out[c, i] = out[c, i] + sigmoid(g[c]) · s[c, i]
// One invocation per output element; a row's bits depend on its own inputs only.
// Bindings: 0 uniform Params, 1 y [m · n_used, d], 2 weights [m, n_used], 3 out [m, d]
// (read_write); SHARED: 4 s [m, d], 5 g [m] (gate logits).

// Mirrors CombineParams in src/kernels/ops/moe.rs (16 bytes).
struct Params {
    m: u32,
    d: u32,
    n_used: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
#ifdef SHARED
@group(0) @binding(4) var<storage, read> s: array<f32>;
@group(0) @binding(5) var<storage, read> g: array<f32>;
#endif

override WG_SIZE: u32 = 64u;

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.y * nwg.x * WG_SIZE + gid.x;
    if (t >= params.m * params.d) {
        return;
    }
    let c = t / params.d;
    let i = t % params.d;
    var acc = 0.0;
    for (var j = 0u; j < params.n_used; j++) {
        let z = c * params.n_used + j;
        acc = acc + w[z] * y[z * params.d + i];
    }
#ifdef SHARED
    let gate = 1.0 / (1.0 + exp(-g[c]));
    acc = acc + gate * s[t];
#endif
    out[t] = acc;
}
