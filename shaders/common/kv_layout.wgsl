// common/kv_layout.wgsl: the GPU layout of one KV cache buffer (K or V of one layer) and the
// decoding of its u32 words. Exactly one of KV_F16, KV_Q8_0, KV_Q4_0 must be defined.
//
// A cache buffer is array<u32> of n_ctx * n_kv_heads "rows", row (pos, head) at word
// (pos * n_kv_heads + head) * kv_row_words(D), D = head_dim (a multiple of 32, at most 256):
//   KV_F16   D/2 words: word w = f16 bits of dims 2w (low half) and 2w+1 (high half).
//   KV_Q8_0  D/4 quant words, then ceil(D/64) scale words. Quant word w = i8 quants of dims
//            4w..4w+3 (byte k = dim 4w+k), i.e. block b = w/8 holds dims 32b..32b+31. Scale
//            word s = f16 d of block 2s (low half) and 2s+1 (high half; 0 past the last block).
//   KV_Q4_0  D/8 quant words, then ceil(D/64) scale words. Quant word w of block b = w/4,
//            i = w%4: byte k = (q of dim 32b+4i+k) | (q of dim 32b+16+4i+k) << 4, q in 0..15,
//            value (q - 8) * d: the 16 qs bytes of ggml's block_q4_0, in order.
// For D % 64 == 0 a row is exactly ggml's size (2D, 34D/32, 18D/32 bytes).
// Values decode exactly (f16 → f32 is exact, d * q is exact in f32), as crate::quant does.
// f16 halves convert with the integer conversion of common/bytes.wgsl (unpack2x16float needs a
// naga capability the baseline does not grant); entry files may bind an f16 cache as
// array<vec2<f16>> instead (USE_F16, see common/kv_attn.wgsl).

#include "common/bytes.wgsl"

#ifdef KV_F16
const KV_WORD_DIMS: u32 = 2u;
#endif
#ifdef KV_Q8_0
const KV_WORD_DIMS: u32 = 4u;
const KV_BLOCK_WORDS: u32 = 8u;
#endif
#ifdef KV_Q4_0
const KV_WORD_DIMS: u32 = 8u;
const KV_BLOCK_WORDS: u32 = 4u;
#endif

// The two f16 halves of `word` (low half first) as f32.
fn kv_half2(word: u32) -> vec2<f32> {
    return vec2<f32>(bytes_f16_to_f32(word & 0xffffu), bytes_f16_to_f32(word >> 16u));
}

// Quant (or f16) words per row.
fn kv_quant_words(d: u32) -> u32 {
    return d / KV_WORD_DIMS;
}

// Scale words per row (0 for f16).
fn kv_scale_words(d: u32) -> u32 {
#ifdef KV_F16
    return 0u;
#else
    return (d / 32u + 1u) / 2u;
#endif
}

fn kv_row_words(d: u32) -> u32 {
    return kv_quant_words(d) + kv_scale_words(d);
}

// Rows of a ring cache (a sliding-window layer's: position pos lives in row pos % KV_RING and
// positions stay absolute everywhere else); 0: a plain cache, position pos in row pos.
override KV_RING: u32 = 0u;

// First word of row (pos, head).
fn kv_row_base(pos: u32, head: u32, n_kv_heads: u32, d: u32) -> u32 {
    var slot = pos;
    if (KV_RING > 0u) {
        // max(): the pipeline folds KV_RING, and a literal `% 0` would not validate.
        slot = pos % max(KV_RING, 1u);
    }
    return (slot * n_kv_heads + head) * kv_row_words(d);
}

// Offset (from the row base) of the word holding the scale of quant word w.
fn kv_scale_offset(w: u32, d: u32) -> u32 {
#ifdef KV_F16
    return 0u;
#else
    return kv_quant_words(d) + w / (2u * KV_BLOCK_WORDS);
#endif
}

// The dimension of value k (0..KV_WORD_DIMS-1) of quant word w.
fn kv_dim(w: u32, k: u32) -> u32 {
#ifdef KV_Q4_0
    return 32u * (w / 4u) + 4u * (w % 4u) + 16u * (k / 4u) + (k % 4u);
#else
    return KV_WORD_DIMS * w + k;
#endif
}

// The quant word holding dimension j, and the value's index in kv_unpack's array (the inverse
// of kv_dim).
fn kv_word_of(j: u32) -> vec2<u32> {
#ifdef KV_Q4_0
    let t = j % 32u;
    let u = t % 16u;
    return vec2<u32>(4u * (j / 32u) + u / 4u, u % 4u + 4u * (t / 16u));
#else
    return vec2<u32>(j / KV_WORD_DIMS, j % KV_WORD_DIMS);
#endif
}

// The KV_WORD_DIMS values of quant word w (`word`), `scale_word` = the word at kv_scale_offset
// (ignored for f16). Entries past KV_WORD_DIMS are 0.
fn kv_unpack(word: u32, scale_word: u32, w: u32) -> array<f32, 8> {
    var out: array<f32, 8>;
#ifdef KV_F16
    let h = kv_half2(word);
    out[0] = h.x;
    out[1] = h.y;
#else
    let halves = kv_half2(scale_word);
    let d = select(halves.x, halves.y, ((w / KV_BLOCK_WORDS) & 1u) == 1u);
#ifdef KV_Q8_0
    for (var k = 0u; k < 4u; k++) {
        out[k] = f32(bytes_i8(word, k)) * d;
    }
#endif
#ifdef KV_Q4_0
    for (var k = 0u; k < 4u; k++) {
        let b = bytes_u8(word, k);
        out[k] = f32(i32(b & 15u) - 8) * d;
        out[k + 4u] = f32(i32(b >> 4u) - 8) * d;
    }
#endif
#endif
    return out;
}
