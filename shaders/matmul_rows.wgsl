// matmul_rows.wgsl: Y[M, N] = X[M, K] . W[N, K]^T for the 32-element block formats (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0) on CPU drivers (the SERIAL family, docs/shaders-matmul.md). Each invocation
// computes R = 4 (or 8 with R8) rows x TM columns, so every element of X it loads serves R rows:
// on llvmpipe a load whose address varies per invocation costs a gather per component, and X
// loads were half of a mat-vec's time when each served one row. A row's block is loaded and
// decoded once and serves the TM columns.
//
// Same bits as matmul.wgsl's SERIAL variants: every output is the sequence of
// common/quant_legacy.wgsl (per block: s = q[0] * x[0..4]; s = fma(q[i], x[4i..4i+4], s) for
// i = 1..7; acc = fma(d, s, acc); with a minimum sx = x[0..4] + x[4..8] + ... in order and
// acc = fma(m, sx, acc)), blocks in increasing order, then part = (acc.x + acc.y) + (acc.z + acc.w).
// Every loop index that picks a register is a constant (the helpers are written out), so the
// driver's compiler keeps the blocks in registers.
//
// Defines (Rust side: src/kernels/matmul/variants.rs):
//   TYPE_*     one of the five block formats
//   WG         invocations per workgroup; the workgroup covers R * WG rows
//   R8         8 rows per invocation (else 4)
//   TM         columns of X per invocation: 1 (mat-vec), 2 (with TM_2) or 4 (with TM_2, TM_4)
//   X_UNIFORM  X is bound as a 64 KiB uniform window (the host splits the columns)
//
// Work split: workgroup (wid.x, wid.y) -> row block rb = wid.y * nwg.x + wid.x (2D past the
// per-dimension limit); invocation lid takes rows rb * R * WG + lid + j * WG for j = 0..R-1
// (split-local), wid.z -> columns [TM * wid.z, TM * wid.z + TM).
// Bindings (as matmul.wgsl): 0 uniform Params, 1 w (read), 2 x (read, vec4), 3 y (read_write).

#define W_VEC4
#include "common/bytes.wgsl"
#include "common/quant_common.wgsl"
#include "common/quant_legacy_units.wgsl"
#include "common/legacy_blocks.wgsl"

#ifdef X_UNIFORM
@group(0) @binding(2) var<uniform> x: array<vec4<f32>, 4096>; // [M, x_stride] from x_off
#else
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>; // [M, x_stride] from x_off
#endif
@group(0) @binding(3) var<storage, read_write> y: array<f32>; // [M, n_out] from y_off

// The decoded blocks of an invocation's rows (r0..r3, with R8 also r4..r7).
struct Rows {
    k0: Dec,
    k1: Dec,
    k2: Dec,
    k3: Dec,
#ifdef R8
    k4: Dec,
    k5: Dec,
    k6: Dec,
    k7: Dec,
#endif
}

// Block b of rows row, row + WG, ... (split-local; past the last row, the last row again).
fn rows_load(row: u32, b: u32) -> Rows {
    let last = params.n_rows - 1u;
    var o: Rows;
    o.k0 = blk_decode(blk_load(min(row, last), b));
    o.k1 = blk_decode(blk_load(min(row + WG, last), b));
    o.k2 = blk_decode(blk_load(min(row + 2u * WG, last), b));
    o.k3 = blk_decode(blk_load(min(row + 3u * WG, last), b));
#ifdef R8
    o.k4 = blk_decode(blk_load(min(row + 4u * WG, last), b));
    o.k5 = blk_decode(blk_load(min(row + 5u * WG, last), b));
    o.k6 = blk_decode(blk_load(min(row + 6u * WG, last), b));
    o.k7 = blk_decode(blk_load(min(row + 7u * WG, last), b));
#endif
    return o;
}

// The rows' accumulators of one column.
struct Acc {
    r0: vec4<f32>,
    r1: vec4<f32>,
    r2: vec4<f32>,
    r3: vec4<f32>,
#ifdef R8
    r4: vec4<f32>,
    r5: vec4<f32>,
    r6: vec4<f32>,
    r7: vec4<f32>,
#endif
}

// One block of the rows against the block of X at vec4 index `i0` (one column).
fn col_dot(k: Rows, i0: u32, acc: Acc) -> Acc {
    let xb = xblk_load(i0);
    var o: Acc;
    o.r0 = blk_dot(k.k0, xb, acc.r0);
    o.r1 = blk_dot(k.k1, xb, acc.r1);
    o.r2 = blk_dot(k.k2, xb, acc.r2);
    o.r3 = blk_dot(k.k3, xb, acc.r3);
#ifdef R8
    o.r4 = blk_dot(k.k4, xb, acc.r4);
    o.r5 = blk_dot(k.k5, xb, acc.r5);
    o.r6 = blk_dot(k.k6, xb, acc.r6);
    o.r7 = blk_dot(k.k7, xb, acc.r7);
#endif
    return o;
}

fn hsum(a: vec4<f32>) -> f32 {
    return (a.x + a.y) + (a.z + a.w);
}

// Writes row `row` (split-local) of column c when both exist.
fn put(row: u32, c: u32, v: f32) {
    if (row < params.n_rows && c < params.m) {
        y[params.y_off + c * params.n_out + params.row0 + row] = v;
    }
}

// Writes column c of the rows from `row`.
fn put_col(row: u32, c: u32, acc: Acc) {
    put(row, c, hsum(acc.r0));
    put(row + WG, c, hsum(acc.r1));
    put(row + 2u * WG, c, hsum(acc.r2));
    put(row + 3u * WG, c, hsum(acc.r3));
#ifdef R8
    put(row + 4u * WG, c, hsum(acc.r4));
    put(row + 5u * WG, c, hsum(acc.r5));
    put(row + 6u * WG, c, hsum(acc.r6));
    put(row + 7u * WG, c, hsum(acc.r7));
#endif
}

// Vec4 index of element 0 of column c (surplus columns clamp to the last one).
fn xrow(c: u32) -> u32 {
    return (params.x_off + min(c, params.m - 1u) * params.x_stride) >> 2u;
}

#ifdef R8
const R: u32 = 8u;
#else
const R: u32 = 4u;
#endif

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = (wid.y * nwg.x + wid.x) * (R * WG) + lid;
    let col0 = wid.z * TM;

    // Columns are written out (TM_2: TM >= 2, TM_4: TM = 4), not looped: a loop this large is
    // not unrolled by the driver and its accumulators would leave registers.
    let x0 = xrow(col0);
    var c0: Acc;
#ifdef TM_2
    let x1 = xrow(col0 + 1u);
    var c1: Acc;
#endif
#ifdef TM_4
    let x2 = xrow(col0 + 2u);
    let x3 = xrow(col0 + 3u);
    var c2: Acc;
    var c3: Acc;
#endif
    for (var b = 0u; b < params.nb; b++) {
        let k = rows_load(row, b);
        c0 = col_dot(k, x0 + b * 8u, c0);
#ifdef TM_2
        c1 = col_dot(k, x1 + b * 8u, c1);
#endif
#ifdef TM_4
        c2 = col_dot(k, x2 + b * 8u, c2);
        c3 = col_dot(k, x3 + b * 8u, c3);
#endif
    }

    put_col(row, col0, c0);
#ifdef TM_2
    put_col(row, col0 + 1u, c1);
#endif
#ifdef TM_4
    put_col(row, col0 + 2u, c2);
    put_col(row, col0 + 3u, c3);
#endif
}
