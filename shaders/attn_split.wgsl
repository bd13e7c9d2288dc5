// attn_split.wgsl: split partials of attention over a KV cache (flash-decoding, pass 1 of 2).
//
// One workgroup = one (split, query row, KV head, chunk of <= 8 query heads); it writes the
// partial (m, l, acc[D]) of each of its heads for that split (common/kv_attn.wgsl). Pass 2,
// attn_reduce.wgsl, folds the partials of each (row, head). The pair serves decode (n_q = 1) and
// any multi-row call: a row's partials depend only on the row, so rows are bit-identical to the
// same query computed alone. Multi-row calls use attn_fused.wgsl (the same phases and fold, no
// partials buffer), which gives the same bits.
//
// Variants (Rust side: src/kernels/attention/attend.rs): KV_F16 | KV_Q8_0 | KV_Q4_0, the
// cache type of K and V; USE_F16 (KV_F16 only, device has shader-f16): the caches are bound as
// array<vec2<f16>> and convert natively.
// Shapes: q_in f32 [row0 + n_q, n_head, D] (the call's rows: row0..row0 + n_q); k_cache,
// v_cache: common/kv_layout.wgsl; positions u32 [row0 + n_q] (causal mode); mask f32
// [row0 + n_q, mask_stride] (explicit mode; any buffer otherwise); partials f32
// [n_q, n_head, n_splits, D + 2] (indexed by the call's own row), record = (m, l, acc[0..D]).
// Dispatch: flat workgroup f = wid.y * nwg.x + wid.x < n_splits * n_tasks;
// split = f % n_splits, task = f / n_splits (row-major over row, KV head, chunk).
// Bindings: 0 uniform Params, 1 q_in, 2 k_cache, 3 v_cache, 4 positions, 5 mask (read),
// 6 partials (read_write).

#ifdef USE_F16
enable f16;
#endif

#include "common/kv_attn.wgsl"

#include "common/attn_inputs.wgsl"
@group(0) @binding(6) var<storage, read_write> partials: array<f32>;

override WG_SIZE: u32 = 64u;

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let f = wid.y * nwg.x + wid.x;
    if (f >= params.n_splits * params.n_tasks) {
        return;
    }
    let split = f % params.n_splits;
    let t = attn_task(f / params.n_splits);
    let range = attn_split_range(t.row, split);
    let start = range.x;
    let n = range.y;

    attn_load_q(t, lid);
    workgroupBarrier();
    attn_scores(t, start, n, lid);
    workgroupBarrier();
    attn_max(t, n, lid);
    workgroupBarrier();
    attn_exp(t, n, lid);
    workgroupBarrier();

    let d = params.head_dim;
    let qw = kv_quant_words(d);
    for (var i = lid; i < t.n_heads * qw; i += WG_SIZE) {
        let h = i / qw;
        let w = i % qw;
        let r = attn_pv(t, h, w, start, n);
        // Partials are indexed by the call's own rows (t.row - row0): a batch's sequence at
        // rows row0.. uses the scratch of a call at row 0.
        let local = t.row - params.row0;
        let rec = ((local * params.n_head + t.head0 + h) * params.n_splits + split) * (d + 2u);
        if (w == 0u) {
            partials[rec] = attn_m[h];
            partials[rec + 1u] = r.l;
        }
        for (var k = 0u; k < KV_WORD_DIMS; k++) {
            partials[rec + 2u + kv_dim(w, k)] = r.acc[k];
        }
    }
}
