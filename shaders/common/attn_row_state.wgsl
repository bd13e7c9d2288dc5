// common/attn_row_state.wgsl: the running state of one (query row, head) record in the CPU-driver
// attention kernels (attn_serial.wgsl, attn_rows.wgsl): loaded at the start of a pass, folded
// with each split's partial, saved (or finished) at the end of the pass, in the state protocol
// of attn_fused.wgsl (common/kv_attn_common.wgsl). The same operations in the same order for
// both kernels, so they give the same bits.
// Needs HEAD_DIM (a multiple of 8), the FIRST_PASS override, q_in, out and state.

// q and acc of the record at element `base` (`rec` in state) at the start of a pass; returns
// its (m, l).
fn attn_row_start(
    base: u32,
    rec: u32,
    q: ptr<function, array<f32, HEAD_DIM>>,
    acc: ptr<function, array<f32, HEAD_DIM>>,
) -> vec2<f32> {
    for (var i = 0u; i < HEAD_DIM; i += 8u) {
        for (var k = 0u; k < 8u; k++) {
            (*q)[i + k] = q_in[base + i + k];
            (*acc)[i + k] = select(out[base + i + k], 0.0, FIRST_PASS);
        }
    }
    var ml = vec2<f32>(ATTN_NEG_BIG, 0.0);
    if (!FIRST_PASS) {
        ml = bitcast<vec2<f32>>(state[rec].xy);
    }
    return ml;
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
    for (var i = 0u; i < HEAD_DIM; i += 8u) {
        for (var k = 0u; k < 8u; k++) {
            (*acc)[i + k] = fma((*acc)[i + k], g.z, (*acc_s)[i + k] * g.w);
        }
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
    for (var i = 0u; i < HEAD_DIM; i += 8u) {
        for (var k = 0u; k < 8u; k++) {
            out[base + i + k] = select((*acc)[i + k], attn_finish((*acc)[i + k], ml.y), done);
        }
    }
    state[rec] = vec4<u32>(bitcast<vec2<u32>>(ml), end, 0u);
}
