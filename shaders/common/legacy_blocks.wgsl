// common/legacy_blocks.wgsl: one 32-element block of one row (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) as
// matmul_rows.wgsl uses it: loaded once (blk_load), decoded once (blk_decode) and dotted with
// one block of one column of X (xblk_load, blk_dot) in the fixed order of
// common/quant_legacy.wgsl. Every index that picks a register is a constant: the helpers are
// written out rather than looped, so the driver's compiler keeps blocks in registers.
// Needs common/quant_common.wgsl with W_VEC4 (params, w4: qs plane 0 starts at word 0 and a
// block's qs is one vec4, two for Q8_0) or W_U64 (w8: 32 bytes per entry, so two blocks' qs or
// one Q8_0 block's),
// common/quant_legacy_units.wgsl and, from the includer, `x` (storage or uniform): vec4<f32>
// entries, or with X_U64 the same 16 bytes as vec2<u64>.

// One block of one row as loaded: scales and quant words (Q8_0 fills q[0..8]; the nibble
// formats q[0..4] and, for Q5_*, qh).
struct Blk {
    d: f32,
    m: f32,
    q: array<u32, 8>,
    qh: u32,
}

#ifdef W_U64
// The 8 quant words of a Q8_0 block from its 32 bytes.
fn q8_words(a: vec4<u64>) -> array<u32, 8> {
    let lo = bytes_u64_words(a.xy);
    let hi = bytes_u64_words(a.zw);
    return array<u32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
}

// The 4 quant words of a nibble-format block from its 16 bytes.
fn nibble_words(a: vec2<u64>) -> array<u32, 8> {
    let w = bytes_u64_words(a);
    return array<u32, 8>(w.x, w.y, w.z, w.w, 0u, 0u, 0u, 0u);
}
#endif

// Block b of split-local row r.
fn blk_load(r: u32, b: u32) -> Blk {
    let g = r * params.nb + b;
    let dm = legacy_dm_fast(g);
    var o: Blk;
    o.d = dm.x;
    o.m = dm.y;
#ifdef W_U64
#ifdef TYPE_Q8_0
    o.q = q8_words(w8[g]);
#else
    // Half g & 1 of entry g >> 1 (two components; PAIRS loads both halves at once).
    let h = 2u * (g & 1u);
    o.q = nibble_words(vec2<u64>(w8[g >> 1u][h], w8[g >> 1u][h + 1u]));
#endif
#else
#ifdef TYPE_Q8_0
    let a = w4[2u * g];
    let c = w4[2u * g + 1u];
    o.q[4] = c.x;
    o.q[5] = c.y;
    o.q[6] = c.z;
    o.q[7] = c.w;
#else
    let a = w4[g];
#endif
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

#ifdef PAIRS
// Blocks b and b + 1 of split-local row r, where r * nb + b is even (nb and b even): the
// quants, scales and fifth bits of both in one load each (two for Q8_0's quants).
struct Blk2 {
    lo: Blk,
    hi: Blk,
}

fn blk_load2(r: u32, b: u32) -> Blk2 {
    let g = r * params.nb + b;
    var o: Blk2;
    let dm = legacy_dm_pair(g);
    o.lo.d = dm.x;
    o.lo.m = dm.y;
    o.hi.d = dm.z;
    o.hi.m = dm.w;
#ifdef TYPE_Q8_0
    o.lo.q = q8_words(w8[g]);
    o.hi.q = q8_words(w8[g + 1u]);
#else
    let a = w8[g >> 1u];
    o.lo.q = nibble_words(a.xy);
    o.hi.q = nibble_words(a.zw);
#endif
#ifdef TYPE_Q5_0
    let qh = w_u64(params.plane1 + g);
    o.lo.qh = u32(qh);
    o.hi.qh = u32(qh >> 32u);
#endif
#ifdef TYPE_Q5_1
    let qh = w_u64(params.plane1 + g);
    o.lo.qh = u32(qh);
    o.hi.qh = u32(qh >> 32u);
#endif
    return o;
}
#endif

// Elements 4i..4i+3 of the block as exact integers in f32 (i is a constant at every call).
fn blk_q(k: Blk, i: u32) -> vec4<f32> {
#ifdef TYPE_Q8_0
    return legacy_elems(k.q[i], 0u, i);
#else
    return legacy_elems(k.q[i & 3u], k.qh, i);
#endif
}

// X for one block of one column: its 8 vec4s and (with a minimum) legacy_hsum of their sum.
struct XBlk {
    v: array<vec4<f32>, 8>,
    sx: f32,
}

#ifdef X_U64
// Elements 4i..4i+3 of X from their two u64s (the f32 bits, low word first).
fn x_at(i: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(bytes_u64_words(x[i]));
}
#else
fn x_at(i: u32) -> vec4<f32> {
    return x[i];
}
#endif

// The block of X starting at vec4 index `i0`.
fn xblk_load(i0: u32) -> XBlk {
    var o: XBlk;
    o.v[0] = x_at(i0);
    o.v[1] = x_at(i0 + 1u);
    o.v[2] = x_at(i0 + 2u);
    o.v[3] = x_at(i0 + 3u);
    o.v[4] = x_at(i0 + 4u);
    o.v[5] = x_at(i0 + 5u);
    o.v[6] = x_at(i0 + 6u);
    o.v[7] = x_at(i0 + 7u);
    return xblk_sum(o);
}

// `o` with its sum (with a minimum): sx = x[0..4] + x[4..8] + ... in order, then legacy_hsum(sx).
fn xblk_sum(b: XBlk) -> XBlk {
    var o = b;
#ifdef LEGACY_MIN
    var sx = o.v[0] + o.v[1];
    sx = sx + o.v[2];
    sx = sx + o.v[3];
    sx = sx + o.v[4];
    sx = sx + o.v[5];
    sx = sx + o.v[6];
    sx = sx + o.v[7];
    o.sx = legacy_hsum(sx);
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
fn blk_dot(k: Dec, xb: XBlk, acc: f32) -> f32 {
    var s = k.q[0] * xb.v[0];
    s = fma(k.q[1], xb.v[1], s);
    s = fma(k.q[2], xb.v[2], s);
    s = fma(k.q[3], xb.v[3], s);
    s = fma(k.q[4], xb.v[4], s);
    s = fma(k.q[5], xb.v[5], s);
    s = fma(k.q[6], xb.v[6], s);
    s = fma(k.q[7], xb.v[7], s);
    let ss = legacy_hsum(s);
#ifdef LEGACY_MIN
    return fma(k.m, xb.sx, fma(k.d, ss, acc));
#else
    return fma(k.d, ss, acc);
#endif
}

