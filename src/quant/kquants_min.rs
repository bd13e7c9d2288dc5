//! k-quant super-blocks with a scale and a minimum per 32 elements: Q4_K and Q5_K.
//!
//! Both start with `d: f16 @0`, `dmin: f16 @2` and `scales: [u8; 12] @4`, eight 6-bit scales and
//! eight 6-bit minimums packed as llama.cpp's `get_scale_min_k4` reads them (see
//! [`scales_mins`]). The 256 outputs are four chunks of 64: chunk `c` takes the low nibbles of
//! `qs[32c .. 32c + 32]` for its first 32 outputs (sub-block `2c`) and the high nibbles for the
//! next 32 (sub-block `2c + 1`). Q5_K adds a fifth bit from `qh[l]`, bit `2c` (first 32) or
//! `2c + 1` (next 32).
//! Arithmetic in f32 and in llama.cpp's order: `d1 = d * sc`, `m1 = dmin * m` first, then
//! `d1 * q - m1` (never fused).

use bytemuck::{Pod, Zeroable};

use super::{f16_le, for_each_block};
use crate::gguf::QK_K;

/// block_q4_K (144 bytes): `d: f16 @0`, `dmin: f16 @2`, `scales: [u8; 12] @4`,
/// `qs: [u8; 128] @16` (4-bit quants).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ4_K {
    d: [u8; 2],
    dmin: [u8; 2],
    scales: [u8; 12],
    qs: [u8; QK_K / 2],
}

/// block_q5_K (176 bytes): `d: f16 @0`, `dmin: f16 @2`, `scales: [u8; 12] @4`,
/// `qh: [u8; 32] @16` (fifth bits), `qs: [u8; 128] @48` (low 4 bits).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ5_K {
    d: [u8; 2],
    dmin: [u8; 2],
    scales: [u8; 12],
    qh: [u8; QK_K / 8],
    qs: [u8; QK_K / 2],
}

/// Scales and minimums of the eight sub-blocks, 6 bits each, as llama.cpp's
/// `get_scale_min_k4` reads them from `s = [a0..a3, b0..b3, c0..c3]`:
/// - `j < 4`: `sc = a[j] & 63`, `m = b[j] & 63`;
/// - `j >= 4`: `sc = (c[j-4] & 0xF) | (a[j-4] >> 6) << 4`, `m = (c[j-4] >> 4) | (b[j-4] >> 6) << 4`.
fn scales_mins(s: [u8; 12]) -> ([u8; 8], [u8; 8]) {
    let [a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3] = s;
    let sc = |c: u8, a: u8| (c & 0x0F) | ((a >> 6) << 4);
    let mn = |c: u8, b: u8| (c >> 4) | ((b >> 6) << 4);
    (
        [
            a0 & 63,
            a1 & 63,
            a2 & 63,
            a3 & 63,
            sc(c0, a0),
            sc(c1, a1),
            sc(c2, a2),
            sc(c3, a3),
        ],
        [
            b0 & 63,
            b1 & 63,
            b2 & 63,
            b3 & 63,
            mn(c0, b0),
            mn(c1, b1),
            mn(c2, b2),
            mn(c3, b3),
        ],
    )
}

/// The eight 32-element sub-blocks in output order: quant bytes `qs[32c..32c + 32]` and the
/// nibble shift (0 for sub-block 2c, 4 for 2c + 1).
fn sub_blocks(qs: &[u8; QK_K / 2]) -> impl Iterator<Item = (&[u8], u32)> {
    qs.chunks_exact(32).flat_map(|q32| [(q32, 0), (q32, 4)])
}

pub(super) fn dequantize_q4_k(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<BlockQ4_K, QK_K>(bytes, out, |b, y| {
        let d = f16_le(b.d);
        let dmin = f16_le(b.dmin);
        let (sc, mn) = scales_mins(b.scales);
        for ((((q32, shift), &sc), &m), y32) in sub_blocks(&b.qs)
            .zip(&sc)
            .zip(&mn)
            .zip(y.chunks_exact_mut(32))
        {
            let d1 = d * f32::from(sc);
            let m1 = dmin * f32::from(m);
            for (&q, v) in q32.iter().zip(y32) {
                *v = d1 * f32::from((q >> shift) & 0x0F) - m1;
            }
        }
    });
}

pub(super) fn dequantize_q5_k(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<BlockQ5_K, QK_K>(bytes, out, |b, y| {
        let d = f16_le(b.d);
        let dmin = f16_le(b.dmin);
        let (sc, mn) = scales_mins(b.scales);
        // Sub-block j takes its fifth bits from bit j of qh[l] (llama.cpp's u1, u2).
        for (j, ((((q32, shift), &sc), &m), y32)) in sub_blocks(&b.qs)
            .zip(&sc)
            .zip(&mn)
            .zip(y.chunks_exact_mut(32))
            .enumerate()
        {
            let d1 = d * f32::from(sc);
            let m1 = dmin * f32::from(m);
            let u = 1u8 << j;
            for ((&q, &h), v) in q32.iter().zip(&b.qh).zip(y32) {
                let high = if h & u != 0 { 16 } else { 0 };
                *v = d1 * f32::from(((q >> shift) & 0x0F) + high) - m1;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgmlType;

    /// f16 bits of 0.5 and 0.25.
    const HALF: [u8; 2] = [0x00, 0x38];
    const QUARTER: [u8; 2] = [0x00, 0x34];

    const Q4_K_BYTES: usize = size_of::<BlockQ4_K>();
    const Q5_K_BYTES: usize = size_of::<BlockQ5_K>();
    /// Offset of the packed scales in both formats.
    const SCALES: usize = 4;

    #[test]
    fn layouts_match_ggml() {
        assert_eq!(GgmlType::Q4_K.block_layout(), (QK_K, Q4_K_BYTES));
        assert_eq!(GgmlType::Q5_K.block_layout(), (QK_K, Q5_K_BYTES));
    }

    #[test]
    fn scales_mins_unpack_6_bits() {
        let mut b = [0u8; Q4_K_BYTES];
        b[SCALES] = 0b1100_0101; // sc0 = 5, high bits of sc4 = 3
        b[SCALES + 4] = 0b1000_0111; // m0 = 7, high bits of m4 = 2
        b[SCALES + 8] = 0x9A; // sc4 low = 10, m4 low = 9
        let mut s = [0u8; 12];
        s.copy_from_slice(&b[SCALES..SCALES + 12]);
        let (sc, mn) = scales_mins(s);
        assert_eq!((sc[0], mn[0]), (5, 7));
        assert_eq!((sc[4], mn[4]), (48 + 10, 32 + 9));
        assert_eq!((sc[1], mn[1]), (0, 0));
    }

    #[test]
    fn q4_k_chunks_use_low_then_high_nibbles() {
        let mut b = [0u8; Q4_K_BYTES];
        b[0..2].copy_from_slice(&HALF);
        b[2..4].copy_from_slice(&QUARTER);
        b[SCALES + 1] = 4; // sc1 = 4
        b[SCALES + 5] = 8; // m1 = 8
        b[16 + 3] = 0x70; // chunk 0, l = 3: high nibble 7 -> output 35 (sub-block 1)
        let mut y = [0.0f32; QK_K];
        dequantize_q4_k(&b, &mut y);
        assert_eq!(y[35], 2.0 * 7.0 - 2.0);
        assert_eq!(y[32], -2.0);
        assert_eq!(y[3], 0.0);
    }

    #[test]
    fn q5_k_fifth_bit_walks_qh() {
        let mut b = [0u8; Q5_K_BYTES];
        b[0..2].copy_from_slice(&HALF);
        b[SCALES + 8] = 0x01; // sc4 = 1 (chunk 2, first half)
        b[SCALES + 9] = 0x02; // sc5 = 2 (chunk 2, second half)
        b[16 + 7] = 0b0011_0000; // qh[7]: bits 4 and 5 -> chunk 2, both halves
        b[48 + 64 + 7] = 0x21; // chunk 2, l = 7: low 1, high 2
        let mut y = [0.0f32; QK_K];
        dequantize_q5_k(&b, &mut y);
        assert_eq!(y[128 + 7], 0.5 * 17.0);
        assert_eq!(y[160 + 7], 1.0 * 18.0);
        assert_eq!(y[7], 0.0);
    }
}
