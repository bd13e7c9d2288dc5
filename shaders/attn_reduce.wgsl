// attn_reduce.wgsl: fold the split partials of attn_split.wgsl into the attention output
// (flash-decoding, pass 2 of 2).
//
// One workgroup = one (query row, head); invocation i handles dims i, i + WG_SIZE, ...: it folds
// the row's splits 0..ceil(n_vis / ATTN_SPLIT) in ascending order with attn_fold (splits where
// the row sees nothing, l == 0, are skipped) and writes acc / l (0 when l == 0).
// No variants: the partials are f32 whatever the cache type.
// Shapes: partials f32 [n_q, n_head, n_splits, D + 2] (the call's own rows); positions u32
// [row0 + n_q] (causal mode); out f32 [row0 + n_q, n_head, D] (rows row0.. written).
// Dispatch: flat workgroup f = wid.y * nwg.x + wid.x < n_q * n_head; row = row0 + f / n_head.
// Bindings: 0 uniform Params, 1 positions (read), 2 partials (read), 3 out (read_write).

#include "common/kv_attn_common.wgsl"

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
@group(0) @binding(2) var<storage, read> partials: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

override WG_SIZE: u32 = 64u;

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let f = wid.y * nwg.x + wid.x;
    if (f >= params.n_q * params.n_head) {
        return;
    }
    let row = params.row0 + f / params.n_head;
    let d = params.head_dim;
    let n_splits = attn_n_splits(attn_visible(row));
    for (var i = lid; i < d; i += WG_SIZE) {
        var m = ATTN_NEG_BIG;
        var l = 0.0;
        var acc = 0.0;
        for (var s = 0u; s < n_splits; s++) {
            let rec = (f * params.n_splits + s) * (d + 2u);
            let l_s = partials[rec + 1u];
            if (l_s != 0.0) {
                let g = attn_fold(m, l, partials[rec], l_s);
                acc = fma(acc, g.z, partials[rec + 2u + i] * g.w);
                m = g.x;
                l = g.y;
            }
        }
        out[(params.row0 * params.n_head + f) * d + i] = attn_finish(acc, l);
    }
}
