// attn_fused.wgsl: attention over a KV cache with no partials buffer (multi-row calls: prefill
// ubatches, speculative verify, the drafter's block).
//
// One workgroup = one (query row, KV head, chunk of <= 8 query heads), the tasks of
// attn_split.wgsl. It walks the row's splits 0..ceil(n_vis / ATTN_SPLIT) in ascending order; for
// each it computes the split partial with the phases of common/kv_attn.wgsl (the code
// attn_split.wgsl runs, so the same (m, l, acc) values) and folds it at once into a running
// state with attn_fold, exactly as attn_reduce.wgsl folds the partials it reads back (splits
// with l == 0 skipped, ascending order, state starting at (ATTN_NEG_BIG, 0, 0)), then writes
// acc / l. Every output row is therefore bit-identical to the split + reduce pair (decode) over
// the same visible keys, and only the K/V caches grow with the context.
//
// Passes: lavapipe (gallivm) ends every loop of an invocation once the loops together have run
// 65535 iterations, so one dispatch folds at most params.pass_splits splits per workgroup
// (sized on the host from the loop counts below) and the host records the dispatch once per
// pass: FIRST_PASS = true starts from the empty state, later passes resume from the state left
// in memory: the running acc in `out` (f32: exact) and (m, l, next split) in `state`
// [n_q, n_head]. The pass that folds a row's last split writes acc / l; later passes see
// next split >= n_splits and return. The fold order, hence every bit, is the same for any
// pass_splits.
//
// Running state in workgroup memory: fused_acc[h * D + dim] belongs to the one invocation that
// owns the (head h, V word of dim) pair in the PV phase (the same pair every split); the (m, l)
// of each head is double-buffered by split parity (read slot j & 1, written by the pair with
// word 0 into slot (j + 1) & 1), so one barrier per phase suffices: 4 per split.
// Workgroup memory: 8 KiB q + 8 KiB scores + 8 KiB running acc + 164 B = 24.2 KiB.
//
// Variants (Rust side: src/kernels/attention/fused.rs): as attn_split.wgsl (KV_F16 | KV_Q8_0 |
// KV_Q4_0; USE_F16 with KV_F16 on shader-f16 devices), times the override FIRST_PASS.
// WG_SIZE = 256 (one key per invocation in the score phase; no effect on any value).
// Shapes: q_in f32 [n_q, n_head, D]; k_cache, v_cache: common/kv_layout.wgsl; positions u32
// [n_q] (causal mode); mask f32 [n_q, mask_stride] (explicit mode; any buffer otherwise);
// out f32 [n_q, n_head, D]; state vec4<u32> [n_q, n_head] = (bits of m, bits of l, next split, 0).
// Dispatch: flat workgroup f = wid.y * nwg.x + wid.x < n_tasks (row-major over row, KV head,
// chunk). Bindings: 0 uniform Params, 1 q_in, 2 k_cache, 3 v_cache, 4 positions, 5 mask (read),
// 6 out, 7 state (read_write).

#ifdef USE_F16
enable f16;
#endif

#include "common/kv_attn.wgsl"

#include "common/attn_inputs.wgsl"
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> state: array<vec4<u32>>;

override WG_SIZE: u32 = 256u;
override FIRST_PASS: bool = true;

var<workgroup> fused_acc: array<f32, 2048>;     // [ATTN_MAX_GROUP, D] (stride D)
var<workgroup> fused_ml: array<vec2<f32>, 16>;  // [2 (split parity), ATTN_MAX_GROUP]: (m, l)
var<workgroup> fused_first: u32;                // first split of this pass

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let f = wid.y * nwg.x + wid.x;
    if (f >= params.n_tasks) {
        return;
    }
    let t = attn_task(f);
    let d = params.head_dim;
    let qw = kv_quant_words(d);
    let n_splits = attn_n_splits(attn_visible(t.row));
    let rec = t.row * params.n_head + t.head0; // state / out record of the first head
    let base = rec * d;

    // Resume (or start) the running state.
    if (lid == 0u) {
        fused_first = select(state[rec].z, 0u, FIRST_PASS);
    }
    let first = workgroupUniformLoad(&fused_first);
    if (first >= n_splits && !FIRST_PASS) {
        return; // this row was finished by an earlier pass
    }
    let end = min(n_splits, first + params.pass_splits);
    attn_load_q(t, lid);
    for (var i = lid; i < t.n_heads * d; i += WG_SIZE) {
        fused_acc[i] = select(out[base + i], 0.0, FIRST_PASS);
    }
    if (lid < t.n_heads) {
        let saved = bitcast<vec2<f32>>(state[rec + lid].xy);
        fused_ml[lid] = select(saved, vec2<f32>(ATTN_NEG_BIG, 0.0), FIRST_PASS);
    }
    workgroupBarrier();

    for (var s = first; s < end; s++) {
        let range = attn_split_range(t.row, s);
        let start = range.x;
        let n = range.y;
        attn_scores(t, start, n, lid);
        workgroupBarrier();
        attn_max(t, n, lid);
        workgroupBarrier();
        attn_exp(t, n, lid);
        workgroupBarrier();

        // PV and fold: the attn_split.wgsl loop, with attn_reduce.wgsl's fold in place of the
        // partials store.
        let cur = ((s - first) & 1u) * ATTN_MAX_GROUP;
        let nxt = ATTN_MAX_GROUP - cur;
        for (var i = lid; i < t.n_heads * qw; i += WG_SIZE) {
            let h = i / qw;
            let w = i % qw;
            let r = attn_pv(t, h, w, start, n);
            var ml = fused_ml[cur + h];
            if (r.l != 0.0) {
                let g = attn_fold(ml.x, ml.y, attn_m[h], r.l);
                for (var k = 0u; k < KV_WORD_DIMS; k++) {
                    let at = h * d + kv_dim(w, k);
                    fused_acc[at] = fma(fused_acc[at], g.z, r.acc[k] * g.w);
                }
                ml = g.xy;
            }
            if (w == 0u) {
                fused_ml[nxt + h] = ml;
            }
        }
        workgroupBarrier();
    }

    // Save the state, or finish: acc / l.
    let last = ((end - first) & 1u) * ATTN_MAX_GROUP;
    let done = end >= n_splits;
    for (var i = lid; i < t.n_heads * d; i += WG_SIZE) {
        let ml = fused_ml[last + i / d];
        out[base + i] = select(fused_acc[i], attn_finish(fused_acc[i], ml.y), done);
    }
    if (lid < t.n_heads) {
        let ml = fused_ml[last + lid];
        state[rec + lid] = vec4<u32>(bitcast<vec2<u32>>(ml), end, 0u);
    }
}
