// moe/matvec_id.wgsl: the expert mat-vec of a mixture-of-experts layer. The weight is a whole
// 3-D expert tensor {K, N, n_expert} repacked as N · n_expert rows of K (expert e's rows at
// e · N), in any type matmul.wgsl decodes (the same common/quant_*.wgsl decoders); the expert
// each output uses is read from the router's id buffer on the device (no readback).
//
// Work: z = wid.z is one (token row c, slot j) pair, z = c · n_used + j; expert e = ids[z];
// output Y[z, n] = W[e · N + n] · X[col], col = c (the same input for every slot: gate, up) or
// z (a slot's own input: down), as params.col0 says. One dispatch per weight split; a split
// holds whole experts, rows [row0, row0 + n_rows); a (z, expert) pair whose expert lives in
// another split writes nothing here.
//
// Per output the fixed order of matmul.wgsl's mat-vec (TM = 1): lane l sums units l, l + LANES,
// ... in increasing order into a vec4, part = (x + y) + (z + w), lanes combine as a pairwise
// tree. Nothing depends on the other rows of the batch or on other slots' experts: a row's
// bits are the same alone or in any batch (batch invariance).
//
// Defines: TYPE_*, USE_F16, LANES, ROWS, RED_SUBGROUP | RED_SHARED (as matmul.wgsl).
// Params (common/quant_common.wgsl's struct, fields reused): k, n_rows (this split), m (token
// rows), row0 (first row of this split), n_out = N (rows per expert, Y's row stride), x_stride,
// x_off, y_off, plane1/2, nb, n_units as matmul; split1 = n_used (slots per token row);
// col0 = 1 when X has one row per slot (z), 0 when one per token row (c).
// Bindings: 0 uniform Params, 1 w (read), 2 x (read, vec4), 3 y (read_write), 4 ids (read).

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

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>; // [rows, x_stride] from x_off
@group(0) @binding(3) var<storage, read_write> y: array<f32>; // [m · n_used, N] from y_off
@group(0) @binding(4) var<storage, read> ids: array<u32>; // [m, n_used]

const WG: u32 = LANES * ROWS;
const TM: u32 = 1u;

// The vec4 index of element 0 of this invocation's X row.
var<private> xrow: array<u32, 1>;

fn xq(t: u32, k: u32) -> vec4<f32> {
    return x[xrow[t] + (k >> 2u)];
}

#ifdef RED_SHARED
var<workgroup> red: array<f32, WG>;
#endif

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let lane = lid % LANES;
    let slot = lid / LANES;
    let n_used = params.split1;
    let z = wid.z;
    let c = z / n_used;
    let expert = ids[min(z, params.m * n_used - 1u)];
    // This expert's rows inside this split (uniform over the workgroup: one z per workgroup).
    let first = expert * params.n_out;
    let here = first >= params.row0 && first + params.n_out <= params.row0 + params.n_rows;
    let row = (wid.y * nwg.x + wid.x) * ROWS + slot;
    let local = min(row, params.n_out - 1u);
    // Outside this split: compute row 0 of the split (barriers need everyone), write nothing.
    let r = select(0u, first - params.row0 + local, here);
    var col = c;
    if (params.col0 == 1u) {
        col = z;
    }
    xrow[0] = (params.x_off + col * params.x_stride) >> 2u;

    var acc: array<vec4<f32>, 1>;
    acc[0] = vec4<f32>(0.0);
    for (var u = lane; u < params.n_units; u += LANES) {
        let wu = wu_load(r, u);
        acc[0] = wu_dot(wu, 0u, u * UNIT, acc[0]);
    }
    let a = acc[0];
    var part = (a.x + a.y) + (a.z + a.w);
#ifdef RED_SUBGROUP
    for (var off = 1u; off < LANES; off *= 2u) {
        part = part + subgroupShuffleXor(part, off);
    }
#endif
#ifdef RED_SHARED
    red[lid] = part;
    workgroupBarrier();
    if (lane == 0u) {
        var v: array<f32, LANES>;
        for (var s = 0u; s < LANES; s++) {
            v[s] = red[slot * LANES + s];
        }
        for (var off = 1u; off < LANES; off *= 2u) {
            for (var s = 0u; s < LANES; s += 2u * off) {
                v[s] = v[s] + v[s + off];
            }
        }
        part = v[0];
    }
#endif
    if (lane == 0u && here && row < params.n_out && z < params.m * n_used) {
        y[params.y_off + z * params.n_out + row] = part;
    }
}
