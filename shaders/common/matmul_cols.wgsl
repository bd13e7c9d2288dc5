// common/matmul_cols.wgsl: the column tile of matmul_rows.wgsl: one block of X for each of the
// TM columns (loaded, or shared by subgroupBroadcast with X_BCAST), one row's TM accumulators,
// a decoded weight block against the tile (blk_dot, or blk_dot4 for 4 and 8 columns), and the
// writes of a row's TM outputs (through put, or put2 where an output takes two accumulators).
// Needs: the TM, TM_2, TM_4, TM_8 and X_BCAST defines, params (x_off, x_stride, m), x and the
// helpers of common/legacy_blocks.wgsl (XBlk, Dec, x_at, xblk_load, xblk_sum, blk_dot,
// legacy_hsum).

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

#ifndef PUT2
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
#endif

#ifdef PUT2
// Writes the columns of one output from two accumulators: the paired GLU's gate and up rows, or
// ROPE's two dims of a pair (put2 of the epilogue).
fn put_row_pair(row: u32, col0: u32, a: RowAcc, b: RowAcc) {
    put2(row, col0, a.c0, b.c0);
#ifdef TM_2
    put2(row, col0 + 1u, a.c1, b.c1);
#endif
#ifdef TM_4
    put2(row, col0 + 2u, a.c2, b.c2);
    put2(row, col0 + 3u, a.c3, b.c3);
#endif
#ifdef TM_8
    put2(row, col0 + 4u, a.c4, b.c4);
    put2(row, col0 + 5u, a.c5, b.c5);
    put2(row, col0 + 6u, a.c6, b.c6);
    put2(row, col0 + 7u, a.c7, b.c7);
#endif
}
#endif
