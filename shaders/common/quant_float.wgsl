// common/quant_float.wgsl: unquantized weights F32, F16, BF16 (see common/quant_common.wgsl for
// the decoder interface). One plane, the GGUF bytes as they are: row r starts at element r * K.
// A unit is 4 consecutive elements: acc = fma(w4, x4, acc).
//   F32   4 words per unit, bit-cast.
//   F16   2 words per unit. wu_load uses a one-multiply rebias (f16_fast_pair), or under
//         USE_F16 (matmul on shader-f16 devices) w is array<vec2<f16>> and converts natively;
//         w_get4 (without USE_F16) uses the exact integer widening of common/bytes.wgsl.
//   BF16  2 words per unit; bf16 bits << 16 is the f32 (exact, NaN payloads kept).
// F32 and BF16 also define w_bits4 (the f32 bits without a float round trip) and HAS_BITS4,
// so the embedding copy keeps signaling NaNs as the CPU does.

#ifdef TYPE_F32
const UNIT: u32 = 4u;
#define HAS_BITS4

struct WU {
    v: vec4<f32>,
}

fn w_bits4(r: u32, k: u32) -> vec4<u32> {
    let i = r * params.k + k;
    return vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]);
}

fn wu_load(r: u32, u: u32) -> WU {
    return WU(bitcast<vec4<f32>>(w_bits4(r, 4u * u)));
}

fn w_get4(r: u32, k: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(w_bits4(r, k));
}
#endif

#ifdef TYPE_F16
const UNIT: u32 = 4u;

struct WU {
    v: vec4<f32>,
}

#ifdef USE_F16
fn wu_load(r: u32, u: u32) -> WU {
    let i = (r * params.k) / 2u + 2u * u;
    return WU(vec4<f32>(vec2<f32>(w[i]), vec2<f32>(w[i + 1u])));
}

// Native conversion (the exact gather never uses USE_F16).
fn w_get4(r: u32, k: u32) -> vec4<f32> {
    let i = (r * params.k + k) / 2u;
    return vec4<f32>(vec2<f32>(w[i]), vec2<f32>(w[i + 1u]));
}
#else
// Both halves of a word as f32, fast: the exponent is rebiased by one multiply (exact for
// normal and subnormal f16 unless the device flushes f32 denormals; infinities and NaNs are not
// kept: this is the dot path only, never the gather).
fn f16_fast_pair(word: u32) -> vec2<f32> {
    let h = vec2<u32>(word & 0xffffu, word >> 16u);
    let mag = bitcast<vec2<f32>>((h & vec2<u32>(0x7fffu)) << vec2<u32>(13u)) * 5.192296858534828e33;
    return bitcast<vec2<f32>>(bitcast<vec2<u32>>(mag) | ((h & vec2<u32>(0x8000u)) << vec2<u32>(16u)));
}

fn wu_load(r: u32, u: u32) -> WU {
    let i = (r * params.k) / 2u + 2u * u;
    return WU(vec4<f32>(f16_fast_pair(w[i]), f16_fast_pair(w[i + 1u])));
}

fn w_get4(r: u32, k: u32) -> vec4<f32> {
    let i = (r * params.k + k) / 2u;
    return vec4<f32>(f16_pair(w[i]), f16_pair(w[i + 1u]));
}
#endif
#endif

#ifdef TYPE_BF16
const UNIT: u32 = 4u;
#define HAS_BITS4

struct WU {
    v: vec4<f32>,
}

fn w_bits4(r: u32, k: u32) -> vec4<u32> {
    let i = (r * params.k + k) / 2u;
    let a = w[i];
    let b = w[i + 1u];
    return vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u);
}

fn wu_load(r: u32, u: u32) -> WU {
    return WU(bitcast<vec4<f32>>(w_bits4(r, 4u * u)));
}

fn w_get4(r: u32, k: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(w_bits4(r, k));
}
#endif

#ifdef TYPE_F32
#define FLOAT_UNIT
#endif
#ifdef TYPE_F16
#define FLOAT_UNIT
#endif
#ifdef TYPE_BF16
#define FLOAT_UNIT
#endif

#ifdef FLOAT_UNIT
fn wu_dot(wu: WU, t: u32, k0: u32, acc: vec4<f32>) -> vec4<f32> {
    return fma(wu.v, xq(t, k0), acc);
}
#endif
