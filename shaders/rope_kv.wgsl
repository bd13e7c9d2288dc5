// rope_kv.wgsl: one layer's RoPE and KV store in one dispatch, for f16 K and V caches:
//   q [n_tokens, n_head, head_dim]       rotated in place (as rope.wgsl IN_PLACE)
//   k [n_tokens, n_kv_heads, head_dim]   rotated on its way into the K cache (k is not written)
//   v [n_tokens, n_kv_heads, head_dim_v] into the V cache
// token t going to cache rows (positions[t], 0..n_kv_heads); a position >= n_ctx writes nothing.
// A call covers tokens row0..row0 + n_tokens of the bound buffers (a batch's one sequence)
// (as kv_store.wgsl). Four dispatches (rope q, rope k, store k, store v) become one, and a
// dispatch is a fixed cost on CPU drivers (about 37 µs on lavapipe).
//
// Same bits as rope.wgsl on q and k followed by kv_store.wgsl KV_F16 on k and v: every rotated
// value is common/rope_angle.wgsl's rope_rotate of the same inputs and every half is
// common/kv_quant.wgsl's kv_f16_bits (tests/kernels_ops_rope_kv.rs compares the two paths).
//
// Units, one invocation each, t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid:
//   normal pairs: (token, w) for w < max(head_dim, head_dim_v) / 2: pair w of every q and k
//                 head of the token (one angle) and V word w of every kv head (see main)
//   NEOX:  [0, n_q)           q pair (as rope.wgsl)  n_q = n_tokens * n_head * head_dim / 2
//          [n_q, n_q + n_k)   K cache word           n_k = n_tokens * n_kv_heads * head_dim / 2
//          [n_q + n_k, + n_v) V cache word           n_v = n_tokens * n_kv_heads * head_dim_v / 2
//          (a NEOX cache word holds dims of two pairs with different angles)
// A cache word holds dims 2w (low half) and 2w + 1 (common/kv_layout.wgsl, KV_F16).
// Variants (Rust side: src/kernels/attention/rope_kv.rs): NEOX (default: normal pairs).
// Bindings: 0 uniform RopeKvParams, 1 q (read_write), 2 k (read), 3 v (read), 4 positions
//           (read, u32 [n_tokens]), 5 freqs (read, f32 [n_rot / 2 + 1]: frequencies, then the
//           cos/sin scale, see rope.wgsl), 6 K cache, 7 V cache
//           (read_write).

#define KV_F16
#include "common/kv_layout.wgsl"
#include "common/kv_quant.wgsl"
#include "common/rope_angle.wgsl"

#include "common/rope_kv_params.wgsl"

@group(0) @binding(0) var<uniform> params: RopeKvParams;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> positions: array<u32>;
@group(0) @binding(5) var<storage, read> freqs: array<f32>; // [n_rot / 2 + 1]
@group(0) @binding(6) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(7) var<storage, read_write> v_cache: array<u32>;

override WG_SIZE: u32 = 64u;

// The cos/sin scale: the table's last entry (YaRN's mscale, else 1).
fn rope_scale() -> f32 {
    return freqs[params.n_rot / 2u];
}

// One f16 cache word from dims (2w, 2w + 1): low half first (common/kv_layout.wgsl).
fn cache_word(y: vec2<f32>) -> u32 {
    return kv_f16_bits(y.x) | (kv_f16_bits(y.y) << 16u);
}

#ifdef NEOX
// Pair t of q, rotated in place: rope.wgsl's main with IN_PLACE.
fn rope_q(t: u32) {
    let p = rope_pair(t, params.n_head, params.head_dim, params.n_rot);
    if (p.i >= params.n_rot / 2u) {
        return; // pass-through pair
    }
    let y = rope_rotate(q[p.i0], q[p.i1], i32(positions[p.token]), freqs[p.i], rope_scale());
    q[p.i0] = y.x;
    q[p.i1] = y.y;
}

// Dim e of the k head row starting at `base`, rotated as rope.wgsl rotates it in place (NEOX:
// the two dims of a cache word belong to different pairs).
fn k_rotated(base: u32, e: u32, pos: i32) -> f32 {
    if (e >= params.n_rot) {
        return k[base + e];
    }
    let half_rot = params.n_rot / 2u;
    if (e < half_rot) {
        return rope_rotate(k[base + e], k[base + e + half_rot], pos, freqs[e], rope_scale()).x;
    }
    let x0 = k[base + e - half_rot];
    return rope_rotate(x0, k[base + e], pos, freqs[e - half_rot], rope_scale()).y;
}

// Dims 2w, 2w + 1 of the k head row starting at `base` (one K cache word), rotated.
fn k_word(base: u32, w: u32, pos: i32) -> vec2<f32> {
    return vec2<f32>(k_rotated(base, 2u * w, pos), k_rotated(base, 2u * w + 1u, pos));
}

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    let n_q = params.n_tokens * params.n_head * (params.head_dim / 2u);
    if (t < n_q) {
        rope_q(t + params.row0 * params.n_head * (params.head_dim / 2u));
        return;
    }
    let n_kv = params.n_kv_heads;
    let k_words = params.head_dim / 2u; // per head row
    let n_k = params.n_tokens * n_kv * k_words;
    if (t < n_q + n_k) {
        let u = t - n_q;
        let row = params.row0 * n_kv + u / k_words; // token * n_kv + head
        let w = u % k_words;
        let token = row / n_kv;
        let pos = positions[token];
        if (KV_RING == 0u && pos >= params.n_ctx) {
            return;
        }
        let base = row * params.head_dim;
        let y = k_word(base, w, i32(pos));
        let at = kv_row_base(pos, row % n_kv, n_kv, params.head_dim) + w;
        k_cache[at] = cache_word(y);
        return;
    }
    let v_words = params.head_dim_v / 2u;
    let u = t - n_q - n_k;
    if (u >= params.n_tokens * n_kv * v_words) {
        return;
    }
    let row = params.row0 * n_kv + u / v_words;
    let w = u % v_words;
    let pos = positions[row / n_kv];
    if (KV_RING == 0u && pos >= params.n_ctx) {
        return;
    }
    let base = row * params.head_dim_v;
    let at = kv_row_base(pos, row % n_kv, n_kv, params.head_dim_v) + w;
    v_cache[at] = cache_word(vec2<f32>(v[base + 2u * w], v[base + 2u * w + 1u]));
}
#else
// Normal pairs: unit (token, w) for w < max(head_dim, head_dim_v) / 2, t = token * words + w.
// Pair w of every head of the token shares one angle, computed once (rope_cos_sin): each
// q head's pair (2w, 2w + 1) is rotated in place, each k head's pair is rotated into K cache
// word w (a normal pair is a cache word), each v head's word w goes to the V cache. Pairs past
// n_rot pass through (k words stored as they are). The sin, cos and angle reduction were most
// of this kernel's work when every (head, pair) computed them: on lavapipe an 8-token layer
// (9 q heads, 3 kv heads of 64 dims; `cargo bench --bench ops`) took 114.5–125.8 µs and takes
// 55.4–57.4 µs this way; one token stays at 36–44 µs, about the dispatch's fixed cost.
@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    let k_words = params.head_dim / 2u;
    let v_words = params.head_dim_v / 2u;
    let words = max(k_words, v_words);
    if (t >= params.n_tokens * words) {
        return;
    }
    let token = params.row0 + t / words;
    let w = t % words;
    let n_kv = params.n_kv_heads;
    let pos = positions[token];
    let stored = KV_RING > 0u || pos < params.n_ctx;
    if (w < k_words) {
        let rotated = 2u * w < params.n_rot;
        var cs = vec2<f32>(1.0, 0.0);
        if (rotated) {
            cs = rope_cos_sin(i32(pos), freqs[w], rope_scale());
            for (var h = 0u; h < params.n_head; h++) {
                let i0 = (token * params.n_head + h) * params.head_dim + 2u * w;
                let y = rope_apply(q[i0], q[i0 + 1u], cs);
                q[i0] = y.x;
                q[i0 + 1u] = y.y;
            }
        }
        if (stored) {
            for (var h = 0u; h < n_kv; h++) {
                let i0 = (token * n_kv + h) * params.head_dim + 2u * w;
                var y = vec2<f32>(k[i0], k[i0 + 1u]);
                if (rotated) {
                    y = rope_apply(y.x, y.y, cs);
                }
                let at = kv_row_base(pos, h, n_kv, params.head_dim) + w;
                k_cache[at] = cache_word(y);
            }
        }
    }
    if (w < v_words && stored) {
        for (var h = 0u; h < n_kv; h++) {
            let i0 = (token * n_kv + h) * params.head_dim_v + 2u * w;
            let at = kv_row_base(pos, h, n_kv, params.head_dim_v) + w;
            v_cache[at] = cache_word(vec2<f32>(v[i0], v[i0 + 1u]));
        }
    }
}
#endif
