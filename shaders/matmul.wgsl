// matmul.wgsl: Y[M, N] = X[M, K] . W[N, K]^T for one row split of a repacked weight, with X and
// Y in f32. One file for mat-vec (M = 1), small batches (M = 2..16) and prefill tiles: they
// differ only in TM and STAGE_X, and compute every output with the same operations in the same
// order (batch invariance, docs/shaders-matmul.md).
//
// Defines (Rust side: src/kernels/matmul/variants.rs):
//   TYPE_*        weight format (decoders: common/quant_*.wgsl); USE_F16 for TYPE_F16 on
//                 devices with shader-f16
//   LANES         invocations sharing one row (1 = one invocation per row, no reduction)
//   ROWS          rows per workgroup (workgroup size LANES * ROWS)
//   TM            columns of X per invocation (1 = mat-vec; accumulators stay in registers)
//   RED_SUBGROUP  LANES > 1: lanes reduce with subgroupShuffleXor (needs subgroups; assumes
//                 consecutive local invocations share a subgroup and LANES <= subgroup size)
//   RED_SHARED    LANES > 1: lanes reduce through workgroup memory (same tree, same bits)
//   STAGE_X, BK   prefill: X is staged through workgroup memory in tiles of TM columns x BK
//                 elements (BK a multiple of every UNIT), shared by all rows of the workgroup
//   X_UNIFORM     X is bound as a 64 KiB uniform window (the host splits the columns)
//
// Work split: workgroup (wid.x, wid.y) -> row block rb = wid.y * nwg.x + wid.x (2D past the
// per-dimension limit), wid.z -> columns [TM * wid.z, TM * wid.z + TM). Local invocation
// lid -> row slot lid / LANES, lane lid % LANES. Lane l takes units l, l + LANES, ... of the
// row in increasing order, with one vec4 accumulator per column.
//
// Per output (row n, column m), the fixed order: for each lane, acc = wu_dot(unit, acc) over its
// units in increasing order; part = (acc.x + acc.y) + (acc.z + acc.w); then the lanes' parts
// combine as a pairwise tree (offsets 1, 2, 4, ... : p[s] = p[s] + p[s + off]).
// Bindings: 0 uniform Params, 1 w (read), 2 x (read, vec4), 3 y (read_write).

#ifdef USE_F16
enable f16;
#endif

#include "common/bytes.wgsl"
#include "common/quant_common.wgsl"
#include "common/quant_float.wgsl"
#include "common/quant_legacy.wgsl"
#include "common/quant_kq_min.wgsl"
#include "common/quant_kq.wgsl"
#include "common/quant_ternary.wgsl"
#include "common/quant_iq4.wgsl"
#include "common/quant_iq_grid.wgsl"

#ifdef X_UNIFORM
// X through a 64 KiB uniform window (CPU drivers load uniform addresses of uniform buffers once
// per SIMD group instead of once per invocation and component).
@group(0) @binding(2) var<uniform> x: array<vec4<f32>, 4096>; // [M, x_stride] from x_off
#else
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>; // [M, x_stride] from x_off
#endif
@group(0) @binding(3) var<storage, read_write> y: array<f32>; // [M, n_out] from y_off

const WG: u32 = LANES * ROWS;

// First column of this workgroup.
var<private> col0: u32;

#ifdef STAGE_X
const BK4: u32 = BK / 4u;
// X tile: columns col0..col0+TM, elements kbase..kbase+BK.
var<workgroup> xs: array<vec4<f32>, TM * BK4>;
var<private> kbase: u32;

fn xq(t: u32, k: u32) -> vec4<f32> {
    return xs[t * BK4 + ((k - kbase) >> 2u)];
}
#else
// Elements k..k+3 of column col0 + t (clamped to the last column: surplus columns are computed
// and not written).
// xrow[t]: the vec4 index of element 0 of that column, set once per invocation.
var<private> xrow: array<u32, TM>;

fn xq(t: u32, k: u32) -> vec4<f32> {
    return x[xrow[t] + (k >> 2u)];
}
#endif

#ifdef RED_SHARED
var<workgroup> red: array<f32, WG * TM>;
#endif

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let lane = lid % LANES;
    let slot = lid / LANES;
    let row = (wid.y * nwg.x + wid.x) * ROWS + slot;
    // Surplus invocations compute the last row again (barriers need everyone) and write nothing.
    let r = min(row, params.n_rows - 1u);
    col0 = wid.z * TM;
#ifndef STAGE_X
    for (var t = 0u; t < TM; t++) {
        let c = min(col0 + t, params.m - 1u);
        xrow[t] = (params.x_off + c * params.x_stride) >> 2u;
    }
#endif

    var acc: array<vec4<f32>, TM>;
    for (var t = 0u; t < TM; t++) {
        acc[t] = vec4<f32>(0.0);
    }

#ifdef STAGE_X
    for (var kc = 0u; kc < params.k; kc += BK) {
        workgroupBarrier();
        kbase = kc;
        let n4 = min(BK, params.k - kc) / 4u;
        for (var i = lid; i < TM * BK4; i += WG) {
            let j = i % BK4;
            if (j < n4) {
                let c = min(col0 + i / BK4, params.m - 1u);
                xs[i] = x[(params.x_off + c * params.x_stride + kc) / 4u + j];
            }
        }
        workgroupBarrier();
        // This lane's units inside the tile, in increasing order.
        let u_first = kc / UNIT;
        let u_end = min(params.n_units, (kc + BK) / UNIT);
        for (var u = u_first + (lane + LANES - u_first % LANES) % LANES; u < u_end; u += LANES) {
            let wu = wu_load(r, u);
            for (var t = 0u; t < TM; t++) {
                acc[t] = wu_dot(wu, t, u * UNIT, acc[t]);
            }
        }
    }
#else
    for (var u = lane; u < params.n_units; u += LANES) {
        let wu = wu_load(r, u);
        for (var t = 0u; t < TM; t++) {
            acc[t] = wu_dot(wu, t, u * UNIT, acc[t]);
        }
    }
#endif

    var part: array<f32, TM>;
    for (var t = 0u; t < TM; t++) {
        let a = acc[t];
        part[t] = (a.x + a.y) + (a.z + a.w);
    }
#ifdef RED_SUBGROUP
    for (var off = 1u; off < LANES; off *= 2u) {
        for (var t = 0u; t < TM; t++) {
            part[t] = part[t] + subgroupShuffleXor(part[t], off);
        }
    }
#endif
#ifdef RED_SHARED
    for (var t = 0u; t < TM; t++) {
        red[lid * TM + t] = part[t];
    }
    workgroupBarrier();
    if (lane == 0u) {
        for (var t = 0u; t < TM; t++) {
            var v: array<f32, LANES>;
            for (var s = 0u; s < LANES; s++) {
                v[s] = red[(slot * LANES + s) * TM + t];
            }
            for (var off = 1u; off < LANES; off *= 2u) {
                for (var s = 0u; s < LANES; s += 2u * off) {
                    v[s] = v[s] + v[s + off];
                }
            }
            part[t] = v[0];
        }
    }
#endif
    if (lane == 0u && row < params.n_rows) {
        for (var t = 0u; t < TM; t++) {
            let c = col0 + t;
            if (c < params.m) {
                y[params.y_off + c * params.n_out + params.row0 + row] = part[t];
            }
        }
    }
}
