// common/reduce.wgsl: workgroup-wide f32 sum and max, in a fixed order.
//
// The including entry file declares `override WG_SIZE: u32` (at most REDUCE_MAX_WG) and calls
// each function from uniform control flow, at most once per dispatch: each function owns its
// scratch array, so no barrier is needed before a second, different reduction.
//
// Order: lane partials are combined in an order fixed by the pipeline (lane and subgroup
// numbering), never by the dispatch size, so a row reduced by one workgroup gives the same bits
// whatever the number of rows in the dispatch (batch invariance, design principle 3).
//   default        every lane writes its partial to workgroup memory; barrier; lanes
//                  0..WG_SIZE/8 each sum 8 consecutive partials; barrier; every lane sums those
//                  WG_SIZE/8 values in index order (two barriers, no tree).
//   USE_SUBGROUPS  subgroupAdd / subgroupMax within each subgroup; the first lane of each
//                  subgroup writes it; one barrier; every lane folds the num_subgroups values in
//                  subgroup-id order. Needs the subgroups feature.
// Max is exact, so its order does not matter; it is written the same way for symmetry.

const REDUCE_MAX_WG: u32 = 256u;

// Who the calling invocation is, as the reductions need it.
struct ReduceLane {
    lid: u32,     // local_invocation_index
    sg_id: u32,   // subgroup_id (0 without USE_SUBGROUPS)
    n_sg: u32,    // num_subgroups (1 without USE_SUBGROUPS)
    sg_lane: u32, // subgroup_invocation_id (0 without USE_SUBGROUPS)
}

var<workgroup> reduce_sum_scratch: array<f32, REDUCE_MAX_WG>;
var<workgroup> reduce_max_scratch: array<f32, REDUCE_MAX_WG>;
#ifndef USE_SUBGROUPS
const REDUCE_CHUNK: u32 = 8u;
var<workgroup> reduce_sum_chunks: array<f32, REDUCE_MAX_WG / REDUCE_CHUNK>;
var<workgroup> reduce_max_chunks: array<f32, REDUCE_MAX_WG / REDUCE_CHUNK>;
#endif

// Σ v over the workgroup; every invocation gets the same value.
fn reduce_sum(v: f32, lane: ReduceLane) -> f32 {
#ifdef USE_SUBGROUPS
    let s = subgroupAdd(v);
    if (lane.sg_lane == 0u) {
        reduce_sum_scratch[lane.sg_id] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < lane.n_sg; i++) {
        total += reduce_sum_scratch[i];
    }
    return total;
#else
    reduce_sum_scratch[lane.lid] = v;
    workgroupBarrier();
    let n_chunks = (WG_SIZE + REDUCE_CHUNK - 1u) / REDUCE_CHUNK;
    if (lane.lid < n_chunks) {
        let first = lane.lid * REDUCE_CHUNK;
        var s = 0.0;
        for (var i = first; i < min(first + REDUCE_CHUNK, WG_SIZE); i++) {
            s += reduce_sum_scratch[i];
        }
        reduce_sum_chunks[lane.lid] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < n_chunks; i++) {
        total += reduce_sum_chunks[i];
    }
    return total;
#endif
}

// max v over the workgroup; every invocation gets the same value.
fn reduce_max(v: f32, lane: ReduceLane) -> f32 {
#ifdef USE_SUBGROUPS
    let m = subgroupMax(v);
    if (lane.sg_lane == 0u) {
        reduce_max_scratch[lane.sg_id] = m;
    }
    workgroupBarrier();
    var best = reduce_max_scratch[0];
    for (var i = 1u; i < lane.n_sg; i++) {
        best = max(best, reduce_max_scratch[i]);
    }
    return best;
#else
    reduce_max_scratch[lane.lid] = v;
    workgroupBarrier();
    let n_chunks = (WG_SIZE + REDUCE_CHUNK - 1u) / REDUCE_CHUNK;
    if (lane.lid < n_chunks) {
        let first = lane.lid * REDUCE_CHUNK;
        var m = reduce_max_scratch[first];
        for (var i = first + 1u; i < min(first + REDUCE_CHUNK, WG_SIZE); i++) {
            m = max(m, reduce_max_scratch[i]);
        }
        reduce_max_chunks[lane.lid] = m;
    }
    workgroupBarrier();
    var best = reduce_max_chunks[0];
    for (var i = 1u; i < n_chunks; i++) {
        best = max(best, reduce_max_chunks[i]);
    }
    return best;
#endif
}
