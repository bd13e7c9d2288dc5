// argmax.wgsl: greedy token choice on the device: for each row of logits [n_rows, n_cols] the
// index of the largest value, ties to the lowest index (as llama.cpp). Two stages, run as two
// dispatches in one pass (Rust side: src/kernels/ops/select.rs):
//
//   STAGE_PARTIAL  entry `partial`: each invocation scans one list of up to n_per_list columns
//                  and writes its best candidate to part [n_rows, n_lists]
//                  (select_partial in common/reduce_select.wgsl). No barrier, no shared memory.
//                  Dispatch: n_rows * groups_per_row workgroups, 1D or 2D;
//                  flat = wid.y * nwg.x + wid.x, row = flat / groups_per_row.
//   STAGE_MERGE    entry `merge`: one invocation per row folds its n_lists partials into
//                  out [n_rows] (u32). Dispatch: ceil(n_rows / WG_SIZE) workgroups.
// Exactly one STAGE_* per variant (the pipeline cache keys variants by their defines).
// The order is a strict total order (common/reduce_select.wgsl), so the result is exact.
// Bindings: 0 uniform Params, 1 logits (read, f32 [n_rows, n_cols]), 2 part (read_write, Cand
//           [n_rows, n_lists]), 3 out (read_write, u32 [n_rows]).

#include "common/reduce_select.wgsl"

// Mirrors SelectParams in src/kernels/ops/select.rs (32 bytes).
struct Params {
    n_rows: u32,
    n_cols: u32,
    n_per_list: u32,     // columns per invocation of `partial`
    groups_per_row: u32, // workgroups of `partial` per row
    n_lists: u32,        // groups_per_row * WG_SIZE
    k: u32,              // top-k only
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>; // [n_rows, n_cols]
@group(0) @binding(2) var<storage, read_write> part: array<Cand>; // [n_rows, n_lists]
@group(0) @binding(3) var<storage, read_write> out: array<u32>; // [n_rows]

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
    var best = Cand(0.0, NO_ID);
    for (var l = 0u; l < params.n_lists; l++) {
        let c = part[row * params.n_lists + l];
        if (c.id != NO_ID && select_before(c.value, c.id, best.value, best.id)) {
            best = c;
        }
    }
    out[row] = best.id;
}
#endif
