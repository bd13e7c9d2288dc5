// matmul_rows.wgsl: Y[M, N] = X[M, K] . W[N, K]^T for the 32-element block formats (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0) on CPU drivers (the SERIAL family, docs/shaders-matmul.md). Each invocation
// computes R = 4 (or 8 with R8) rows x TM columns, so every element of X it loads serves R rows:
// on llvmpipe a load whose address varies per invocation costs a gather per component, and X
// loads were half of a mat-vec's time when each served one row. A row's block is loaded and
// decoded once and serves the TM columns.
//
// Same bits as matmul.wgsl's SERIAL variants: every output is the sequence of
// common/quant_legacy.wgsl (per block: s = q[0] * x[0..4]; s = fma(q[i], x[4i..4i+4], s) for
// i = 1..7; acc = fma(d, hsum(s), acc) on a scalar acc; with a minimum sx = x[0..4] + x[4..8] +
// ... in order and acc = fma(m, hsum(sx), acc); hsum = legacy_hsum), blocks in
// increasing order; acc is the output.
// Every loop index that picks a register is a constant (the helpers are written out), so the
// driver's compiler keeps the blocks in registers.
//
// Defines (Rust side: src/kernels/matmul/variants.rs):
//   TYPE_*     one of the five block formats
//   WG         invocations per workgroup; the workgroup covers R * WG rows
//   R8         8 rows per invocation (else 4)
//   TM         columns of X per invocation: 1 (mat-vec), 2 (with TM_2), 4 (with TM_2, TM_4) or
//              8 (with TM_2, TM_4, TM_8)
//   X_UNIFORM  X is bound as a 64 KiB uniform window (the host splits the columns)
//   INT64      W is read as vec4<u64> and X as vec2<u64> (W_U64, X_U64; needs SHADER_INT64):
//              a CPU driver runs each load as a per-invocation loop, so wide loads cost less
//   PAIRS      (with INT64, when nb is even) blocks b and b + 1 of a row in one load each of
//              quants, scales and fifth bits (blk_load2; a 4608 x 576 Q4_1 mat-vec on
//              lavapipe: 0.448 -> 0.388 ms)
//   X_BCAST    (needs subgroups of exactly WG) each block of X is loaded once per workgroup, a
//              vec4 per lane, and shared by subgroupBroadcast: llvmpipe runs every lane's load
//              as a gather, so this is 8x fewer; the host binds X as storage then, one dispatch
//              for all columns (pp512 on lavapipe 80 -> 100 -> 125 t/s)
//   SPLIT3     split output: weight rows [0, split1) go to y, [split1, split2) to y2 (binding
//              4) and [split2, N) to y3 (binding 5), each [M, its rows] from element 0 (one
//              dispatch for a stacked q | k | v projection); not with a GLU epilogue
//   GLU_PAIRED (with SWIGLU or GEGLU, R8) the weight stacks gate and up rows in blocks of 4 * WG:
//              stacked rows [8 WG b, 8 WG b + 4 WG) are gate rows [4 WG b, 4 WG b + 4 WG), the
//              next 4 WG the same up rows, so an invocation holds gate and up of its output
//              rows: y[r] = glu_act(gate . x) * (up . x), no gate binding (one dispatch for both
//              projections; the gate value is the f32 the gate matmul would have written)
//   SWIGLU / GEGLU  GLU epilogue: y = glu_act(gate) * (X . W^T) with the gate projection bound
//              at binding 4 (laid out as y), the same bits as glu.wgsl after the matmul; one
//              dispatch less per layer
//
// Work split: workgroup (wid.x, wid.y) -> row block rb = wid.y * nwg.x + wid.x (2D past the
// per-dimension limit); invocation lid takes rows rb * R * WG + lid + j * WG for j = 0..R-1
// (split-local), wid.z -> columns [TM * wid.z, TM * wid.z + TM).
// Bindings (as matmul.wgsl): 0 uniform Params, 1 w (read), 2 x (read, vec4), 3 y (read_write),
// with a GLU epilogue 4 gate (read).

#ifdef INT64
#define W_U64
#define X_U64
#else
#define W_VEC4
#endif
#define W_WIDE
#include "common/bytes.wgsl"
#include "common/quant_common.wgsl"
#include "common/quant_legacy_units.wgsl"
#include "common/legacy_blocks.wgsl"

#ifdef X_U64
#ifdef X_UNIFORM
@group(0) @binding(2) var<uniform> x: array<vec2<u64>, 4096>; // [M, x_stride] f32 bits
#else
@group(0) @binding(2) var<storage, read> x: array<vec2<u64>>; // [M, x_stride] f32 bits
#endif
#else
#ifdef X_UNIFORM
@group(0) @binding(2) var<uniform> x: array<vec4<f32>, 4096>; // [M, x_stride] from x_off
#else
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>; // [M, x_stride] from x_off
#endif
#endif
@group(0) @binding(3) var<storage, read_write> y: array<f32>; // [M, n_out] from y_off

#ifdef SWIGLU
#define GLU
#endif
#ifdef GEGLU
#define GLU
#endif
#ifdef SPLIT3
@group(0) @binding(4) var<storage, read_write> y2: array<f32>; // [M, split2 - split1]
@group(0) @binding(5) var<storage, read_write> y3: array<f32>; // [M, n_out - split2]
#endif

#ifdef GLU
#include "common/glu_act.wgsl"
#ifndef GLU_PAIRED
// The gate projection, laid out as y: the output is glu_act(gate) * (X . W^T), as glu.wgsl.
@group(0) @binding(4) var<storage, read> gate: array<f32>;
#endif
#endif

// One block of X for each of the TM columns.
struct XCols {
    x0: XBlk,
#ifdef TM_2
    x1: XBlk,
#endif
#ifdef TM_4
    x2: XBlk,
    x3: XBlk,
#endif
#ifdef TM_8
    x4: XBlk,
    x5: XBlk,
    x6: XBlk,
    x7: XBlk,
#endif
}

// Vec4 index of element 0 of column c (surplus columns clamp to the last one).
fn xrow(c: u32) -> u32 {
    return (params.x_off + min(c, params.m - 1u) * params.x_stride) >> 2u;
}

#ifdef X_BCAST
// The invocation's lane (0..8; the workgroup is one subgroup of 8).
var<private> lane: u32;

// A block of X from the subgroup: lane l holds vec4 l of it (one load per lane instead of
// eight), every invocation gets all eight by subgroupBroadcast.
fn xblk_bcast(e: vec4<f32>) -> XBlk {
    var o: XBlk;
    o.v[0] = subgroupBroadcast(e, 0u);
    o.v[1] = subgroupBroadcast(e, 1u);
    o.v[2] = subgroupBroadcast(e, 2u);
    o.v[3] = subgroupBroadcast(e, 3u);
    o.v[4] = subgroupBroadcast(e, 4u);
    o.v[5] = subgroupBroadcast(e, 5u);
    o.v[6] = subgroupBroadcast(e, 6u);
    o.v[7] = subgroupBroadcast(e, 7u);
    return xblk_sum(o);
}
#endif

// Block b of column c.
fn xblk_at(c: u32, b: u32) -> XBlk {
#ifdef X_BCAST
    return xblk_bcast(x_at(xrow(c) + b * 8u + lane));
#else
    return xblk_load(xrow(c) + b * 8u);
#endif
}

// Block b of the TM columns from column col0.
fn xcols_load(col0: u32, b: u32) -> XCols {
    var o: XCols;
    o.x0 = xblk_at(col0, b);
#ifdef TM_2
    o.x1 = xblk_at(col0 + 1u, b);
#endif
#ifdef TM_4
    o.x2 = xblk_at(col0 + 2u, b);
    o.x3 = xblk_at(col0 + 3u, b);
#endif
#ifdef TM_8
    o.x4 = xblk_at(col0 + 4u, b);
    o.x5 = xblk_at(col0 + 5u, b);
    o.x6 = xblk_at(col0 + 6u, b);
    o.x7 = xblk_at(col0 + 7u, b);
#endif
    return o;
}

// One row's accumulators of the TM columns.
struct RowAcc {
    c0: f32,
#ifdef TM_2
    c1: f32,
#endif
#ifdef TM_4
    c2: f32,
    c3: f32,
#endif
#ifdef TM_8
    c4: f32,
    c5: f32,
    c6: f32,
    c7: f32,
#endif
}

#ifdef TM_4
// Four columns' block sums (one vec4 each).
struct Acc4 {
    c0: vec4<f32>,
    c1: vec4<f32>,
    c2: vec4<f32>,
    c3: vec4<f32>,
}

// One step of four columns' sums: s.cj = fma(q, xj, s.cj).
fn fma4(q: vec4<f32>, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>, s: Acc4) -> Acc4 {
    return Acc4(fma(q, x0, s.c0), fma(q, x1, s.c1), fma(q, x2, s.c2), fma(q, x3, s.c3));
}

// blk_dot of four columns with their steps interleaved: each column's sequence of operations
// is blk_dot's (same bits), but the driver sees 16 independent chains at every step instead
// of 4. llvmpipe splits every fma into a multiply and a dependent add, so one column's chain
// is a string of adds each waiting for the last (`cargo bench --bench kernels`, Q4_1
// [2048, 2048] x 8 on lavapipe: 1.601 ms column by column, 1.464 ms interleaved). `a` holds
// the four columns' scalar accumulators (component j for column j).
fn blk_dot4(k: Dec, x0: XBlk, x1: XBlk, x2: XBlk, x3: XBlk, a: vec4<f32>) -> vec4<f32> {
    var s = Acc4(k.q[0] * x0.v[0], k.q[0] * x1.v[0], k.q[0] * x2.v[0], k.q[0] * x3.v[0]);
    s = fma4(k.q[1], x0.v[1], x1.v[1], x2.v[1], x3.v[1], s);
    s = fma4(k.q[2], x0.v[2], x1.v[2], x2.v[2], x3.v[2], s);
    s = fma4(k.q[3], x0.v[3], x1.v[3], x2.v[3], x3.v[3], s);
    s = fma4(k.q[4], x0.v[4], x1.v[4], x2.v[4], x3.v[4], s);
    s = fma4(k.q[5], x0.v[5], x1.v[5], x2.v[5], x3.v[5], s);
    s = fma4(k.q[6], x0.v[6], x1.v[6], x2.v[6], x3.v[6], s);
    s = fma4(k.q[7], x0.v[7], x1.v[7], x2.v[7], x3.v[7], s);
    let d = k.d;
#ifdef LEGACY_MIN
    let m = k.m;
    return vec4<f32>(
        fma(m, x0.sx, fma(d, legacy_hsum(s.c0), a.x)),
        fma(m, x1.sx, fma(d, legacy_hsum(s.c1), a.y)),
        fma(m, x2.sx, fma(d, legacy_hsum(s.c2), a.z)),
        fma(m, x3.sx, fma(d, legacy_hsum(s.c3), a.w)),
    );
#else
    return vec4<f32>(
        fma(d, legacy_hsum(s.c0), a.x),
        fma(d, legacy_hsum(s.c1), a.y),
        fma(d, legacy_hsum(s.c2), a.z),
        fma(d, legacy_hsum(s.c3), a.w),
    );
#endif
}
#endif

// A decoded block against the same block of the TM columns.
fn cols_dot(k: Dec, xs: XCols, a: RowAcc) -> RowAcc {
    var o: RowAcc;
#ifdef TM_4
    let lo = blk_dot4(k, xs.x0, xs.x1, xs.x2, xs.x3, vec4<f32>(a.c0, a.c1, a.c2, a.c3));
    o.c0 = lo.x;
    o.c1 = lo.y;
    o.c2 = lo.z;
    o.c3 = lo.w;
#else
    o.c0 = blk_dot(k, xs.x0, a.c0);
#ifdef TM_2
    o.c1 = blk_dot(k, xs.x1, a.c1);
#endif
#endif
#ifdef TM_8
    let hi = blk_dot4(k, xs.x4, xs.x5, xs.x6, xs.x7, vec4<f32>(a.c4, a.c5, a.c6, a.c7));
    o.c4 = hi.x;
    o.c5 = hi.y;
    o.c6 = hi.z;
    o.c7 = hi.w;
#endif
    return o;
}

// Block b of split-local row r (clamped to the last row) against the columns: loaded, decoded
// and used at once, one row after the other, so only one decoded block is live (the loads are
// per-invocation loops that the compiler cannot interleave with arithmetic).
fn row_step(r: u32, b: u32, xs: XCols, a: RowAcc) -> RowAcc {
    return cols_dot(blk_decode(blk_load(min(r, params.n_rows - 1u), b)), xs, a);
}

#ifdef PAIRS
// row_step for blocks b and b + 1 (X blocks xs, xt), loaded together (blk_load2).
fn row_step2(r: u32, b: u32, xs: XCols, xt: XCols, a: RowAcc) -> RowAcc {
    let k2 = blk_load2(min(r, params.n_rows - 1u), b);
    return cols_dot(blk_decode(k2.hi), xt, cols_dot(blk_decode(k2.lo), xs, a));
}
#endif

// Writes row `row` (split-local) of column c when both exist.
fn put(row: u32, c: u32, v: f32) {
    if (row < params.n_rows && c < params.m) {
#ifdef SPLIT3
        let r = params.row0 + row;
        if (r < params.split1) {
            y[c * params.split1 + r] = v;
        } else if (r < params.split2) {
            y2[c * (params.split2 - params.split1) + r - params.split1] = v;
        } else {
            y3[c * (params.n_out - params.split2) + r - params.split2] = v;
        }
#else
        let i = params.y_off + c * params.n_out + params.row0 + row;
#ifdef GLU
#ifndef GLU_PAIRED
        y[i] = glu_act(gate[i]) * v;
#endif
#else
        y[i] = v;
#endif
#endif
    }
}

#ifdef GLU_PAIRED
// Writes output row `orow` (of n_rows / 2) of column c: glu_act(g) * u.
fn put_glu(orow: u32, c: u32, g: f32, u: f32) {
    if (orow < params.n_rows / 2u && c < params.m) {
        y[params.y_off + c * params.n_out + orow] = glu_act(g) * u;
    }
}

// Writes the columns of output row `orow` from its gate and up accumulators.
fn put_pair(orow: u32, col0: u32, g: RowAcc, u: RowAcc) {
    put_glu(orow, col0, g.c0, u.c0);
#ifdef TM_2
    put_glu(orow, col0 + 1u, g.c1, u.c1);
#endif
#ifdef TM_4
    put_glu(orow, col0 + 2u, g.c2, u.c2);
    put_glu(orow, col0 + 3u, g.c3, u.c3);
#endif
#ifdef TM_8
    put_glu(orow, col0 + 4u, g.c4, u.c4);
    put_glu(orow, col0 + 5u, g.c5, u.c5);
    put_glu(orow, col0 + 6u, g.c6, u.c6);
    put_glu(orow, col0 + 7u, g.c7, u.c7);
#endif
}
#endif

// Writes the columns of row `row`.
fn put_row(row: u32, col0: u32, a: RowAcc) {
    put(row, col0, a.c0);
#ifdef TM_2
    put(row, col0 + 1u, a.c1);
#endif
#ifdef TM_4
    put(row, col0 + 2u, a.c2);
    put(row, col0 + 3u, a.c3);
#endif
#ifdef TM_8
    put(row, col0 + 4u, a.c4);
    put(row, col0 + 5u, a.c5);
    put(row, col0 + 6u, a.c6);
    put(row, col0 + 7u, a.c7);
#endif
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
#ifdef R8
    let row = (wid.y * nwg.x + wid.x) * (8u * WG) + lid;
#else
    let row = (wid.y * nwg.x + wid.x) * (4u * WG) + lid;
#endif
    let col0 = wid.z * TM;
#ifdef X_BCAST
    lane = lid;
#endif

    // Rows and columns are written out, not looped: a loop this large is not unrolled by the
    // driver and its accumulators would leave registers.
    var a0: RowAcc;
    var a1: RowAcc;
    var a2: RowAcc;
    var a3: RowAcc;
#ifdef R8
    var a4: RowAcc;
    var a5: RowAcc;
    var a6: RowAcc;
    var a7: RowAcc;
#endif
#ifdef PAIRS
    for (var b = 0u; b < params.nb; b += 2u) {
        let xs = xcols_load(col0, b);
        let xt = xcols_load(col0, b + 1u);
        a0 = row_step2(row, b, xs, xt, a0);
        a1 = row_step2(row + WG, b, xs, xt, a1);
        a2 = row_step2(row + 2u * WG, b, xs, xt, a2);
        a3 = row_step2(row + 3u * WG, b, xs, xt, a3);
#ifdef R8
        a4 = row_step2(row + 4u * WG, b, xs, xt, a4);
        a5 = row_step2(row + 5u * WG, b, xs, xt, a5);
        a6 = row_step2(row + 6u * WG, b, xs, xt, a6);
        a7 = row_step2(row + 7u * WG, b, xs, xt, a7);
#endif
    }
#else
    for (var b = 0u; b < params.nb; b++) {
        let xs = xcols_load(col0, b);
        a0 = row_step(row, b, xs, a0);
        a1 = row_step(row + WG, b, xs, a1);
        a2 = row_step(row + 2u * WG, b, xs, a2);
        a3 = row_step(row + 3u * WG, b, xs, a3);
#ifdef R8
        a4 = row_step(row + 4u * WG, b, xs, a4);
        a5 = row_step(row + 5u * WG, b, xs, a5);
        a6 = row_step(row + 6u * WG, b, xs, a6);
        a7 = row_step(row + 7u * WG, b, xs, a7);
#endif
    }
#endif

#ifdef GLU_PAIRED
    // Rows row + j WG (j < 4) are gate rows, row + (j + 4) WG the same up rows.
    let orow = (wid.y * nwg.x + wid.x) * (4u * WG) + lid;
    put_pair(orow, col0, a0, a4);
    put_pair(orow + WG, col0, a1, a5);
    put_pair(orow + 2u * WG, col0, a2, a6);
    put_pair(orow + 3u * WG, col0, a3, a7);
#else
    put_row(row, col0, a0);
    put_row(row + WG, col0, a1);
    put_row(row + 2u * WG, col0, a2);
    put_row(row + 3u * WG, col0, a3);
#ifdef R8
    put_row(row + 4u * WG, col0, a4);
    put_row(row + 5u * WG, col0, a5);
    put_row(row + 6u * WG, col0, a6);
    put_row(row + 7u * WG, col0, a7);
#endif
#endif
}
