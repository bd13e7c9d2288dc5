// attn_rows.wgsl: attn_serial.wgsl for blocks of query rows (prefill, verify) on CPU drivers
// whose subgroups are exactly one workgroup of 8: a workgroup is 8 consecutive query rows of
// one head, so its lanes walk the same keys, and each K or V row is loaded once per workgroup,
// 16 bytes per lane, then shared by subgroupBroadcast. llvmpipe runs every load as a loop over
// the lanes, so a key costs 1 load per lane instead of D / 16 (attn_serial's 64-bit loads).
//
// The same contract (common/kv_attn_common.wgsl), passes, state protocol and bits as
// attn_serial.wgsl: per row the same splits, the same fma order over dims and keys, the same
// fold. Lanes differ only in how many keys of a split they see (causal rows) and in how many
// splits they have left; the loops run to the subgroup's maximum, and a lane skips by select
// what it does not see (its max, sum and accumulators keep their bits).
//
// Work split: workgroup w (2D past the per-dimension limit) -> head w / n_blk, rows
// 8 * (w % n_blk) .. + 8 with n_blk = ceil(n_q / 8); lanes past n_q run clamped to the last row
// and write nothing. No early return: every lane reaches every broadcast.
// Needs: INT64 (the caches as array<vec2<u64>>, 8 dims per entry), HEAD_DIM = D a multiple of
// 64, at most 256; WG_SIZE 8 (= the subgroup size) and FIRST_PASS overrides as attn_serial.
// Shapes and bindings: as attn_fused.wgsl (out and state [n_q, n_head]).

#define KV_U64X2
#include "common/kv_layout.wgsl"
#include "common/kv_attn_common.wgsl"

#include "common/attn_inputs.wgsl"
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> state: array<vec4<u32>>;
#include "common/attn_row_state.wgsl"

override WG_SIZE: u32 = 8u;
override FIRST_PASS: bool = true;

const D: u32 = HEAD_DIM;
const NONE: u32 = 0xffffffffu;

// This lane's 8 dims of a K or V row as f32 (ascending; unpack2x16float is exact). Each lane
// unpacks its own dims once and the f32s are broadcast, instead of every lane unpacking every
// lane's words.
struct Dims {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

fn dims_of(e: vec4<u32>) -> Dims {
    return Dims(
        vec4<f32>(unpack2x16float(e.x), unpack2x16float(e.y)),
        vec4<f32>(unpack2x16float(e.z), unpack2x16float(e.w)),
    );
}

// One lane's 8 dims from its two broadcast vec4s.
fn dims8(lo: vec4<f32>, hi: vec4<f32>) -> array<f32, 8> {
    return array<f32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
}

// The 64 dims of the subgroup's words, lane l's 8 in entry l (constant lanes, one shuffle each).
fn dims64(e: Dims) -> array<array<f32, 8>, 8> {
    return array<array<f32, 8>, 8>(
        dims8(subgroupBroadcast(e.lo, 0u), subgroupBroadcast(e.hi, 0u)),
        dims8(subgroupBroadcast(e.lo, 1u), subgroupBroadcast(e.hi, 1u)),
        dims8(subgroupBroadcast(e.lo, 2u), subgroupBroadcast(e.hi, 2u)),
        dims8(subgroupBroadcast(e.lo, 3u), subgroupBroadcast(e.hi, 3u)),
        dims8(subgroupBroadcast(e.lo, 4u), subgroupBroadcast(e.hi, 4u)),
        dims8(subgroupBroadcast(e.lo, 5u), subgroupBroadcast(e.hi, 5u)),
        dims8(subgroupBroadcast(e.lo, 6u), subgroupBroadcast(e.hi, 6u)),
        dims8(subgroupBroadcast(e.lo, 7u), subgroupBroadcast(e.hi, 7u)),
    );
}

// dot + q[i0 .. i0 + 8] . h, one fma per dim in order.
fn dot8(q: ptr<function, array<f32, HEAD_DIM>>, i0: u32, h: array<f32, 8>, dot_in: f32) -> f32 {
    var dot = fma((*q)[i0], h[0], dot_in);
    dot = fma((*q)[i0 + 1u], h[1], dot);
    dot = fma((*q)[i0 + 2u], h[2], dot);
    dot = fma((*q)[i0 + 3u], h[3], dot);
    dot = fma((*q)[i0 + 4u], h[4], dot);
    dot = fma((*q)[i0 + 5u], h[5], dot);
    dot = fma((*q)[i0 + 6u], h[6], dot);
    return fma((*q)[i0 + 7u], h[7], dot);
}

// acc[i] = fma(p, h, acc[i]) for the 8 dims from i0 where `ok`, else unchanged.
fn pv8(acc: ptr<function, array<f32, HEAD_DIM>>, i0: u32, p: f32, h: array<f32, 8>, ok: bool) {
    (*acc)[i0] = select((*acc)[i0], fma(p, h[0], (*acc)[i0]), ok);
    (*acc)[i0 + 1u] = select((*acc)[i0 + 1u], fma(p, h[1], (*acc)[i0 + 1u]), ok);
    (*acc)[i0 + 2u] = select((*acc)[i0 + 2u], fma(p, h[2], (*acc)[i0 + 2u]), ok);
    (*acc)[i0 + 3u] = select((*acc)[i0 + 3u], fma(p, h[3], (*acc)[i0 + 3u]), ok);
    (*acc)[i0 + 4u] = select((*acc)[i0 + 4u], fma(p, h[4], (*acc)[i0 + 4u]), ok);
    (*acc)[i0 + 5u] = select((*acc)[i0 + 5u], fma(p, h[5], (*acc)[i0 + 5u]), ok);
    (*acc)[i0 + 6u] = select((*acc)[i0 + 6u], fma(p, h[6], (*acc)[i0 + 6u]), ok);
    (*acc)[i0 + 7u] = select((*acc)[i0 + 7u], fma(p, h[7], (*acc)[i0 + 7u]), ok);
}

// This lane's words of the K (is_v false) or V row of key j: entry 8c + lane of the row, i.e.
// dims 64c + 8 lane .. + 8.
fn row_words(is_v: bool, j: u32, kv_head: u32, c: u32, lane: u32) -> vec4<u32> {
    let e = (kv_row_base(j, kv_head, params.n_kv_heads, D) >> 2u) + 8u * c + lane;
    if (is_v) {
        return bytes_u64_words(v_cache[e]);
    }
    return bytes_u64_words(k_cache[e]);
}

// q . k_j over all dims in order (every lane loads its share of the row).
fn score_dot(q: ptr<function, array<f32, HEAD_DIM>>, j: u32, kv_head: u32, lane: u32) -> f32 {
    var dot = 0.0;
    for (var c = 0u; c < D / 64u; c++) {
        let h = dims64(dims_of(row_words(false, j, kv_head, c, lane)));
        let i = 64u * c;
        dot = dot8(q, i, h[0], dot);
        dot = dot8(q, i + 8u, h[1], dot);
        dot = dot8(q, i + 16u, h[2], dot);
        dot = dot8(q, i + 24u, h[3], dot);
        dot = dot8(q, i + 32u, h[4], dot);
        dot = dot8(q, i + 40u, h[5], dot);
        dot = dot8(q, i + 48u, h[6], dot);
        dot = dot8(q, i + 56u, h[7], dot);
    }
    return dot;
}

// acc += p * v_j where `ok` (every lane loads its share of the row).
fn pv_row(
    acc: ptr<function, array<f32, HEAD_DIM>>,
    p: f32,
    j: u32,
    kv_head: u32,
    lane: u32,
    ok: bool,
) {
    for (var c = 0u; c < D / 64u; c++) {
        let h = dims64(dims_of(row_words(true, j, kv_head, c, lane)));
        let i = 64u * c;
        pv8(acc, i, p, h[0], ok);
        pv8(acc, i + 8u, p, h[1], ok);
        pv8(acc, i + 16u, p, h[2], ok);
        pv8(acc, i + 24u, p, h[3], ok);
        pv8(acc, i + 32u, p, h[4], ok);
        pv8(acc, i + 40u, p, h[5], ok);
        pv8(acc, i + 48u, p, h[6], ok);
        pv8(acc, i + 56u, p, h[7], ok);
    }
}

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let w = wid.y * nwg.x + wid.x;
    let n_blk = (params.n_q + 7u) / 8u;
    let head = w / n_blk;
    let row_raw = (w % n_blk) * 8u + lid;
    // Workgroups past the last head (a 2D grid rounds up) run head n_head - 1, writing nothing.
    let live = row_raw < params.n_q && head < params.n_head;
    let row = params.row0 + min(row_raw, params.n_q - 1u);
    let h = min(head, params.n_head - 1u);
    let kv_head = h / params.group;
    let rec = row * params.n_head + h;
    let base = rec * D;
    let n_splits = attn_n_splits(attn_visible(row));

    var first = 0u;
    if (!FIRST_PASS) {
        first = state[rec].z;
    }
    // Lanes past n_q, and rows finished by an earlier pass, take no split and write nothing
    // (a first pass writes every live row, as attn_serial does).
    let busy = live && (FIRST_PASS || first < n_splits);
    let end = min(n_splits, first + params.pass_splits);
    let s_lo = subgroupMin(select(NONE, first, busy));
    let s_hi = subgroupMax(select(0u, end, busy));

    var q: array<f32, HEAD_DIM>;
    var acc: array<f32, HEAD_DIM>;
    var ml = attn_row_start(base, rec, &q, &acc);

    var sc: array<f32, 256>; // ATTN_SPLIT
    for (var s = s_lo; s < s_hi; s++) {
        let range = attn_split_range(row, s);
        let start = range.x; // the same for every lane
        let n = select(0u, range.y, busy && s >= first && s < end);
        let n_min = subgroupMin(n);
        let n_max = subgroupMax(n);

        var m_s = ATTN_NEG_BIG;
        for (var jj = 0u; jj < n_max; jj++) {
            let j = start + jj;
            let dot = score_dot(&q, j, kv_head, lid);
            let add = attn_mask_add(row, j);
            let score = fma(dot, params.scale, add);
            sc[jj] = score;
            m_s = select(m_s, max(m_s, score), jj < n);
        }

        var l_s = 0.0;
        var acc_s: array<f32, HEAD_DIM>;
        // Keys every lane sees, then the keys only some lanes see.
        for (var jj = 0u; jj < n_min; jj++) {
            let score = sc[jj];
            let p = select(exp(score - m_s), 0.0, score <= ATTN_NEG_BIG);
            pv_row(&acc_s, p, start + jj, kv_head, lid, true);
            l_s += p;
        }
        for (var jj = n_min; jj < n_max; jj++) {
            let ok = jj < n;
            let score = sc[jj];
            let p = select(exp(score - m_s), 0.0, score <= ATTN_NEG_BIG);
            pv_row(&acc_s, p, start + jj, kv_head, lid, ok);
            l_s = select(l_s, l_s + p, ok);
        }

        ml = attn_row_fold(ml, m_s, l_s, &acc, &acc_s);
    }

    // The state, or acc / l (lanes that took no split write nothing).
    if (busy) {
        attn_row_save(base, rec, &acc, ml, end, n_splits);
    }
}
