// topk.wgsl: sampling candidates on the device: for each row of logits [n_rows, n_cols] the k
// (<= MAX_K) best (value, id) pairs, sorted by value descending, ties to the lower id. Two
// stages, run as two dispatches in one pass (Rust side: src/kernels/ops/select.rs):
//
//   STAGE_PARTIAL  entry `partial`, as argmax.wgsl: the best candidate ("head") of each list of
//                  up to n_per_list columns, to part [n_rows, n_lists].
//                  Dispatch: n_rows * groups_per_row workgroups, 1D or 2D.
//   STAGE_MERGE    entry `merge`, one invocation per row: (1) the k best list heads, by
//                  insertion into a sorted private list; (2) the top k of the columns of those
//                  (at most k) lists, again by insertion. Every top-k column lies in one of
//                  them: a column of any other list is beaten by k heads. So the merge reads at
//                  most n_lists + k * n_per_list values, whatever the data.
//                  Writes out_ids [n_rows, k] (u32) and out_values [n_rows, k] (f32).
//                  Dispatch: ceil(n_rows / WG_SIZE) workgroups.
// Exactly one STAGE_* per variant (the pipeline cache keys variants by their defines).
// The order is a strict total order (common/reduce_select.wgsl), so the result is exact.
// Bindings: 0 uniform Params, 1 logits (read), 2 part (read_write, Cand [n_rows, n_lists]),
//           3 out_ids (read_write), 4 out_values (read_write).

#include "common/reduce_select.wgsl"

// Mirrors SelectParams in src/kernels/ops/select.rs (32 bytes).
struct Params {
    n_rows: u32,
    n_cols: u32,
    n_per_list: u32,     // columns per invocation of `partial`
    groups_per_row: u32, // workgroups of `partial` per row
    n_lists: u32,        // groups_per_row * WG_SIZE
    k: u32,              // 1..=MAX_K, <= n_cols
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>; // [n_rows, n_cols]
@group(0) @binding(2) var<storage, read_write> part: array<Cand>; // [n_rows, n_lists]
@group(0) @binding(3) var<storage, read_write> out_ids: array<u32>; // [n_rows, k]
@group(0) @binding(4) var<storage, read_write> out_values: array<f32>; // [n_rows, k]

override WG_SIZE: u32 = 64u;

#ifdef STAGE_PARTIAL
@compute @workgroup_size(WG_SIZE)
fn partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    select_partial(wid.y * nwg.x + wid.x, lid);
}
#endif

#ifdef STAGE_MERGE
const MAX_K: u32 = 64u;

// This invocation's sorted list: top_v/top_id[0..top_n], best first.
var<private> top_v: array<f32, MAX_K>;
var<private> top_id: array<u32, MAX_K>;
var<private> top_n: u32;

// Inserts (v, id) where it belongs if it is among the k best so far.
fn top_insert(v: f32, id: u32) {
    let k = params.k;
    var p = top_n;
    if (top_n == k) {
        if (!select_before(v, id, top_v[k - 1u], top_id[k - 1u])) {
            return;
        }
        p = k - 1u;
    } else {
        top_n += 1u;
    }
    while (p > 0u && select_before(v, id, top_v[p - 1u], top_id[p - 1u])) {
        top_v[p] = top_v[p - 1u];
        top_id[p] = top_id[p - 1u];
        p -= 1u;
    }
    top_v[p] = v;
    top_id[p] = id;
}

@compute @workgroup_size(WG_SIZE)
fn merge(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    if (row >= params.n_rows) {
        return;
    }
    let k = params.k;
    // (1) The k best list heads.
    top_n = 0u;
    for (var l = 0u; l < params.n_lists; l++) {
        let c = part[row * params.n_lists + l];
        if (c.id != NO_ID) {
            top_insert(c.value, c.id);
        }
    }
    // Their lists, from the head columns (see select_partial for the column → list map).
    var lists: array<u32, MAX_K>;
    let n_sel = top_n;
    let span = WG_SIZE * params.n_per_list;
    for (var j = 0u; j < n_sel; j++) {
        let c = top_id[j];
        lists[j] = (c / span) * span + c % WG_SIZE; // the list's first column
    }
    // (2) The k best columns of those lists.
    top_n = 0u;
    let base = row * params.n_cols;
    for (var j = 0u; j < n_sel; j++) {
        for (var i = 0u; i < params.n_per_list; i++) {
            let c = lists[j] + i * WG_SIZE;
            if (c >= params.n_cols) {
                break;
            }
            top_insert(logits[base + c], c);
        }
    }
    for (var j = 0u; j < k; j++) {
        var id = NO_ID;
        var v = 0.0;
        if (j < top_n) {
            id = top_id[j];
            v = top_v[j];
        }
        out_ids[row * k + j] = id;
        out_values[row * k + j] = v;
    }
}
#endif
