// attn_serial.wgsl: attn_fused.wgsl for CPU drivers (lavapipe): the same contract
// (common/kv_attn_common.wgsl), the same passes and state protocol, the same bits, but one
// invocation per (query row, query head) walking its keys alone, with no workgroup memory and no
// barrier. On llvmpipe workgroup memory is reached one invocation at a time and a barrier
// switches coroutines, which made the workgroup kernel cost 60 % of a 512-row prefill.
//
// Per split s of the row's visible keys (ascending), exactly the phases of common/kv_attn.wgsl:
//   scores  score_j = fma(q.k_j, scale, mask) with q.k_j = fma chain over dims 0..D in order
//           (starting from 0), m_s = max(ATTN_NEG_BIG, scores)
//   exp/PV  p_j = exp(score_j - m_s) (0 for hidden scores); l_s = sum p_j and
//           acc_s[dim] = fma(p_j, v_j[dim], acc_s[dim]), j ascending
//   fold    when l_s != 0: attn_fold into the running (m, l, acc) as attn_fused.wgsl does.
// Scores of the split wait in a private array (256 floats).
//
// Lanes: invocation f = (row-major over query heads, then rows) → head f / n_q, row f % n_q, so
// the invocations of a SIMD group are consecutive rows of one head and walk the same keys.
// Loops over dims run in blocks of 8 written out, so an invocation's loop iterations per split
// stay near 2 * 256 * (D / 16 + 1), far below lavapipe's budget of 65535 per invocation (the
// host sizes params.pass_splits for this kernel, src/kernels/attention/fused.rs).
//
// Variants: KV_F16 only (the default cache); USE_F16 binds the caches as array<vec2<f16>>
// (shader-f16), else as array<u32> with the exact integer f16 decode; INT64 (SHADER_INT64)
// binds them as array<vec4<u64>>, 16 dims per load, converted by unpack2x16float (exact): a
// CPU driver runs each load as a per-invocation loop, so a head row costs D / 16 loads
// instead of D / 2 (the same values, the same fma order, the same bits). HEAD_DIM = D (a multiple
// of 32, at most 256) is a define so every loop bound is a constant; WG_SIZE and FIRST_PASS are
// overrides as in attn_fused.wgsl.
// Shapes and bindings: as attn_fused.wgsl (out and state [n_q, n_head]).

#ifdef USE_F16
enable f16;
#endif

#ifdef INT64
#define KV_U64
#endif
#include "common/kv_layout.wgsl"
#include "common/kv_attn_common.wgsl"

#include "common/attn_inputs.wgsl"
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> state: array<vec4<u32>>;
#include "common/attn_row_state.wgsl"

override WG_SIZE: u32 = 8u;
override FIRST_PASS: bool = true;

const D: u32 = HEAD_DIM;

// Dims 2w and 2w + 1 of the K (is_v false) or V row starting at word `row`.
#ifdef INT64
// The 16 dims of a 64-bit cache entry (8 words, each two f16 halves, low half first) as f32:
// unpack2x16float converts every finite f16 exactly, as the word decode does.
fn halves(v: vec4<u64>) -> array<vec2<f32>, 8> {
    let a = bytes_u64_words(v.xy);
    let b = bytes_u64_words(v.zw);
    return array<vec2<f32>, 8>(
        unpack2x16float(a.x), unpack2x16float(a.y), unpack2x16float(a.z), unpack2x16float(a.w),
        unpack2x16float(b.x), unpack2x16float(b.y), unpack2x16float(b.z), unpack2x16float(b.w),
    );
}

// dot + q[i .. i + 16] . the 16 dims of entry `v`, one fma per dim in order.
fn dot16(q: ptr<function, array<f32, HEAD_DIM>>, i: u32, v: vec4<u64>, dot_in: f32) -> f32 {
    let h = halves(v);
    var dot = fma((*q)[i], h[0].x, dot_in);
    dot = fma((*q)[i + 1u], h[0].y, dot);
    dot = fma((*q)[i + 2u], h[1].x, dot);
    dot = fma((*q)[i + 3u], h[1].y, dot);
    dot = fma((*q)[i + 4u], h[2].x, dot);
    dot = fma((*q)[i + 5u], h[2].y, dot);
    dot = fma((*q)[i + 6u], h[3].x, dot);
    dot = fma((*q)[i + 7u], h[3].y, dot);
    dot = fma((*q)[i + 8u], h[4].x, dot);
    dot = fma((*q)[i + 9u], h[4].y, dot);
    dot = fma((*q)[i + 10u], h[5].x, dot);
    dot = fma((*q)[i + 11u], h[5].y, dot);
    dot = fma((*q)[i + 12u], h[6].x, dot);
    dot = fma((*q)[i + 13u], h[6].y, dot);
    dot = fma((*q)[i + 14u], h[7].x, dot);
    return fma((*q)[i + 15u], h[7].y, dot);
}

// acc[i .. i + 16] = fma(p, the 16 dims of entry `v`, acc[i .. i + 16]).
fn pv16(acc: ptr<function, array<f32, HEAD_DIM>>, i: u32, p: f32, v: vec4<u64>) {
    let h = halves(v);
    (*acc)[i] = fma(p, h[0].x, (*acc)[i]);
    (*acc)[i + 1u] = fma(p, h[0].y, (*acc)[i + 1u]);
    (*acc)[i + 2u] = fma(p, h[1].x, (*acc)[i + 2u]);
    (*acc)[i + 3u] = fma(p, h[1].y, (*acc)[i + 3u]);
    (*acc)[i + 4u] = fma(p, h[2].x, (*acc)[i + 4u]);
    (*acc)[i + 5u] = fma(p, h[2].y, (*acc)[i + 5u]);
    (*acc)[i + 6u] = fma(p, h[3].x, (*acc)[i + 6u]);
    (*acc)[i + 7u] = fma(p, h[3].y, (*acc)[i + 7u]);
    (*acc)[i + 8u] = fma(p, h[4].x, (*acc)[i + 8u]);
    (*acc)[i + 9u] = fma(p, h[4].y, (*acc)[i + 9u]);
    (*acc)[i + 10u] = fma(p, h[5].x, (*acc)[i + 10u]);
    (*acc)[i + 11u] = fma(p, h[5].y, (*acc)[i + 11u]);
    (*acc)[i + 12u] = fma(p, h[6].x, (*acc)[i + 12u]);
    (*acc)[i + 13u] = fma(p, h[6].y, (*acc)[i + 13u]);
    (*acc)[i + 14u] = fma(p, h[7].x, (*acc)[i + 14u]);
    (*acc)[i + 15u] = fma(p, h[7].y, (*acc)[i + 15u]);
}
#else
fn pair(is_v: bool, row: u32, w: u32) -> vec2<f32> {
#ifdef USE_F16
    var h = k_cache[row + w];
    if (is_v) {
        h = v_cache[row + w];
    }
    return vec2<f32>(f32(h.x), f32(h.y));
#else
    var word = k_cache[row + w];
    if (is_v) {
        word = v_cache[row + w];
    }
    return kv_half2(word);
#endif
}
#endif

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let f = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    if (f >= params.n_q * params.n_head) {
        return;
    }
    let head = f / params.n_q;
    let row = params.row0 + f % params.n_q;
    let kv_head = head / params.group;
    let rec = row * params.n_head + head;
    let base = rec * D;
    let n_splits = attn_n_splits(attn_visible(row));

    var first = 0u;
    if (!FIRST_PASS) {
        first = state[rec].z;
        if (first >= n_splits) {
            return; // finished by an earlier pass
        }
    }
    let end = min(n_splits, first + params.pass_splits);

    var q: array<f32, HEAD_DIM>;
    var acc: array<f32, HEAD_DIM>;
    var ml = attn_row_start(base, rec, &q, &acc);

    var sc: array<f32, 256>; // ATTN_SPLIT
    for (var s = first; s < end; s++) {
        let range = attn_split_range(row, s);
        let start = range.x;
        let n = range.y;

        var m_s = ATTN_NEG_BIG;
        for (var jj = 0u; jj < n; jj++) {
            let j = start + jj;
            let krow = kv_row_base(j, kv_head, params.n_kv_heads, D);
            var dot = 0.0;
#ifdef INT64
            // Blocks of 64 dims written out (for D = 64 the loop is one pass and every index
            // into q is a constant, so q stays in registers), then any 16-dim blocks left.
            let ke = krow >> 3u;
            for (var c = 0u; c < D / 64u; c++) {
                dot = dot16(&q, 64u * c, k_cache[ke + 4u * c], dot);
                dot = dot16(&q, 64u * c + 16u, k_cache[ke + 4u * c + 1u], dot);
                dot = dot16(&q, 64u * c + 32u, k_cache[ke + 4u * c + 2u], dot);
                dot = dot16(&q, 64u * c + 48u, k_cache[ke + 4u * c + 3u], dot);
            }
            for (var c = (D / 64u) * 4u; c < D / 16u; c++) {
                dot = dot16(&q, 16u * c, k_cache[ke + c], dot);
            }
#else
            for (var w = 0u; w < D / 2u; w += 4u) {
                let a = pair(false, krow, w);
                let b = pair(false, krow, w + 1u);
                let c = pair(false, krow, w + 2u);
                let e = pair(false, krow, w + 3u);
                dot = fma(q[2u * w], a.x, dot);
                dot = fma(q[2u * w + 1u], a.y, dot);
                dot = fma(q[2u * w + 2u], b.x, dot);
                dot = fma(q[2u * w + 3u], b.y, dot);
                dot = fma(q[2u * w + 4u], c.x, dot);
                dot = fma(q[2u * w + 5u], c.y, dot);
                dot = fma(q[2u * w + 6u], e.x, dot);
                dot = fma(q[2u * w + 7u], e.y, dot);
            }
#endif
            let add = attn_mask_add(row, j);
            let score = fma(dot, params.scale, add);
            sc[jj] = score;
            m_s = max(m_s, score);
        }

        var l_s = 0.0;
        var acc_s: array<f32, HEAD_DIM>;
        for (var jj = 0u; jj < n; jj++) {
            let score = sc[jj];
            let p = select(exp(score - m_s), 0.0, score <= ATTN_NEG_BIG);
            let vrow = kv_row_base(start + jj, kv_head, params.n_kv_heads, D);
#ifdef INT64
            // As the scores: a private array written at a varying index is stored lane by lane
            // on llvmpipe, at a constant index as one vector.
            let ve = vrow >> 3u;
            for (var c = 0u; c < D / 64u; c++) {
                pv16(&acc_s, 64u * c, p, v_cache[ve + 4u * c]);
                pv16(&acc_s, 64u * c + 16u, p, v_cache[ve + 4u * c + 1u]);
                pv16(&acc_s, 64u * c + 32u, p, v_cache[ve + 4u * c + 2u]);
                pv16(&acc_s, 64u * c + 48u, p, v_cache[ve + 4u * c + 3u]);
            }
            for (var c = (D / 64u) * 4u; c < D / 16u; c++) {
                pv16(&acc_s, 16u * c, p, v_cache[ve + c]);
            }
#else
            for (var w = 0u; w < D / 2u; w += 4u) {
                let a = pair(true, vrow, w);
                let b = pair(true, vrow, w + 1u);
                let c = pair(true, vrow, w + 2u);
                let e = pair(true, vrow, w + 3u);
                acc_s[2u * w] = fma(p, a.x, acc_s[2u * w]);
                acc_s[2u * w + 1u] = fma(p, a.y, acc_s[2u * w + 1u]);
                acc_s[2u * w + 2u] = fma(p, b.x, acc_s[2u * w + 2u]);
                acc_s[2u * w + 3u] = fma(p, b.y, acc_s[2u * w + 3u]);
                acc_s[2u * w + 4u] = fma(p, c.x, acc_s[2u * w + 4u]);
                acc_s[2u * w + 5u] = fma(p, c.y, acc_s[2u * w + 5u]);
                acc_s[2u * w + 6u] = fma(p, e.x, acc_s[2u * w + 6u]);
                acc_s[2u * w + 7u] = fma(p, e.y, acc_s[2u * w + 7u]);
            }
#endif
            l_s += p;
        }

        ml = attn_row_fold(ml, m_s, l_s, &acc, &acc_s);
    }

    attn_row_save(base, rec, &acc, ml, end, n_splits); // the state, or acc / l
}
