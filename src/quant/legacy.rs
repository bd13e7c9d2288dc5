//! The original 32-element block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! Every block holds 32 elements and an f16 scale `d` (plus an f16 minimum `m` for the `_1`
//! variants). 4- and 5-bit quants are split in halves: byte `qs[j]` holds element `j` in its
//! low nibble and element `j + 16` in its high nibble. For 5-bit quants the fifth bit of
//! element `i` is bit `i` of the little-endian u32 `qh`.
//! Arithmetic in f32 and in llama.cpp's order: `q * d` for the symmetric types, `q * d + m`
//! (never fused) for the `_1` types.

use bytemuck::{Pod, Zeroable};

use super::{f16_le, for_each_block};

/// Elements per block of every format here.
const QK: usize = 32;

/// block_q4_0 (18 bytes): `d: f16 @0`, `qs: [u8; 16] @2`; `x = (nibble - 8) * d`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ4_0 {
    d: [u8; 2],
    qs: [u8; QK / 2],
}

/// block_q4_1 (20 bytes): `d: f16 @0`, `m: f16 @2`, `qs: [u8; 16] @4`; `x = nibble * d + m`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ4_1 {
    d: [u8; 2],
    m: [u8; 2],
    qs: [u8; QK / 2],
}

/// block_q5_0 (22 bytes): `d: f16 @0`, `qh: u32 @2`, `qs: [u8; 16] @6`;
/// `x = ((nibble | high_bit << 4) - 16) * d`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ5_0 {
    d: [u8; 2],
    qh: [u8; 4],
    qs: [u8; QK / 2],
}

/// block_q5_1 (24 bytes): `d: f16 @0`, `m: f16 @2`, `qh: u32 @4`, `qs: [u8; 16] @8`;
/// `x = (nibble | high_bit << 4) * d + m`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ5_1 {
    d: [u8; 2],
    m: [u8; 2],
    qh: [u8; 4],
    qs: [u8; QK / 2],
}

/// block_q8_0 (34 bytes): `d: f16 @0`, `qs: [i8; 32] @2`; `x = q * d`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ8_0 {
    d: [u8; 2],
    qs: [i8; QK],
}

pub(super) fn dequantize_q4_0(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<BlockQ4_0, QK>(bytes, out, |b, y| {
        let d = f16_le(b.d);
        let (y0, y1) = y.split_at_mut(QK / 2);
        for ((&q, y0), y1) in b.qs.iter().zip(y0).zip(y1) {
            let x0 = i32::from(q & 0x0F) - 8;
            let x1 = i32::from(q >> 4) - 8;
            *y0 = x0 as f32 * d;
            *y1 = x1 as f32 * d;
        }
    });
}

pub(super) fn dequantize_q4_1(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<BlockQ4_1, QK>(bytes, out, |b, y| {
        let d = f16_le(b.d);
        let m = f16_le(b.m);
        let (y0, y1) = y.split_at_mut(QK / 2);
        for ((&q, y0), y1) in b.qs.iter().zip(y0).zip(y1) {
            *y0 = f32::from(q & 0x0F) * d + m;
            *y1 = f32::from(q >> 4) * d + m;
        }
    });
}

/// The fifth bits of elements `j` and `j + 16`, already in bit position 4.
#[inline]
fn high_bits(qh: u32, j: usize) -> (u8, u8) {
    let h0 = ((qh >> j) << 4) & 0x10;
    let h1 = (qh >> (j + 12)) & 0x10;
    (h0 as u8, h1 as u8)
}

pub(super) fn dequantize_q5_0(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<BlockQ5_0, QK>(bytes, out, |b, y| {
        let d = f16_le(b.d);
        let qh = u32::from_le_bytes(b.qh);
        let (y0, y1) = y.split_at_mut(QK / 2);
        for (j, ((&q, y0), y1)) in b.qs.iter().zip(y0).zip(y1).enumerate() {
            let (h0, h1) = high_bits(qh, j);
            let x0 = i32::from((q & 0x0F) | h0) - 16;
            let x1 = i32::from((q >> 4) | h1) - 16;
            *y0 = x0 as f32 * d;
            *y1 = x1 as f32 * d;
        }
    });
}

pub(super) fn dequantize_q5_1(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<BlockQ5_1, QK>(bytes, out, |b, y| {
        let d = f16_le(b.d);
        let m = f16_le(b.m);
        let qh = u32::from_le_bytes(b.qh);
        let (y0, y1) = y.split_at_mut(QK / 2);
        for (j, ((&q, y0), y1)) in b.qs.iter().zip(y0).zip(y1).enumerate() {
            let (h0, h1) = high_bits(qh, j);
            *y0 = f32::from((q & 0x0F) | h0) * d + m;
            *y1 = f32::from((q >> 4) | h1) * d + m;
        }
    });
}

pub(super) fn dequantize_q8_0(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<BlockQ8_0, QK>(bytes, out, |b, y| {
        let d = f16_le(b.d);
        for (&q, v) in b.qs.iter().zip(y.iter_mut()) {
            *v = f32::from(q) * d;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgmlType;

    const Q4_0_BYTES: usize = size_of::<BlockQ4_0>();
    const Q4_1_BYTES: usize = size_of::<BlockQ4_1>();
    const Q5_0_BYTES: usize = size_of::<BlockQ5_0>();
    const Q5_1_BYTES: usize = size_of::<BlockQ5_1>();
    const Q8_0_BYTES: usize = size_of::<BlockQ8_0>();

    #[test]
    fn layouts_match_ggml() {
        assert_eq!(GgmlType::Q4_0.block_layout(), (QK, Q4_0_BYTES));
        assert_eq!(GgmlType::Q4_1.block_layout(), (QK, Q4_1_BYTES));
        assert_eq!(GgmlType::Q5_0.block_layout(), (QK, Q5_0_BYTES));
        assert_eq!(GgmlType::Q5_1.block_layout(), (QK, Q5_1_BYTES));
        assert_eq!(GgmlType::Q8_0.block_layout(), (QK, Q8_0_BYTES));
    }

    /// f16 bits of 0.5 and -2.0.
    const HALF: [u8; 2] = [0x00, 0x38];
    const MINUS_TWO: [u8; 2] = [0x00, 0xC0];

    #[test]
    fn q4_0_splits_nibbles_into_halves() {
        let mut b = [0u8; Q4_0_BYTES];
        b[..2].copy_from_slice(&HALF);
        b[2] = 0xF0; // element 0: 0 - 8, element 16: 15 - 8
        let mut y = [0.0f32; QK];
        dequantize_q4_0(&b, &mut y);
        assert_eq!((y[0], y[16], y[1], y[17]), (-4.0, 3.5, -4.0, -4.0));
    }

    #[test]
    fn q4_1_adds_the_minimum() {
        let mut b = [0u8; Q4_1_BYTES];
        b[..2].copy_from_slice(&HALF);
        b[2..4].copy_from_slice(&MINUS_TWO);
        b[4 + 15] = 0x3A;
        let mut y = [0.0f32; QK];
        dequantize_q4_1(&b, &mut y);
        assert_eq!(
            (y[15], y[31], y[0]),
            (10.0 * 0.5 - 2.0, 3.0 * 0.5 - 2.0, -2.0)
        );
    }

    #[test]
    fn q5_high_bits_come_from_qh() {
        let mut b = [0u8; Q5_0_BYTES];
        b[..2].copy_from_slice(&HALF);
        // Bit 0 -> element 0, bit 31 -> element 31.
        b[2..6].copy_from_slice(&0x8000_0001u32.to_le_bytes());
        b[6] = 0x01;
        b[6 + 15] = 0xF0;
        let mut y = [0.0f32; QK];
        dequantize_q5_0(&b, &mut y);
        assert_eq!(y[0], (17 - 16) as f32 * 0.5);
        assert_eq!(y[16], -8.0);
        assert_eq!(y[31], 15.0 * 0.5);

        let mut b = [0u8; Q5_1_BYTES];
        b[..2].copy_from_slice(&HALF);
        b[2..4].copy_from_slice(&MINUS_TWO);
        b[4..8].copy_from_slice(&0x0001_0000u32.to_le_bytes()); // element 16
        let mut y = [0.0f32; QK];
        dequantize_q5_1(&b, &mut y);
        assert_eq!((y[16], y[0]), (16.0 * 0.5 - 2.0, -2.0));
    }

    #[test]
    fn q8_0_is_signed() {
        let mut b = [0u8; Q8_0_BYTES];
        b[..2].copy_from_slice(&MINUS_TWO);
        b[2] = 0x80;
        b[33] = 0x7F;
        let mut y = [0.0f32; QK];
        dequantize_q8_0(&b, &mut y);
        assert_eq!((y[0], y[31]), (256.0, -254.0));
    }
}
