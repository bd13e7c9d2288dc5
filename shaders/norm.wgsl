// norm.wgsl: RMSNorm over the rows of an f32 matrix x [n_rows, n_cols] (row-major):
//   y[r, c] = (x[r, c] * s_r) * w[c],  s_r = 1 / sqrt(Σ_c x[r, c]² / n_cols + eps)
// as ggml_rms_norm followed by ggml_mul (the product x * s_r is rounded before w multiplies).
// Without HAS_WEIGHT, y = x * s_r (q/k norm per head: n_cols = head_dim, rows = tokens × heads).
// With ADD_RESIDUAL (a residual add fused into the next norm): binding 1 is the residual stream
// r, updated first, x = r + y_in (y_in: what binding 2 holds on entry), stored back to r, and
// then normed into binding 2: the bits of binary.wgsl's in-place add followed by this norm.
//
// One workgroup per row; lane l accumulates x² over columns l, l + WG_SIZE, … in that order and
// the lane partials are combined by common/reduce.wgsl in a fixed order: a row gives the same
// bits whatever the number of rows (batch invariance). With VEC4 (n_cols a multiple of 4) a
// lane takes vec4 elements l, l + WG_SIZE, … instead, accumulates their squares as a vec4 and
// its partial is (a.x + a.y) + (a.z + a.w): a fourth of the loads, which matters on CPU drivers
// (each per-lane load is a loop over the lanes there; src/kernels/ops/norm.rs has figures).
//
// Variants (Rust side: src/kernels/ops/norm.rs):
//   HAS_WEIGHT     multiply by w [n_cols] (binding 3).
//   IN_PLACE       x is read from and y written to binding 2 (binding 1 absent).
//   ADD_RESIDUAL   as above (binding 1 read_write; not with IN_PLACE).
//   USE_SUBGROUPS  subgroup reductions (needs the subgroups feature).
//   VEC4           n_cols % 4 == 0: x, y and w are read and written as vec4 (the host picks it
//                  from n_cols alone, so a row's bits never depend on the row count).
// Dispatch: one workgroup per row, 1D or 2D (row = wid.y * nwg.x + wid.x; surplus groups exit).
// Bindings: 0 uniform Params, 1 src x (read), 2 dst y (read_write), 3 w (read).

#include "common/reduce.wgsl"

// Mirrors NormParams in src/kernels/ops/norm.rs (16 bytes).
struct Params {
    n_rows: u32,
    n_cols: u32,
    eps: f32,
    _pad: u32,
}

#ifdef VEC4
alias Elem = vec4<f32>; // 4 columns
#else
alias Elem = f32;
#endif

@group(0) @binding(0) var<uniform> params: Params;
#ifdef ADD_RESIDUAL
@group(0) @binding(1) var<storage, read_write> src: array<Elem>; // residual [n_rows, n_cols]
#else
#ifndef IN_PLACE
@group(0) @binding(1) var<storage, read> src: array<Elem>; // [n_rows, n_cols]
#endif
#endif
@group(0) @binding(2) var<storage, read_write> dst: array<Elem>; // [n_rows, n_cols]
#ifdef HAS_WEIGHT
@group(0) @binding(3) var<storage, read> weight: array<Elem>; // [n_cols]
#endif

override WG_SIZE: u32 = 64u;

fn load_x(i: u32) -> Elem {
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
#ifdef USE_SUBGROUPS
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) n_sg: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
#endif
) {
#ifdef USE_SUBGROUPS
    let lane = ReduceLane(lid, sg_id, n_sg, sg_lane);
#else
    let lane = ReduceLane(lid, 0u, 1u, 0u);
#endif
    let row = wid.y * nwg.x + wid.x;
    if (row >= params.n_rows) {
        return; // the whole workgroup: row is uniform
    }
#ifdef VEC4
    let n = params.n_cols / 4u; // elements of the row
    var acc = vec4<f32>(0.0);
#else
    let n = params.n_cols;
    var acc = 0.0;
#endif
    let base = row * n;
    for (var c = lid; c < n; c += WG_SIZE) {
#ifdef ADD_RESIDUAL
        // Each lane reads and writes only its own columns: no barrier needed.
        let v = src[base + c] + dst[base + c];
        src[base + c] = v;
#else
        let v = load_x(base + c);
#endif
        acc += v * v;
    }
#ifdef VEC4
    let sum = reduce_sum((acc.x + acc.y) + (acc.z + acc.w), lane);
#else
    let sum = reduce_sum(acc, lane);
#endif
    let scale = 1.0 / sqrt(sum / f32(params.n_cols) + params.eps);
    for (var c = lid; c < n; c += WG_SIZE) {
        var y = load_x(base + c) * scale;
#ifdef HAS_WEIGHT
        y = y * weight[c];
#endif
        dst[base + c] = y;
    }
}
