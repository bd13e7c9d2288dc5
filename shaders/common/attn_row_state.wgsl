// common/attn_row_state.wgsl: the running state of one (query row, head) record in the CPU-driver
// attention kernels (attn_serial.wgsl, attn_rows.wgsl): loaded at the start of a pass, folded
// with each split's partial, saved (or finished) at the end of the pass, in the state protocol
// of attn_fused.wgsl (common/kv_attn_common.wgsl). The same operations in the same order for
// both kernels, so they give the same bits.
// Needs HEAD_DIM (a multiple of 8), the FIRST_PASS override, q_in, out and state.

// Written-out blocks of 8 dims: for HEAD_DIM = 64 every index into q, acc and acc_s is then a
// constant, and llvmpipe keeps the arrays in registers. One varying index anywhere leaves an
// array in memory, where a store under a per-lane mask (every store in the key loops) is one
// test, branch and scalar store per lane.

// q[i .. i + 8] and acc[i .. i + 8] at the start of a pass.
fn start8(
    base: u32,
    q: ptr<function, array<f32, HEAD_DIM>>,
    acc: ptr<function, array<f32, HEAD_DIM>>,
    i: u32,
) {
    for (var k = 0u; k < 8u; k++) {
        (*q)[i + k] = q_in[base + i + k];
        (*acc)[i + k] = select(out[base + i + k], 0.0, FIRST_PASS);
    }
}

// out[base + i .. + 8]: acc, or acc / l when `done`.
fn save8(base: u32, acc: ptr<function, array<f32, HEAD_DIM>>, i: u32, l: f32, done: bool) {
    for (var k = 0u; k < 8u; k++) {
        out[base + i + k] = select((*acc)[i + k], attn_finish((*acc)[i + k], l), done);
    }
}

// q and acc of the record at element `base` (`rec` in state) at the start of a pass; returns
// its (m, l).
fn attn_row_start(
    base: u32,
    rec: u32,
    q: ptr<function, array<f32, HEAD_DIM>>,
    acc: ptr<function, array<f32, HEAD_DIM>>,
) -> vec2<f32> {
    for (var c = 0u; c < HEAD_DIM / 64u; c++) {
        start8(base, q, acc, 64u * c);
        start8(base, q, acc, 64u * c + 8u);
        start8(base, q, acc, 64u * c + 16u);
        start8(base, q, acc, 64u * c + 24u);
        start8(base, q, acc, 64u * c + 32u);
        start8(base, q, acc, 64u * c + 40u);
        start8(base, q, acc, 64u * c + 48u);
        start8(base, q, acc, 64u * c + 56u);
    }
    for (var i = (HEAD_DIM / 64u) * 64u; i < HEAD_DIM; i += 8u) {
        start8(base, q, acc, i);
    }
    var ml = vec2<f32>(ATTN_NEG_BIG, 0.0);
    if (!FIRST_PASS) {
        ml = bitcast<vec2<f32>>(state[rec].xy);
    }
    return ml;
}

// acc[i .. i + 8] = fma(acc, g.z, acc_s * g.w).
fn fold8(
    acc: ptr<function, array<f32, HEAD_DIM>>,
    acc_s: ptr<function, array<f32, HEAD_DIM>>,
    i: u32,
    g: vec4<f32>,
) {
    (*acc)[i] = fma((*acc)[i], g.z, (*acc_s)[i] * g.w);
    (*acc)[i + 1u] = fma((*acc)[i + 1u], g.z, (*acc_s)[i + 1u] * g.w);
    (*acc)[i + 2u] = fma((*acc)[i + 2u], g.z, (*acc_s)[i + 2u] * g.w);
    (*acc)[i + 3u] = fma((*acc)[i + 3u], g.z, (*acc_s)[i + 3u] * g.w);
    (*acc)[i + 4u] = fma((*acc)[i + 4u], g.z, (*acc_s)[i + 4u] * g.w);
    (*acc)[i + 5u] = fma((*acc)[i + 5u], g.z, (*acc_s)[i + 5u] * g.w);
    (*acc)[i + 6u] = fma((*acc)[i + 6u], g.z, (*acc_s)[i + 6u] * g.w);
    (*acc)[i + 7u] = fma((*acc)[i + 7u], g.z, (*acc_s)[i + 7u] * g.w);
}

// Folds a split's partial (m_s, l_s, acc_s) into (ml, acc) when l_s != 0; returns (m, l).
fn attn_row_fold(
    ml: vec2<f32>,
    m_s: f32,
    l_s: f32,
    acc: ptr<function, array<f32, HEAD_DIM>>,
    acc_s: ptr<function, array<f32, HEAD_DIM>>,
) -> vec2<f32> {
    if (l_s == 0.0) {
        return ml;
    }
    let g = attn_fold(ml.x, ml.y, m_s, l_s);
    for (var c = 0u; c < HEAD_DIM / 64u; c++) {
        fold8(acc, acc_s, 64u * c, g);
        fold8(acc, acc_s, 64u * c + 8u, g);
        fold8(acc, acc_s, 64u * c + 16u, g);
        fold8(acc, acc_s, 64u * c + 24u, g);
        fold8(acc, acc_s, 64u * c + 32u, g);
        fold8(acc, acc_s, 64u * c + 40u, g);
        fold8(acc, acc_s, 64u * c + 48u, g);
        fold8(acc, acc_s, 64u * c + 56u, g);
    }
    for (var i = (HEAD_DIM / 64u) * 64u; i < HEAD_DIM; i += 8u) {
        fold8(acc, acc_s, i, g);
    }
    return g.xy;
}

// Saves the state at the end of a pass that stopped before split `end` of `n_splits`, or, at
// the last split, writes acc / l.
fn attn_row_save(
    base: u32,
    rec: u32,
    acc: ptr<function, array<f32, HEAD_DIM>>,
    ml: vec2<f32>,
    end: u32,
    n_splits: u32,
) {
    let done = end >= n_splits;
    for (var c = 0u; c < HEAD_DIM / 64u; c++) {
        save8(base, acc, 64u * c, ml.y, done);
        save8(base, acc, 64u * c + 8u, ml.y, done);
        save8(base, acc, 64u * c + 16u, ml.y, done);
        save8(base, acc, 64u * c + 24u, ml.y, done);
        save8(base, acc, 64u * c + 32u, ml.y, done);
        save8(base, acc, 64u * c + 40u, ml.y, done);
        save8(base, acc, 64u * c + 48u, ml.y, done);
        save8(base, acc, 64u * c + 56u, ml.y, done);
    }
    for (var i = (HEAD_DIM / 64u) * 64u; i < HEAD_DIM; i += 8u) {
        save8(base, acc, i, ml.y, done);
    }
    state[rec] = vec4<u32>(bitcast<vec2<u32>>(ml), end, 0u);
}
