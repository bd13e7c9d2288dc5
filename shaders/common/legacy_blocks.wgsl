// common/legacy_blocks.wgsl: one 32-element block of one row (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) as
// matmul_rows.wgsl uses it: loaded once (blk_load), decoded once (blk_decode) and dotted with
// one block of one column of X (xblk_load, blk_dot) in the fixed order of
// common/quant_legacy.wgsl. Every index that picks a register is a constant: the helpers are
// written out rather than looped, so the driver's compiler keeps blocks in registers.
// Needs common/quant_common.wgsl with W_VEC4 (params, w4: qs plane 0 starts at word 0 and a
// block's qs is one vec4, two for Q8_0), common/quant_legacy_units.wgsl and, from the includer,
// `x` (array<vec4<f32>>, storage or uniform).

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
    let a = w4[2u * g];
    let c = w4[2u * g + 1u];
    o.q[0] = a.x;
    o.q[1] = a.y;
    o.q[2] = a.z;
    o.q[3] = a.w;
    o.q[4] = c.x;
    o.q[5] = c.y;
    o.q[6] = c.z;
    o.q[7] = c.w;
#else
    let a = w4[g];
    o.q[0] = a.x;
    o.q[1] = a.y;
    o.q[2] = a.z;
    o.q[3] = a.w;
#endif
#ifdef TYPE_Q5_0
    o.qh = w_word(params.plane1 + g);
#endif
#ifdef TYPE_Q5_1
    o.qh = w_word(params.plane1 + g);
#endif
    return o;
}

// Elements 4i..4i+3 of the block as exact integers in f32 (i is a constant at every call).
fn blk_q(k: Blk, i: u32) -> vec4<f32> {
#ifdef TYPE_Q8_0
    return legacy_elems(k.q[i], 0u, i);
#else
    return legacy_elems(k.q[i & 3u], k.qh, i);
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

// A block decoded: q[i] = elements 4i..4i+3 as exact integers in f32.
struct Dec {
    d: f32,
    m: f32,
    q: array<vec4<f32>, 8>,
}

fn blk_decode(k: Blk) -> Dec {
    var o: Dec;
    o.d = k.d;
    o.m = k.m;
    o.q[0] = blk_q(k, 0u);
    o.q[1] = blk_q(k, 1u);
    o.q[2] = blk_q(k, 2u);
    o.q[3] = blk_q(k, 3u);
    o.q[4] = blk_q(k, 4u);
    o.q[5] = blk_q(k, 5u);
    o.q[6] = blk_q(k, 6u);
    o.q[7] = blk_q(k, 7u);
    return o;
}

// acc + this block . this block of X, in the fixed order.
fn blk_dot(k: Dec, xb: XBlk, acc: vec4<f32>) -> vec4<f32> {
    var s = k.q[0] * xb.v[0];
    s = fma(k.q[1], xb.v[1], s);
    s = fma(k.q[2], xb.v[2], s);
    s = fma(k.q[3], xb.v[3], s);
    s = fma(k.q[4], xb.v[4], s);
    s = fma(k.q[5], xb.v[5], s);
    s = fma(k.q[6], xb.v[6], s);
    s = fma(k.q[7], xb.v[7], s);
#ifdef LEGACY_MIN
    return fma(vec4<f32>(k.m), xb.sx, fma(vec4<f32>(k.d), s, acc));
#else
    return fma(vec4<f32>(k.d), s, acc);
#endif
}

