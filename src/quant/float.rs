//! Unquantized element types (block size 1): F32, F16, BF16, and the trivially widened
//! F64, I8, I16, I32.
//!
//! Layout: one little-endian value per element, `type_size` bytes each
//! (F32 4, F16 2, BF16 2, F64 8, I8 1, I16 2, I32 4).
//! - F32 is a bit copy (NaN payloads kept, signaling NaNs stay signaling).
//! - F16 widens exactly; a signaling NaN comes back quiet with its payload, as llama.cpp's
//!   `GGML_FP16_TO_FP32` does (F16C `vcvtph2ps`, or its portable formula).
//! - BF16 is `bits << 16`, exactly llama.cpp's `ggml_compute_bf16_to_fp32` (no NaN quieting,
//!   which is why it is not `half::bf16::to_f32`, which sets the quiet bit).
//! - F64 and the integers convert with `as f32` (round to nearest even; F64 overflow gives
//!   ±inf).

use super::{f16_le, for_each_block};

/// F32: bit copy.
pub(super) fn dequantize_f32(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<[u8; 4], 1>(bytes, out, |b, y| y[0] = f32::from_le_bytes(*b));
}

/// F16: exact widening.
pub(super) fn dequantize_f16(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<[u8; 2], 1>(bytes, out, |b, y| y[0] = f16_le(*b));
}

/// BF16: the 16 bits become the high half of an f32.
pub(super) fn dequantize_bf16(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<[u8; 2], 1>(bytes, out, |b, y| {
        y[0] = f32::from_bits(u32::from(u16::from_le_bytes(*b)) << 16)
    });
}

/// F64: rounded to f32.
pub(super) fn dequantize_f64(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<[u8; 8], 1>(bytes, out, |b, y| y[0] = f64::from_le_bytes(*b) as f32);
}

/// I8: exact.
pub(super) fn dequantize_i8(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<[u8; 1], 1>(bytes, out, |b, y| y[0] = f32::from(i8::from_le_bytes(*b)));
}

/// I16: exact.
pub(super) fn dequantize_i16(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<[u8; 2], 1>(bytes, out, |b, y| y[0] = f32::from(i16::from_le_bytes(*b)));
}

/// I32: rounded to f32 (exact up to 2^24 in magnitude).
pub(super) fn dequantize_i32(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<[u8; 4], 1>(bytes, out, |b, y| y[0] = i32::from_le_bytes(*b) as f32);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The f32 bits llama.cpp produces for f16 `h`, from the IEEE definition alone.
    fn f16_bits_oracle(h: u16) -> u32 {
        let sign = u32::from(h >> 15) << 31;
        let exp = i32::from((h >> 10) & 0x1F);
        let man = u32::from(h & 0x03FF);
        match exp {
            // Subnormal (and zero): man * 2^-24, exact in f64 and in f32.
            0 => sign | ((f64::from(man) * 2f64.powi(-24)) as f32).to_bits(),
            31 if man == 0 => sign | 0x7F80_0000,
            // NaN: payload kept, quiet bit set.
            31 => sign | 0x7FC0_0000 | (man << 13),
            _ => sign | ((f64::from(1024 + man) * 2f64.powi(exp - 25)) as f32).to_bits(),
        }
    }

    #[test]
    fn f16_all_bit_patterns_match_the_ieee_definition() {
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        let mut out = vec![0.0f32; 1 << 16];
        dequantize_f16(&bytes, &mut out);
        for (h, v) in (0..=u16::MAX).zip(&out) {
            assert_eq!(v.to_bits(), f16_bits_oracle(h), "f16 {h:#06x}");
        }
    }

    #[test]
    fn bf16_keeps_nan_payloads_and_signaling_nans() {
        let mut out = [0.0f32; 3];
        dequantize_bf16(&[0x81, 0x7F, 0xC1, 0xFF, 0x80, 0x3F], &mut out);
        let bits: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
        assert_eq!(bits, [0x7F81_0000, 0xFFC1_0000, 0x3F80_0000]);
    }

    #[test]
    fn f32_is_a_bit_copy_even_for_signaling_nans() {
        let mut out = [0.0f32; 2];
        dequantize_f32(&[0x01, 0x00, 0x80, 0x7F, 0x00, 0x00, 0x80, 0xBF], &mut out);
        assert_eq!(out[0].to_bits(), 0x7F80_0001);
        assert_eq!(out[1], -1.0);
    }

    #[test]
    fn integers_and_f64_round_to_nearest_even() {
        let mut out = [0.0f32; 2];
        let bytes: Vec<u8> = [16_777_217i32, -16_777_219]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        dequantize_i32(&bytes, &mut out);
        assert_eq!(out, [16_777_216.0, -16_777_220.0]);
        dequantize_f64(
            &[1e300f64.to_le_bytes(), 0.1f64.to_le_bytes()].concat(),
            &mut out,
        );
        assert_eq!(out, [f32::INFINITY, 0.1f32]);
        let mut out = [0.0f32; 2];
        dequantize_i8(&[0x80, 0x7F], &mut out);
        assert_eq!(out, [-128.0, 127.0]);
        dequantize_i16(&[0x00, 0x80, 0xFF, 0xFF], &mut out);
        assert_eq!(out, [-32768.0, -1.0]);
    }
}
