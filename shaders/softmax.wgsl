// softmax.wgsl: numerically stable softmax over the rows of x [n_rows, n_cols] (row-major), with
// an optional scale and additive mask, as ggml_soft_max_ext (no ALiBi):
//   v[c] = x[r, c] * scale (+ mask[r % n_mask_rows, c]),  m = max_c v[c]
//   y[r, c] = exp(v[c] - m) * (1 / Σ_c exp(v[c] - m))
// Entries with v < -3e38 (a -inf mask) are masked: exactly 0 and never reach exp. A row with every
// entry masked gives zeros (ggml gives NaN).
//
// One workgroup per row, three passes over the row (max; exp written to y and summed; scale):
// lane l handles columns l, l + WG_SIZE, …; partials are combined by common/reduce.wgsl in a
// fixed order, so a row gives the same bits whatever the number of rows (batch invariance).
//
// Variants (Rust side: src/kernels/ops/softmax.rs):
//   HAS_MASK       add mask [n_mask_rows, n_cols] (binding 3); row r uses mask row r % n_mask_rows.
//   IN_PLACE       x is read from and y written to binding 2 (binding 1 absent).
//   USE_SUBGROUPS  subgroup reductions (needs the subgroups feature).
// Dispatch: one workgroup per row, 1D or 2D (row = wid.y * nwg.x + wid.x; surplus groups exit).
// Bindings: 0 uniform Params, 1 src x (read), 2 dst y (read_write), 3 mask (read).

#include "common/reduce.wgsl"

// Mirrors SoftmaxParams in src/kernels/ops/softmax.rs (16 bytes).
struct Params {
    n_rows: u32,
    n_cols: u32,
    n_mask_rows: u32, // >= 1 with HAS_MASK
    scale: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
#ifndef IN_PLACE
@group(0) @binding(1) var<storage, read> src: array<f32>; // [n_rows, n_cols]
#endif
@group(0) @binding(2) var<storage, read_write> dst: array<f32>; // [n_rows, n_cols]
#ifdef HAS_MASK
@group(0) @binding(3) var<storage, read> mask: array<f32>; // [n_mask_rows, n_cols]
#endif

override WG_SIZE: u32 = 64u;

// The lowest finite f32: the start of every max, and the masking threshold's neighbour.
const LOWEST: f32 = -3.40282347e38;
const MASKED: f32 = -3.0e38;

// v = x * scale (+ mask) of row `row`, column `c`.
fn scaled(row: u32, c: u32) -> f32 {
    let i = row * params.n_cols + c;
#ifdef IN_PLACE
    var v = dst[i] * params.scale;
#else
    var v = src[i] * params.scale;
#endif
#ifdef HAS_MASK
    v += mask[(row % params.n_mask_rows) * params.n_cols + c];
#endif
    return v;
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
    let n = params.n_cols;
    let base = row * n;

    var local_max = LOWEST;
    for (var c = lid; c < n; c += WG_SIZE) {
        local_max = max(local_max, scaled(row, c));
    }
    let m = reduce_max(local_max, lane);

    var acc = 0.0;
    for (var c = lid; c < n; c += WG_SIZE) {
        let v = scaled(row, c);
        var e = 0.0;
        if (v >= MASKED) {
            e = exp(v - m);
        }
        dst[base + c] = e;
        acc += e;
    }
    let sum = reduce_sum(acc, lane);
    var inv = 0.0;
    if (sum > 0.0) {
        inv = 1.0 / sum;
    }
    for (var c = lid; c < n; c += WG_SIZE) {
        dst[base + c] = dst[base + c] * inv;
    }
}
