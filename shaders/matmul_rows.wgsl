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
// The column tile (TM blocks of X, a row's TM accumulators, a block against them, the writes of
// a row's TM outputs) is common/matmul_cols.wgsl, the writes of one value (plain, split, GLU)
// common/matmul_put.wgsl; this file has the bindings, the row steps and the loop.
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
//   ROPE       (with SPLIT3) q is rotated into y and k and v go rotated into the f16 K and V
//              caches instead of y2 and y3 (common/matmul_rope.wgsl: rope_kv.wgsl's work, one
//              dispatch less); an invocation's rows are then pairs (2 lid, 2 lid + 1) of every
//              2 WG rows, so both dims of a RoPE pair are in one invocation
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
// (split-local; with ROPE rows rb * R * WG + 2 lid + (j % 2) + (j / 2) * 2 WG), wid.z ->
// columns [TM * wid.z, TM * wid.z + TM).
// Bindings (as matmul.wgsl): 0 uniform Params, 1 w (read), 2 x (read, vec4), 3 y (read_write),
// with a GLU epilogue 4 gate (read); with SPLIT3 4 y2, 5 y3 (read_write), or with ROPE 4..8 of
// common/matmul_rope.wgsl.

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
// Epilogues whose outputs take two accumulators (put2 and common/matmul_cols.wgsl's
// put_row_pair): the paired GLU (gate, up) and ROPE (the two dims of a pair).
#ifdef GLU_PAIRED
#define PUT2
#endif
#ifdef ROPE
#define PUT2
#endif
#ifdef SPLIT3
#ifndef ROPE
@group(0) @binding(4) var<storage, read_write> y2: array<f32>; // [M, split2 - split1]
@group(0) @binding(5) var<storage, read_write> y3: array<f32>; // [M, n_out - split2]
#endif
#endif

#ifdef GLU
#include "common/glu_act.wgsl"
#ifndef GLU_PAIRED
// The gate projection, laid out as y: the output is glu_act(gate) * (X . W^T), as glu.wgsl.
@group(0) @binding(4) var<storage, read> gate: array<f32>;
#endif
#endif

#include "common/matmul_cols.wgsl"
#include "common/matmul_put.wgsl"
#ifdef ROPE
#include "common/matmul_rope.wgsl"
#endif

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

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
#ifdef R8
    let blk_row = (wid.y * nwg.x + wid.x) * (8u * WG);
#else
    let blk_row = (wid.y * nwg.x + wid.x) * (4u * WG);
#endif
    // Accumulator 0's row, and s_j: accumulator j's row - row (constants).
#ifdef ROPE
    let row = blk_row + 2u * lid;
    let s1 = 1u;
    let s2 = 2u * WG;
    let s3 = 2u * WG + 1u;
#ifdef R8
    let s4 = 4u * WG;
    let s5 = 4u * WG + 1u;
    let s6 = 6u * WG;
    let s7 = 6u * WG + 1u;
#endif
#else
    let row = blk_row + lid;
    let s1 = WG;
    let s2 = 2u * WG;
    let s3 = 3u * WG;
#ifdef R8
    let s4 = 4u * WG;
    let s5 = 5u * WG;
    let s6 = 6u * WG;
    let s7 = 7u * WG;
#endif
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
        a1 = row_step2(row + s1, b, xs, xt, a1);
        a2 = row_step2(row + s2, b, xs, xt, a2);
        a3 = row_step2(row + s3, b, xs, xt, a3);
#ifdef R8
        a4 = row_step2(row + s4, b, xs, xt, a4);
        a5 = row_step2(row + s5, b, xs, xt, a5);
        a6 = row_step2(row + s6, b, xs, xt, a6);
        a7 = row_step2(row + s7, b, xs, xt, a7);
#endif
    }
#else
    for (var b = 0u; b < params.nb; b++) {
        let xs = xcols_load(col0, b);
        a0 = row_step(row, b, xs, a0);
        a1 = row_step(row + s1, b, xs, a1);
        a2 = row_step(row + s2, b, xs, a2);
        a3 = row_step(row + s3, b, xs, a3);
#ifdef R8
        a4 = row_step(row + s4, b, xs, a4);
        a5 = row_step(row + s5, b, xs, a5);
        a6 = row_step(row + s6, b, xs, a6);
        a7 = row_step(row + s7, b, xs, a7);
#endif
    }
#endif

#ifdef GLU_PAIRED
    // Rows row + j WG (j < 4) are gate rows, row + (j + 4) WG the same up rows.
    let orow = (wid.y * nwg.x + wid.x) * (4u * WG) + lid;
    put_row_pair(orow, col0, a0, a4);
    put_row_pair(orow + WG, col0, a1, a5);
    put_row_pair(orow + 2u * WG, col0, a2, a6);
    put_row_pair(orow + 3u * WG, col0, a3, a7);
#else
#ifdef ROPE
    put_row_pair(row, col0, a0, a1);
    put_row_pair(row + s2, col0, a2, a3);
#ifdef R8
    put_row_pair(row + s4, col0, a4, a5);
    put_row_pair(row + s6, col0, a6, a7);
#endif
#else
    put_row(row, col0, a0);
    put_row(row + s1, col0, a1);
    put_row(row + s2, col0, a2);
    put_row(row + s3, col0, a3);
#ifdef R8
    put_row(row + s4, col0, a4);
    put_row(row + s5, col0, a5);
    put_row(row + s6, col0, a6);
    put_row(row + s7, col0, a7);
#endif
#endif
#endif
}
