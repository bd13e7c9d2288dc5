// kv_rows.wgsl: read rows of a KV cache buffer (K or V of one layer) back to f32, rotating the
// first n_rot dims of each head by `delta` positions (RoPE is a rotation, so a K row stored for
// position p, rotated by delta = p' - p, is the K row for position p'). With n_rot = 0 (V rows)
// the values are only decoded. The DSpark drafter's position window moves its kept rows to new
// positions this way (then kv_store.wgsl writes them back at the new rows), with no copy of the
// rows' inputs kept.
//
// Variants (Rust side: src/kernels/attention/shift.rs): exactly one of KV_F16, KV_Q8_0, KV_Q4_0
// (layout: common/kv_layout.wgsl); NEOX pairs (i, i + n_rot/2), else (2i, 2i + 1).
// Shapes: cache rows (src_row + r, head) for r < n_rows → out f32 [n_rows, n_kv_heads, head_dim].
// The rotation uses rope_angle.wgsl's exact angle reduction, freqs[i] the pair's frequency (the
// model's RoPE table) and no scale (the stored rows carry theirs).
// Dispatch: one invocation per output element, t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid.
// Bindings: 0 uniform Params, 1 cache (read), 2 freqs (read), 3 out (read_write).

#include "common/kv_layout.wgsl"
#include "common/rope_angle.wgsl"

// Mirrors KvRowsParams in src/kernels/attention/shift.rs (32 bytes).
struct Params {
    n_rows: u32,
    src_row: u32,
    n_kv_heads: u32,
    head_dim: u32,
    n_rot: u32, // 0: no rotation
    delta: i32, // positions to move by
    n_elems: u32, // n_rows * n_kv_heads * head_dim
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> cache: array<u32>;
@group(0) @binding(2) var<storage, read> freqs: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

override WG_SIZE: u32 = 64u;

// Dim j of the row starting at word `base`, decoded exactly (common/kv_layout.wgsl).
fn kv_value(base: u32, d: u32, j: u32) -> f32 {
    let wk = kv_word_of(j);
    let vals = kv_unpack(cache[base + wk.x], cache[base + kv_scale_offset(wk.x, d)], wk.x);
    return vals[wk.y];
}

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    if (t >= params.n_elems) {
        return;
    }
    let d = params.head_dim;
    let j = t % d;
    let head_row = t / d; // r * n_kv_heads + head
    let head = head_row % params.n_kv_heads;
    let r = head_row / params.n_kv_heads;
    let base = kv_row_base(params.src_row + r, head, params.n_kv_heads, d);
    let n_rot = params.n_rot;
    if (j >= n_rot) {
        out[t] = kv_value(base, d, j);
        return;
    }
    let half = n_rot / 2u;
#ifdef NEOX
    let i = j % half;
    let i0 = i;
    let i1 = i + half;
#else
    let i = j / 2u;
    let i0 = 2u * i;
    let i1 = 2u * i + 1u;
#endif
    let y = rope_rotate(kv_value(base, d, i0), kv_value(base, d, i1), params.delta, freqs[i], 1.0);
    out[t] = select(y.x, y.y, j == i1);
}
