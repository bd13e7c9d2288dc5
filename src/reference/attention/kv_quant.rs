//! Quantize-on-store for the KV cache, CPU side: f32 rows → ggml blocks with llama.cpp's
//! *reference* rules (`quantize_row_q8_0_ref`, `quantize_row_q4_0_ref` in ggml-quants.c) and
//! f16 with IEEE round-to-nearest-even (`GGML_FP32_TO_FP16`).
//!
//! Output is the plain ggml block layout (`block_q8_0` = `{f16 d, i8 qs[32]}`, 34 bytes;
//! `block_q4_0` = `{f16 d, u8 qs[16]}`, 18 bytes, byte `j` = element `j` in the low nibble and
//! element `j + 16` in the high nibble), so `crate::quant::dequantize` reads it back. The GPU
//! cache stores the same quants and scales in its own word-friendly order
//! (the GPU attention kernels' layout module converts).
//!
//! Every step is f32 arithmetic in llama.cpp's order (Rust never fuses `a * b + c`):
//! - q8_0: `amax = max |x|`, `d = amax / 127`, `id = d != 0 ? 1 / d : 0`, stored `f16(d)`,
//!   `q = roundf(x * id)` (half away from zero).
//! - q4_0: `max` = the first element of largest magnitude (sign kept), `d = max / -8`,
//!   `id = d != 0 ? 1 / d : 0`, stored `f16(d)`, `q = min(15, (int8_t)(x * id + 8.5))`
//!   (truncation toward zero).

use half::f16;

/// Elements per q8_0 / q4_0 block.
pub const QK: usize = 32;
/// Bytes of one `block_q8_0`.
pub const Q8_0_BLOCK_BYTES: usize = 34;
/// Bytes of one `block_q4_0`.
pub const Q4_0_BLOCK_BYTES: usize = 18;

/// f32 → f16 bits, round to nearest even (what `GGML_FP32_TO_FP16` does).
pub fn f16_bits(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// `x` rounded through f16 and back: what an f16 cache holds for `x`.
pub fn round_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// One row of f32 to f16 little-endian bytes. `x: [n]` → `[2n]` bytes.
pub fn quantize_row_f16(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|&v| f16_bits(v).to_le_bytes()).collect()
}

/// One q8_0 block: 32 values → 34 bytes (`d` then 32 signed quants).
pub fn quantize_block_q8_0(x: &[f32; QK]) -> [u8; Q8_0_BLOCK_BYTES] {
    let amax = x
        .iter()
        .fold(0.0f32, |a, &v| if a > v.abs() { a } else { v.abs() });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut out = [0u8; Q8_0_BLOCK_BYTES];
    out[..2].copy_from_slice(&f16_bits(d).to_le_bytes());
    for (o, &v) in out[2..].iter_mut().zip(x) {
        // f32::round is C's roundf; the value is within [-127, 127] (the cast saturates anyway).
        *o = ((v * id).round() as i8) as u8;
    }
    out
}

/// One q4_0 block: 32 values → 18 bytes (`d` then 16 bytes of nibble pairs).
pub fn quantize_block_q4_0(x: &[f32; QK]) -> [u8; Q4_0_BLOCK_BYTES] {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    // `(int8_t)(x0 + 8.5f)` truncates toward zero; `as i8` saturates where C would be undefined.
    let nibble = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    let mut out = [0u8; Q4_0_BLOCK_BYTES];
    out[..2].copy_from_slice(&f16_bits(d).to_le_bytes());
    let (lo, hi) = x.split_at(QK / 2);
    for ((o, &a), &b) in out[2..].iter_mut().zip(lo).zip(hi) {
        *o = nibble(a) | (nibble(b) << 4);
    }
    out
}

/// A row of `n` values (a multiple of 32) → `n / 32` q8_0 blocks; `None` if `n % 32 != 0`.
pub fn quantize_row_q8_0(x: &[f32]) -> Option<Vec<u8>> {
    blocks(x, |b| quantize_block_q8_0(b).to_vec())
}

/// A row of `n` values (a multiple of 32) → `n / 32` q4_0 blocks; `None` if `n % 32 != 0`.
pub fn quantize_row_q4_0(x: &[f32]) -> Option<Vec<u8>> {
    blocks(x, |b| quantize_block_q4_0(b).to_vec())
}

fn blocks(x: &[f32], f: impl Fn(&[f32; QK]) -> Vec<u8>) -> Option<Vec<u8>> {
    if !x.len().is_multiple_of(QK) {
        return None;
    }
    let mut out = Vec::new();
    for chunk in x.chunks_exact(QK) {
        let block: &[f32; QK] = chunk.try_into().ok()?;
        out.extend(f(block));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_rounds_half_away_from_zero() {
        // amax 127 → d = 1, id = 1: quants are the values rounded half away from zero.
        let mut x = [0.0f32; QK];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -2.5;
        x[3] = 0.49999997;
        let b = quantize_block_q8_0(&x);
        assert_eq!(&b[..2], &f16_bits(1.0).to_le_bytes());
        assert_eq!(&b[2..6], &[127u8, 3, (-3i8) as u8, 0]);
    }

    #[test]
    fn q4_0_keeps_the_sign_of_the_first_largest_and_rounds_through_f32() {
        let mut x = [0.0f32; QK];
        x[0] = -8.0; // max = -8 → d = 1, id = 1
        x[1] = 8.0; // same magnitude, later: not the max
        x[2] = 0.49999997; // 0.49999997 + 8.5 rounds to 9.0 in f32 → 9
        x[16] = 0.5; // 9
        x[3] = 0.5 - 2f32.powi(-21); // 9 - 2^-21: a tie, to 9 (even)
        x[4] = -0.5 - 2f32.powi(-22); // 8 - 2^-22: a tie, to 8
        let b = quantize_block_q4_0(&x);
        assert_eq!((b[5] & 15, b[6] & 15), (9, 8));
        assert_eq!(&b[..2], &f16_bits(1.0).to_le_bytes());
        assert_eq!(b[2], 9 << 4); // x[0] → 0 (low nibble), x[16] → 9
        assert_eq!(b[3] & 15, 15); // x[1] = 8 → 16.5 → min(15, 16)
        assert_eq!(b[4] & 15, 9);
    }

    #[test]
    fn all_zero_blocks_quantize_to_zero_scale() {
        let x = [0.0f32; QK];
        assert_eq!(quantize_block_q8_0(&x), [0u8; Q8_0_BLOCK_BYTES]);
        let q4 = quantize_block_q4_0(&x);
        // d = 0 / -8 = -0.0: its f16 keeps the sign bit, as ggml stores it.
        assert_eq!(&q4[..2], &f16_bits(-0.0).to_le_bytes());
        assert!(q4[2..].iter().all(|&b| b == 0x88));
    }
}
