// common/matmul_rope.wgsl: the RoPE + KV store epilogue of matmul_rows.wgsl's split output
// (SPLIT3 with ROPE, normal pairs, f16 caches): what rope_kv.wgsl does after the stacked
// q | k | v projection, done by the projection itself, one dispatch less per layer.
//
// With ROPE an invocation's rows are pairs (2 lane, 2 lane + 1) of every 2 WG rows (see
// matmul_rows.wgsl), so both dims of a RoPE pair (and of an f16 cache word) are in one
// invocation. Per output pair (dims 2w, 2w + 1 of a head) of column c (token col0 + c):
//   q rows  [0, split1):       rotated (pairs with 2w < n_rot) into y [m, split1]
//   k rows  [split1, split2):  rotated into K cache word w of (positions[t], head)
//   v rows  [split2, n_out):   into V cache word w of (positions[t], head)
// and a position >= n_ctx stores nothing (as kv_store.wgsl). Same bits as the split output
// followed by rope_kv.wgsl: every rotation is rope_cos_sin + rope_apply of the same floats,
// every half kv_f16_bits (tests/kernels_matmul_rope.rs compares the two paths).
// Needs: params (Params of common/quant_common.wgsl) and y; defines put2, which
// common/matmul_cols.wgsl's put_row_pair calls for each column (PUT2).
// Bindings: 4 positions (read, u32 [m]), 5 freqs (read, f32 [n_rot / 2 + 1]: frequencies, then
// the cos/sin scale, see rope.wgsl), 6 K cache and 7 V cache (read_write, f16 words),
// 8 RopeKvParams (uniform).

#define KV_F16
#include "common/kv_layout.wgsl"
#include "common/kv_quant.wgsl"
#include "common/rope_angle.wgsl"

#include "common/rope_kv_params.wgsl"

@group(0) @binding(4) var<storage, read> positions: array<u32>;
@group(0) @binding(5) var<storage, read> freqs: array<f32>;
@group(0) @binding(6) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(7) var<storage, read_write> v_cache: array<u32>;
@group(0) @binding(8) var<uniform> rope: RopeKvParams; // n_tokens unused here

// One f16 cache word from dims (2w, 2w + 1): low half first (common/kv_layout.wgsl).
fn rope_cache_word(t: vec2<f32>) -> u32 {
    return kv_f16_bits(t.x) | (kv_f16_bits(t.y) << 16u);
}

// Split-local rows (row, row + 1) of column c: v0 and v1. The part (q, k or v), the head and
// the pair are worked out once and one angle is computed, whatever the part: a CPU driver runs
// every branch of the workgroup under a mask, so per-part code would cost three times over.
fn put2(row: u32, c: u32, v0: f32, v1: f32) {
    if (row >= params.n_rows || c >= params.m) {
        return;
    }
    let r = params.row0 + row; // even: the host checks split boundaries and dims are even
    let t = params.col0 + c;
    let pos = positions[t];
    let is_q = r < params.split1;
    let is_v = r >= params.split2;
    let first = select(select(params.split1, params.split2, is_v), 0u, is_q);
    let dim = select(rope.head_dim, rope.head_dim_v, is_v);
    let lr = r - first;
    let w = (lr % dim) / 2u;
    var o = vec2<f32>(v0, v1);
    if (!is_v && 2u * w < rope.n_rot) {
        o = rope_apply(v0, v1, rope_cos_sin(i32(pos), freqs[w], freqs[rope.n_rot / 2u]));
    }
    if (is_q) {
        let i = t * params.split1 + r;
        y[i] = o.x;
        y[i + 1u] = o.y;
    } else if (pos < rope.n_ctx) {
        let at = kv_row_base(pos, lr / dim, rope.n_kv_heads, dim) + w;
        if (is_v) {
            v_cache[at] = rope_cache_word(o);
        } else {
            k_cache[at] = rope_cache_word(o);
        }
    }
}
