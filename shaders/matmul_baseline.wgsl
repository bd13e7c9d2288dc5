// matmul_baseline.wgsl: the plain kernel the benches compare against. One invocation per output
// Y[m, n] = sum_k W[n, k] X[m, k], walking K four elements at a time through the same exact
// decoders (w_get4 of common/quant_*.wgsl) with a scalar accumulator. No tiling, no lanes.
// Not batch-invariant with matmul.wgsl (different order); used by benches and as a cross-check.
//
// Defines: TYPE_* only (exact decoders, no f16). Workgroups of 64, 2D grid over M * n_rows
// outputs: i = (wid.y * nwg.x + wid.x) * 64 + lid, row i % n_rows, column i / n_rows.
// Bindings: 0 uniform Params, 1 w (read), 2 x (read, vec4), 3 y (read_write).

#include "common/bytes.wgsl"
#include "common/quant_common.wgsl"
#include "common/quant_float.wgsl"
#include "common/quant_legacy.wgsl"
#include "common/quant_kq_min.wgsl"
#include "common/quant_kq.wgsl"
#include "common/quant_ternary.wgsl"
#include "common/quant_iq4.wgsl"
#include "common/quant_iq_grid.wgsl"

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>; // [M, x_stride] from x_off
@group(0) @binding(3) var<storage, read_write> y: array<f32>; // [M, n_out] from y_off

// Elements k..k+3 of column t (the decoder interface; the dot below uses it directly).
fn xq(t: u32, k: u32) -> vec4<f32> {
    return x[(params.x_off + t * params.x_stride + k) >> 2u];
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 64u + lid;
    if (i >= params.m * params.n_rows) {
        return;
    }
    let r = i % params.n_rows;
    let c = i / params.n_rows;
    var acc = 0.0;
    for (var k = 0u; k < params.k; k += 4u) {
        acc += dot(w_get4(r, k), xq(c, k));
    }
    y[params.y_off + c * params.n_out + params.row0 + r] = acc;
}
