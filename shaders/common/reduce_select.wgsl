// common/reduce_select.wgsl: the candidate order shared by argmax.wgsl and topk.wgsl.
//
// Candidates are (value, id) pairs ordered by value descending, then id ascending (ties go to
// the lower id, as llama.cpp's greedy sampler, which keeps the first maximum). Ids are unique,
// so this is a strict total order and every selection is exact whatever the visiting order.
// NaN values are not supported (WGSL lets implementations assume there are none).
//
// Also the `partial` stage both shaders share: the including file declares `params` (with
// n_rows, n_cols, n_per_list, groups_per_row, n_lists), `logits`, `part` and
// `override WG_SIZE`.

const NO_ID: u32 = 0xffffffffu; // "no candidate yet" / an unfilled slot

// Mirrors `Cand` in src/kernels/ops/select.rs (8 bytes).
struct Cand {
    value: f32,
    id: u32,
}

// Does (v, id) come before (bv, bid)? Anything comes before an empty slot (bid == NO_ID).
fn select_before(v: f32, id: u32, bv: f32, bid: u32) -> bool {
    return bid == NO_ID || v > bv || (v == bv && id < bid);
}

// Stage 1 for workgroup `flat`, lane `lid`: the best candidate of list g * WG_SIZE + lid of its
// row, the columns g * WG_SIZE * n_per_list + lid + j * WG_SIZE for j < n_per_list (a workgroup
// reads contiguous memory), written to part [n_rows, n_lists]. A column c belongs to list
// (c / (WG_SIZE * n_per_list)) * WG_SIZE + c % WG_SIZE.
fn select_partial(flat: u32, lid: u32) {
    let row = flat / params.groups_per_row;
    if (row >= params.n_rows) {
        return;
    }
    let g = flat % params.groups_per_row;
    let start = g * WG_SIZE * params.n_per_list + lid;
    let base = row * params.n_cols;
    var best = Cand(0.0, NO_ID);
    for (var j = 0u; j < params.n_per_list; j++) {
        let c = start + j * WG_SIZE;
        if (c >= params.n_cols) {
            break;
        }
        let v = logits[base + c];
        if (select_before(v, c, best.value, best.id)) {
            best = Cand(v, c);
        }
    }
    part[row * params.n_lists + g * WG_SIZE + lid] = best;
}
