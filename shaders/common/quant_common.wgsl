// common/quant_common.wgsl: what every weight kernel (matmul, matmul_baseline, embed) shares:
// the Params uniform (binding 0), the repacked weight buffer (binding 1) and word helpers.
//
// Weight buffer: one row split of a repacked GGUF tensor (src/kernels/matmul/layout.rs), bound as
// array<u32>. A split holds rows [row0, row0 + n_rows) of the tensor in up to three "planes":
// plane 0 starts at word 0, planes 1 and 2 at words params.plane1 / params.plane2. Within a plane,
// block b of split-local row r is entry g = r * params.nb + b; an entry is a whole number of words
// (plane 0) or 16 / 32 bits (f16 scales: entry g is half g & 1 of word g >> 1).
//
// Format decoders (common/quant_float.wgsl, quant_legacy*.wgsl, quant_kq*.wgsl) each define, for
// their TYPE_*:
//   const UNIT: u32                          elements per unit (a unit is 4-aligned in K)
//   struct WU                                one unit of one row, decoded into registers
//   fn wu_load(r: u32, u: u32) -> WU         unit u of split-local row r
//   fn wu_dot(wu: WU, t: u32, k0: u32, acc: vec4<f32>) -> vec4<f32>
//                                            acc + this unit . column t of X, where k0 = u * UNIT;
//                                            reads X through xq(t, k) (defined by the entry file)
//   fn w_get4(r: u32, k: u32) -> vec4<f32>   elements k..k+3 (k % 4 == 0) of row r, dequantized
//                                            exactly as flint::quant does (bit for bit)
// wu_dot fixes the order of every floating-point operation of a unit (explicit fma(), no product
// left for the compiler to contract): that order is part of the batch-invariance contract
// (docs/shaders-matmul.md).

// Mirrors MatmulParams in src/kernels/matmul/mod.rs (64 bytes).
struct Params {
    k: u32,        // elements per row (K)
    n_rows: u32,   // rows in this split
    m: u32,        // columns of X / Y (tokens)
    row0: u32,     // first row of this split in the whole tensor
    n_out: u32,    // row stride of Y in elements (N of the whole tensor)
    x_stride: u32, // row stride of X in elements (multiple of 4)
    x_off: u32,    // first element of X (multiple of 4); embed: first token id
    y_off: u32,    // first element of Y
    plane1: u32,   // word offset of plane 1 in w
    plane2: u32,   // word offset of plane 2 in w
    nb: u32,       // blocks per row (K / block size)
    n_units: u32,  // units per row (K / UNIT)
    split1: u32,   // matmul_rows.wgsl SPLIT3: rows [0, split1) go to y, [split1, split2) to
    split2: u32,   // y2, [split2, n_out) to y3
    col0: u32,     // first column of this dispatch in the whole product (SPLIT3 writes by it)
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
#ifdef W_U64
// matmul_rows.wgsl with 64-bit integers: the same words as vec4<u64> (32 bytes per entry; the
// split buffer is a multiple of 32 bytes). CPU drivers run a load per invocation as a loop, with
// a cost per load and per component whatever their width, so the widest loads read a block for
// the fewest (docs/shaders-matmul.md). Word 2j is the low half of u64 j (little-endian, as every
// device wgpu runs on).
@group(0) @binding(1) var<storage, read> w8: array<vec4<u64>>;

// Words i and i + 1 (i even) as one u64.
fn w_u64(i: u32) -> u64 {
    return w8[i >> 3u][(i >> 1u) & 3u];
}

fn w_word(i: u32) -> u32 {
    return u32(w_u64(i & ~1u) >> (32u * (i & 1u)));
}
#endif
#ifdef W_VEC4
// matmul_rows.wgsl: the same words as vec4s (CPU drivers load a vec4 per invocation for about
// the cost of one word; the split buffer is a multiple of 16 bytes, so every vec4 is in it).
@group(0) @binding(1) var<storage, read> w4: array<vec4<u32>>;

fn w_word(i: u32) -> u32 {
    return w4[i >> 2u][i & 3u];
}
#endif
#ifndef W_WIDE
#ifdef USE_F16
// TYPE_F16 on shader-f16 devices (matmul only): the halves typed as such.
@group(0) @binding(1) var<storage, read> w: array<vec2<f16>>;
#else
@group(0) @binding(1) var<storage, read> w: array<u32>;

// The f16 entry g of the 16-bit plane starting at word `plane`, exactly widened.
fn plane_f16(plane: u32, g: u32) -> f32 {
    return bytes_f16_to_f32(bytes_u16(w[plane + (g >> 1u)], g & 1u));
}

// Both halves of a word as exact f32s (x = low half, y = high half).
fn f16_pair(word: u32) -> vec2<f32> {
    return vec2<f32>(bytes_f16_to_f32(word & 0xffffu), bytes_f16_to_f32(word >> 16u));
}

// The four bytes of `word`, shifted right by `s` and masked with `mask`, as f32 (byte 0 first).
fn bytes_field(word: u32, s: u32, mask: u32) -> vec4<f32> {
    let v = vec4<u32>(word, word >> 8u, word >> 16u, word >> 24u);
    return vec4<f32>((v >> vec4<u32>(s)) & vec4<u32>(mask));
}

// Bit `s` of each byte of `word` (byte 0 first), as 0u / 1u.
fn byte_bits(word: u32, s: u32) -> vec4<u32> {
    let v = vec4<u32>(word, word >> 8u, word >> 16u, word >> 24u);
    return (v >> vec4<u32>(s)) & vec4<u32>(1u);
}

// Byte i (0..) of the byte array starting at word `base` of w.
fn w_byte(base: u32, i: u32) -> u32 {
    return bytes_u8(w[base + (i >> 2u)], i & 3u);
}

// Word i of w.
fn w_word(i: u32) -> u32 {
    return w[i];
}
#endif
#endif
