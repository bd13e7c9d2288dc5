// matmul_rows.wgsl: Y[M, N] = X[M, K] . W[N, K]^T for the 32-element block formats (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0) on CPU drivers (the SERIAL family, docs/shaders-matmul.md). Each invocation
// computes 4 rows x TM columns, so every element of X it loads serves 4 rows: on llvmpipe a
// load whose address varies per invocation costs a gather per component, and X loads were half
// of a mat-vec's time when each served one row.
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
//   WG         invocations per workgroup; the workgroup covers 4 * WG rows
//   TM         columns of X per invocation: 1 (mat-vec), 2 (with TM_2) or 4 (with TM_2, TM_4)
//   X_UNIFORM  X is bound as a 64 KiB uniform window (the host splits the columns)
//
// Work split: workgroup (wid.x, wid.y) -> row block rb = wid.y * nwg.x + wid.x (2D past the
// per-dimension limit); invocation lid takes rows rb * 4 WG + lid + j * WG for j = 0..3 (split-
// local), wid.z -> columns [TM * wid.z, TM * wid.z + TM).
// Bindings (as matmul.wgsl): 0 uniform Params, 1 w (read), 2 x (read, vec4), 3 y (read_write).

#include "common/bytes.wgsl"
#include "common/quant_common.wgsl"
#include "common/quant_legacy_units.wgsl"

#ifdef X_UNIFORM
@group(0) @binding(2) var<uniform> x: array<vec4<f32>, 4096>; // [M, x_stride] from x_off
#else
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>; // [M, x_stride] from x_off
#endif
@group(0) @binding(3) var<storage, read_write> y: array<f32>; // [M, n_out] from y_off

// One block of one row as loaded: scales and quant words (Q8_0 fills q[0..8]; the nibble
// formats q[0..4] and, for Q5_*, qh).
struct Blk {
    d: f32,
    m: f32,
    q: array<u32, 8>,
    qh: u32,
}

// Block b of split-local row r.
fn blk_load(r: u32, b: u32) -> Blk {
    let g = r * params.nb + b;
    let dm = legacy_dm_fast(g);
    var o: Blk;
    o.d = dm.x;
    o.m = dm.y;
#ifdef TYPE_Q8_0
    let base = g * 8u;
    o.q[0] = w[base];
    o.q[1] = w[base + 1u];
    o.q[2] = w[base + 2u];
    o.q[3] = w[base + 3u];
    o.q[4] = w[base + 4u];
    o.q[5] = w[base + 5u];
    o.q[6] = w[base + 6u];
    o.q[7] = w[base + 7u];
#else
    let base = g * 4u;
    o.q[0] = w[base];
    o.q[1] = w[base + 1u];
    o.q[2] = w[base + 2u];
    o.q[3] = w[base + 3u];
#endif
#ifdef TYPE_Q5_0
    o.qh = w[params.plane1 + g];
#endif
#ifdef TYPE_Q5_1
    o.qh = w[params.plane1 + g];
#endif
    return o;
}

// Elements 4i..4i+3 of the block as exact integers in f32 (i is a constant at every call).
fn blk_q(k: Blk, i: u32) -> vec4<f32> {
#ifdef TYPE_Q8_0
    return vec4<f32>(unpack4xI8(k.q[i]));
#else
    let word = vec4<u32>(k.q[i & 3u]);
    let sh = 4u * (i >> 2u);
    var v = vec4<f32>((word >> vec4<u32>(sh, sh + 8u, sh + 16u, sh + 24u)) & vec4<u32>(15u));
#ifdef TYPE_Q5_0
    v = v + qh_high4(k.qh, 4u * i) - vec4<f32>(16.0);
#endif
#ifdef TYPE_Q5_1
    v = v + qh_high4(k.qh, 4u * i);
#endif
#ifdef TYPE_Q4_0
    v = v - vec4<f32>(8.0);
#endif
    return v;
#endif
}

// X for one block of one column: its 8 vec4s and (with a minimum) their sum in order.
struct XBlk {
    v: array<vec4<f32>, 8>,
    sx: vec4<f32>,
}

// The block of X starting at vec4 index `i0`.
fn xblk_load(i0: u32) -> XBlk {
    var o: XBlk;
    o.v[0] = x[i0];
    o.v[1] = x[i0 + 1u];
    o.v[2] = x[i0 + 2u];
    o.v[3] = x[i0 + 3u];
    o.v[4] = x[i0 + 4u];
    o.v[5] = x[i0 + 5u];
    o.v[6] = x[i0 + 6u];
    o.v[7] = x[i0 + 7u];
#ifdef LEGACY_MIN
    var sx = o.v[0] + o.v[1];
    sx = sx + o.v[2];
    sx = sx + o.v[3];
    sx = sx + o.v[4];
    sx = sx + o.v[5];
    sx = sx + o.v[6];
    o.sx = sx + o.v[7];
#endif
    return o;
}

// acc + this block . this block of X, in the fixed order.
fn blk_dot(k: Blk, xb: XBlk, acc: vec4<f32>) -> vec4<f32> {
    var s = blk_q(k, 0u) * xb.v[0];
    s = fma(blk_q(k, 1u), xb.v[1], s);
    s = fma(blk_q(k, 2u), xb.v[2], s);
    s = fma(blk_q(k, 3u), xb.v[3], s);
    s = fma(blk_q(k, 4u), xb.v[4], s);
    s = fma(blk_q(k, 5u), xb.v[5], s);
    s = fma(blk_q(k, 6u), xb.v[6], s);
    s = fma(blk_q(k, 7u), xb.v[7], s);
#ifdef LEGACY_MIN
    return fma(vec4<f32>(k.m), xb.sx, fma(vec4<f32>(k.d), s, acc));
#else
    return fma(vec4<f32>(k.d), s, acc);
#endif
}

// The 4 rows' accumulators of one column.
struct Acc {
    r0: vec4<f32>,
    r1: vec4<f32>,
    r2: vec4<f32>,
    r3: vec4<f32>,
}

// One block of the 4 rows against the block of X at vec4 index `i0` (one column).
fn col_dot(k0: Blk, k1: Blk, k2: Blk, k3: Blk, i0: u32, acc: Acc) -> Acc {
    let xb = xblk_load(i0);
    var o: Acc;
    o.r0 = blk_dot(k0, xb, acc.r0);
    o.r1 = blk_dot(k1, xb, acc.r1);
    o.r2 = blk_dot(k2, xb, acc.r2);
    o.r3 = blk_dot(k3, xb, acc.r3);
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

// Writes column c of the 4 rows from `row`.
fn put_col(row: u32, c: u32, acc: Acc) {
    put(row, c, hsum(acc.r0));
    put(row + WG, c, hsum(acc.r1));
    put(row + 2u * WG, c, hsum(acc.r2));
    put(row + 3u * WG, c, hsum(acc.r3));
}

// Vec4 index of element 0 of column c (surplus columns clamp to the last one).
fn xrow(c: u32) -> u32 {
    return (params.x_off + min(c, params.m - 1u) * params.x_stride) >> 2u;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = (wid.y * nwg.x + wid.x) * (4u * WG) + lid;
    // Surplus invocations compute the last row again and write nothing.
    let last = params.n_rows - 1u;
    let r0 = min(row, last);
    let r1 = min(row + WG, last);
    let r2 = min(row + 2u * WG, last);
    let r3 = min(row + 3u * WG, last);
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
        let k0 = blk_load(r0, b);
        let k1 = blk_load(r1, b);
        let k2 = blk_load(r2, b);
        let k3 = blk_load(r3, b);
        c0 = col_dot(k0, k1, k2, k3, x0 + b * 8u, c0);
#ifdef TM_2
        c1 = col_dot(k0, k1, k2, k3, x1 + b * 8u, c1);
#endif
#ifdef TM_4
        c2 = col_dot(k0, k1, k2, k3, x2 + b * 8u, c2);
        c3 = col_dot(k0, k1, k2, k3, x3 + b * 8u, c3);
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
