// kv_store.wgsl: write f32 rows into a KV cache buffer (K or V of one layer), converting to the
// cache type on the way, at scattered positions.
//
// Variants (Rust side: src/kernels/attention/store.rs), exactly one of:
//   KV_F16   one invocation per cache word: 2 values → 2 f16 (round to nearest even).
//   KV_Q8_0  one invocation per pair of 32-value blocks (one scale word): llama.cpp's
//            quantize_row_q8_0_ref, bit for bit.
//   KV_Q4_0  same, quantize_row_q4_0_ref.
// Layout of the cache: common/kv_layout.wgsl. Exact arithmetic: common/kv_quant.wgsl.
//
// Shapes: src f32 [n_tokens, n_kv_heads * head_dim]; positions u32 [n_tokens] (any order, may be
// non-contiguous); token i goes to cache rows (positions[i], 0..n_kv_heads). A position >= n_ctx
// writes nothing (the host rejects it before dispatch; this keeps the shader in bounds).
// Dispatch: flat unit index t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid, t < n_units.
// Bindings: 0 uniform Params, 1 src (read), 2 positions (read), 3 cache (read_write).

#include "common/kv_layout.wgsl"
#include "common/kv_quant.wgsl"

// Mirrors KvStoreParams in src/kernels/attention/store.rs (32 bytes).
struct Params {
    n_tokens: u32,
    n_kv_heads: u32,
    head_dim: u32,
    n_ctx: u32,
    n_units: u32,         // n_tokens * units_per_token
    units_per_token: u32, // n_kv_heads * units_per_head
    units_per_head: u32,  // f16: head_dim / 2 words; q8_0/q4_0: ceil(head_dim / 64) block pairs
    row0: u32,            // first source row (and positions entry) of the call
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read_write> cache: array<u32>;

override WG_SIZE: u32 = 64u;

#ifndef KV_F16
// The 32 values of block `blk` of head row (token, head).
fn load_block(src_base: u32, blk: u32) -> array<f32, 32> {
    var x: array<f32, 32>;
    for (var j = 0u; j < 32u; j++) {
        x[j] = src[src_base + 32u * blk + j];
    }
    return x;
}
#endif

#ifdef KV_Q8_0
// Quantizes block `blk` into its 8 quant words at `row` and returns the f16 bits of its d.
fn store_block(row: u32, src_base: u32, blk: u32) -> u32 {
    let x = load_block(src_base, blk);
    var amax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        let a = abs(x[j]);
        amax = select(a, amax, amax > a); // C's MAX(amax, a)
    }
    let d = kv_div127(amax);
    var id = 0.0;
    if (d != 0.0) {
        id = kv_recip(d);
    }
    for (var w = 0u; w < 8u; w++) {
        var word = 0u;
        for (var k = 0u; k < 4u; k++) {
            let q = kv_q8_quant(x[4u * w + k] * id);
            word |= (bitcast<u32>(q) & 0xffu) << (8u * k);
        }
        cache[row + 8u * blk + w] = word;
    }
    return kv_f16_bits(d);
}
#endif

#ifdef KV_Q4_0
fn store_block(row: u32, src_base: u32, blk: u32) -> u32 {
    let x = load_block(src_base, blk);
    var amax = 0.0;
    var vmax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        let a = abs(x[j]);
        if (amax < a) { // the first element of the largest magnitude, sign kept
            amax = a;
            vmax = x[j];
        }
    }
    let d = vmax * -0.125; // == vmax / -8: the same exact value, correctly rounded
    var id = 0.0;
    if (d != 0.0) {
        id = kv_recip(d);
    }
    for (var w = 0u; w < 4u; w++) {
        var word = 0u;
        for (var k = 0u; k < 4u; k++) {
            let lo = kv_q4_quant(x[4u * w + k] * id);
            let hi = kv_q4_quant(x[16u + 4u * w + k] * id);
            word |= (lo | (hi << 4u)) << (8u * k);
        }
        cache[row + 4u * blk + w] = word;
    }
    return kv_f16_bits(d);
}
#endif

@compute @workgroup_size(WG_SIZE)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = (wid.y * nwg.x + wid.x) * WG_SIZE + lid;
    if (t >= params.n_units) {
        return;
    }
    let d = params.head_dim;
    let token = params.row0 + t / params.units_per_token;
    let head = (t % params.units_per_token) / params.units_per_head;
    let unit = t % params.units_per_head;
    let pos = positions[token];
    if (KV_RING == 0u && pos >= params.n_ctx) {
        return;
    }
    let row = kv_row_base(pos, head, params.n_kv_heads, d);
    let src_base = (token * params.n_kv_heads + head) * d;
#ifdef KV_F16
    let a = kv_f16_bits(src[src_base + 2u * unit]);
    let b = kv_f16_bits(src[src_base + 2u * unit + 1u]);
    cache[row + unit] = a | (b << 16u);
#else
    // Unit = blocks 2u and 2u + 1 (the second absent when the row has an odd block count).
    let lo = store_block(row, src_base, 2u * unit);
    var hi = 0u;
    if (2u * unit + 1u < d / 32u) {
        hi = store_block(row, src_base, 2u * unit + 1u);
    }
    cache[row + kv_quant_words(d) + unit] = lo | (hi << 16u);
#endif
}
