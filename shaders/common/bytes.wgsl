// common/bytes.wgsl: byte, i8 and f16 extraction from u32 words.
//
// WGSL has no 8- or 16-bit storage loads, so GGUF block bytes are bound as array<u32> and taken
// apart here. All helpers are pure functions of words (no storage access), little-endian like
// GGUF: byte 0 of a word is its low 8 bits, the half at byte 0 is its low 16 bits.
// The f16 conversion is integer-only, so it needs no shader-f16 feature and is exact for every
// bit pattern, subnormals, infinities and NaN payloads included (it matches half::f16::to_f32).

// Byte `i` (0..3) of `word`, zero-extended.
fn bytes_u8(word: u32, i: u32) -> u32 {
    return (word >> (8u * i)) & 0xffu;
}

// Byte `i` (0..3) of `word` as a signed 8-bit integer.
fn bytes_i8(word: u32, i: u32) -> i32 {
    return extractBits(bitcast<i32>(word), 8u * i, 8u);
}

// The 16-bit half `i` (0 = low, 1 = high) of `word`.
fn bytes_u16(word: u32, i: u32) -> u32 {
    return (word >> (16u * i)) & 0xffffu;
}

// The four bytes starting `shift` bytes (1..3) into `lo`, continuing into `hi`:
// the u32 at an unaligned byte address whose aligned words are `lo` and `hi`.
fn bytes_funnel(lo: u32, hi: u32, shift: u32) -> u32 {
    return (lo >> (8u * shift)) | (hi << (32u - 8u * shift));
}

// IEEE binary16 bits (low 16 bits of `h`) to the bits of the equal binary32 value.
fn bytes_f16_bits_to_f32_bits(h: u32) -> u32 {
    let sign = (h & 0x8000u) << 16u;
    let exp = (h >> 10u) & 0x1fu;
    let man = h & 0x3ffu;
    if (exp == 0x1fu) {
        if (man == 0u) {
            return sign | 0x7f800000u; // infinity
        }
        return sign | 0x7fc00000u | (man << 13u); // NaN: payload kept, quiet bit set
    }
    if (exp == 0u) {
        if (man == 0u) {
            return sign; // signed zero
        }
        // Subnormal man * 2^-24: normalise around its top set bit p (0..9).
        let p = 31u - countLeadingZeros(man);
        return sign | ((p + 103u) << 23u) | ((man << (23u - p)) & 0x7fffffu);
    }
    return sign | ((exp + 112u) << 23u) | (man << 13u);
}

// IEEE binary16 bits (low 16 bits of `h`) to f32.
fn bytes_f16_to_f32(h: u32) -> f32 {
    return bitcast<f32>(bytes_f16_bits_to_f32_bits(h));
}

#ifdef INT64
// The four 32-bit words of two u64s, little-endian (word 2j is the low half of u64 j), as
// every device wgpu runs on stores them.
fn bytes_u64_words(v: vec2<u64>) -> vec4<u32> {
    return vec4<u32>(u32(v.x), u32(v.x >> 32u), u32(v.y), u32(v.y >> 32u));
}
#endif
