// common/kv_attn.wgsl: one split partial of one query row for the query heads of one KV group
// (up to ATTN_MAX_GROUP heads, "GQA packing": each K/V row is read once for all of them), in
// workgroup phases. The contract it implements is in common/kv_attn_common.wgsl.
//
// The includer declares: params, positions, q_in: array<f32> [n_q, n_head, D] (read),
// k_cache / v_cache: array<u32> (read, common/kv_layout.wgsl; array<vec2<f16>> for KV_F16 with
// USE_F16: the same words, converted natively), mask: array<f32>
// [n_q, mask_stride] (read), and the override WG_SIZE. Phases, with a workgroupBarrier between
// consecutive ones (the caller's):
//   attn_load_q  q rows of the task's heads → attn_q
//   attn_scores  invocation i: keys start+i, start+i+WG_SIZE, ...: score = fma(q.k, scale, mask)
//                with q.k summed over the key's words in order → attn_p[h][j]
//   attn_max     invocation h < n_heads: m_h = max(ATTN_NEG_BIG, scores) → attn_m[h]
//   attn_exp     every (h, j): p = exp(score - m_h), 0 for hidden scores → attn_p[h][j]
//   attn_pv      one (head h, V word w) pair: acc = sum_j p_j * v_j[w's dims], l = sum_j p_j,
//                j ascending (every invocation of head h computes the same l).
// Each value depends only on the row, its heads, the split and the cache: never on the batch.

#include "common/kv_layout.wgsl"
#include "common/kv_attn_common.wgsl"

var<workgroup> attn_q: array<f32, 2048>; // [ATTN_MAX_GROUP, D] (stride D)
var<workgroup> attn_p: array<f32, 2048>; // [ATTN_MAX_GROUP, ATTN_SPLIT]: scores, then p
var<workgroup> attn_m: array<f32, 8>;    // [ATTN_MAX_GROUP]

struct AttnTask {
    row: u32,     // query row (params.row0 + the task's row)
    kv_head: u32, // KV head
    head0: u32,   // first query head
    n_heads: u32, // query heads (1..ATTN_MAX_GROUP)
}

// Task index (0..n_tasks) → row, KV head and chunk of its query heads.
fn attn_task(task: u32) -> AttnTask {
    let per_row = params.n_kv_heads * params.n_chunks;
    let row = params.row0 + task / per_row;
    let kv_head = (task % per_row) / params.n_chunks;
    let chunk = task % params.n_chunks;
    let first = chunk * ATTN_MAX_GROUP;
    return AttnTask(row, kv_head, kv_head * params.group + first,
                    min(ATTN_MAX_GROUP, params.group - first));
}

// The values of quant word w of the K (is_v false) or V row starting at word `row`.
fn attn_word(is_v: bool, row: u32, w: u32) -> array<f32, 8> {
#ifdef USE_F16
    var out: array<f32, 8>;
    var h = k_cache[row + w];
    if (is_v) {
        h = v_cache[row + w];
    }
    out[0] = f32(h.x);
    out[1] = f32(h.y);
    return out;
#else
#ifdef KV_F16
    let sw = 0u;
    var word = k_cache[row + w];
    if (is_v) {
        word = v_cache[row + w];
    }
#else
    let so = kv_scale_offset(w, params.head_dim);
    var word = k_cache[row + w];
    var sw = k_cache[row + so];
    if (is_v) {
        word = v_cache[row + w];
        sw = v_cache[row + so];
    }
#endif
    return kv_unpack(word, sw, w);
#endif
}

fn attn_load_q(t: AttnTask, lid: u32) {
    let d = params.head_dim;
    let base = (t.row * params.n_head + t.head0) * d;
    for (var i = lid; i < t.n_heads * d; i += WG_SIZE) {
        attn_q[i] = q_in[base + i];
    }
}

fn attn_scores(t: AttnTask, start: u32, n: u32, lid: u32) {
    let d = params.head_dim;
    let qw = kv_quant_words(d);
    for (var jj = lid; jj < n; jj += WG_SIZE) {
        let j = start + jj;
        let row = kv_row_base(j, t.kv_head, params.n_kv_heads, d);
        var acc: array<f32, 8>;
        for (var w = 0u; w < qw; w++) {
            let vals = attn_word(false, row, w);
            for (var k = 0u; k < KV_WORD_DIMS; k++) {
                let dim = kv_dim(w, k);
                for (var h = 0u; h < t.n_heads; h++) {
                    acc[h] = fma(attn_q[h * d + dim], vals[k], acc[h]);
                }
            }
        }
        let add = attn_mask_add(t.row, j);
        for (var h = 0u; h < t.n_heads; h++) {
            attn_p[h * ATTN_SPLIT + jj] = fma(acc[h], params.scale, add);
        }
    }
}

fn attn_max(t: AttnTask, n: u32, lid: u32) {
    if (lid < t.n_heads) {
        var m = ATTN_NEG_BIG;
        for (var jj = 0u; jj < n; jj++) {
            m = max(m, attn_p[lid * ATTN_SPLIT + jj]);
        }
        attn_m[lid] = m;
    }
}

fn attn_exp(t: AttnTask, n: u32, lid: u32) {
    for (var i = lid; i < t.n_heads * ATTN_SPLIT; i += WG_SIZE) {
        if (i % ATTN_SPLIT < n) {
            let s = attn_p[i];
            attn_p[i] = select(exp(s - attn_m[i / ATTN_SPLIT]), 0.0, s <= ATTN_NEG_BIG);
        }
    }
}

struct AttnPv {
    acc: array<f32, 8>, // the KV_WORD_DIMS dims of word w (kv_dim(w, k))
    l: f32,
}

fn attn_pv(t: AttnTask, h: u32, w: u32, start: u32, n: u32) -> AttnPv {
    let d = params.head_dim;
    var r: AttnPv;
    for (var jj = 0u; jj < n; jj++) {
        let p = attn_p[h * ATTN_SPLIT + jj];
        let row = kv_row_base(start + jj, t.kv_head, params.n_kv_heads, d);
        let vals = attn_word(true, row, w);
        for (var k = 0u; k < KV_WORD_DIMS; k++) {
            r.acc[k] = fma(p, vals[k], r.acc[k]);
        }
        r.l += p;
    }
    return r;
}
