//! k-quant super-blocks with plain per-sub-block scales: Q2_K, Q3_K, Q6_K, Q8_K.
//! (Q4_K and Q5_K, whose 6-bit scales and minimums share 12 bytes, are in `kquants_min`.)
//!
//! A super-block holds `QK_K = 256` elements. The 2-bit planes of Q2_K/Q3_K are read as in
//! llama.cpp: the 256 outputs are two halves of 128; half `n` uses quant bytes
//! `qs[32n .. 32n + 32]`, and within it shift `2j` (j = 0..4) yields 32 outputs, the first 16 from
//! `qs[32n + l]` and the next 16 from `qs[32n + 16 + l]`, each group of 16 with its own scale.
//! Arithmetic in f32 and in llama.cpp's order (scale products first, never fused).

use bytemuck::{Pod, Zeroable};

use super::{f16_le, for_each_block};
use crate::gguf::QK_K;

/// block_q2_K (84 bytes): `scales: [u8; 16] @0` (low nibble scale, high nibble min, one pair
/// per 16 elements), `qs: [u8; 64] @16` (2-bit quants), `d: f16 @80`, `dmin: f16 @82`.
/// `x = (d * sc) * q - (dmin * m)`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ2_K {
    scales: [u8; QK_K / 16],
    qs: [u8; QK_K / 4],
    d: [u8; 2],
    dmin: [u8; 2],
}

/// block_q3_K (110 bytes): `hmask: [u8; 32] @0` (third bit), `qs: [u8; 64] @32` (low 2 bits),
/// `scales: [u8; 12] @96` (sixteen 6-bit scales, see [`q3_k_scales`]), `d: f16 @108`.
/// `x = (d * (sc - 32)) * (q2 - (hbit ? 0 : 4))`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ3_K {
    hmask: [u8; QK_K / 8],
    qs: [u8; QK_K / 4],
    scales: [u8; 12],
    d: [u8; 2],
}

/// block_q6_K (210 bytes): `ql: [u8; 128] @0` (low 4 bits), `qh: [u8; 64] @128` (high 2 bits),
/// `scales: [i8; 16] @192`, `d: f16 @208`. `x = (d * sc) * (q6 - 32)`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ6_K {
    ql: [u8; QK_K / 2],
    qh: [u8; QK_K / 4],
    scales: [i8; QK_K / 16],
    d: [u8; 2],
}

/// block_q8_K (292 bytes): `d: f32 @0`, `qs: [i8; 256] @4`, `bsums: [i16; 16] @260` (sums for
/// dot products, unused here). `x = d * q`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ8_K {
    d: [u8; 4],
    qs: [i8; QK_K],
    bsums: [u8; QK_K / 16 * 2],
}

pub(super) fn dequantize_q2_k(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<BlockQ2_K, QK_K>(bytes, out, |b, y| {
        let d = f16_le(b.d);
        let dmin = f16_le(b.dmin);
        // Groups of 16 outputs in order (n, j, half), each with the next scale byte.
        let groups = b.qs.chunks_exact(32).flat_map(|q32| {
            (0..4u32).flat_map(move |j| q32.chunks_exact(16).map(move |q16| (q16, 2 * j)))
        });
        for (((q16, shift), &sc), y16) in groups.zip(&b.scales).zip(y.chunks_exact_mut(16)) {
            let dl = d * f32::from(sc & 0x0F);
            let ml = dmin * f32::from(sc >> 4);
            for (&q, v) in q16.iter().zip(y16) {
                *v = dl * f32::from((q >> shift) & 3) - ml;
            }
        }
    });
}

/// The sixteen Q3_K scales (6 bits each, before the `- 32`), unpacked from 12 bytes with
/// llama.cpp's `kmask` shuffle on three little-endian words: scale `k` has low nibble
/// `s[k] & 0xF` (k < 8) or `s[k - 8] >> 4` (k >= 8), and high two bits
/// `(s[8 + k % 4] >> (2 * (k / 4))) & 3`.
fn q3_k_scales(s: [u8; 12]) -> [u8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let [a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3] = s;
    let (a, b, tmp) = (
        u32::from_le_bytes([a0, a1, a2, a3]),
        u32::from_le_bytes([b0, b1, b2, b3]),
        u32::from_le_bytes([c0, c1, c2, c3]),
    );
    let words = [
        (a & KMASK2) | ((tmp & KMASK1) << 4),
        (b & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((b >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    bytemuck::cast(words.map(u32::to_le_bytes))
}

pub(super) fn dequantize_q3_k(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<BlockQ3_K, QK_K>(bytes, out, |b, y| {
        let d_all = f16_le(b.d);
        let scales = q3_k_scales(b.scales);
        let hmask = &b.hmask;
        // Groups of 16 outputs in order (n, j, half): 2-bit planes at shift 2j of qs[32n..],
        // third bit from hmask bit 4n + j (llama.cpp's `m` walks 1, 2, 4, ... 128).
        let groups =
            b.qs.chunks_exact(32)
                .zip([0u32, 4])
                .flat_map(|(q32, bit0)| {
                    (0..4u32).flat_map(move |j| {
                        q32.chunks_exact(16)
                            .zip(hmask.chunks_exact(16))
                            .map(move |(q16, h16)| (q16, h16, 2 * j, 1u8 << (bit0 + j)))
                    })
                });
        for (((q16, h16, shift, m), &sc), y16) in groups.zip(&scales).zip(y.chunks_exact_mut(16)) {
            let dl = d_all * (i32::from(sc) - 32) as f32;
            for ((&q, &h), v) in q16.iter().zip(h16).zip(y16) {
                let q = i32::from((q >> shift) & 3) - if h & m != 0 { 0 } else { 4 };
                *v = dl * q as f32;
            }
        }
    });
}

pub(super) fn dequantize_q6_k(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<BlockQ6_K, QK_K>(bytes, out, |b, y| {
        let d = f16_le(b.d);
        // Half n (128 outputs) uses ql[64n..], qh[32n..]; its quarter r (32 outputs) takes the
        // low (r = 0, 1) or high (r = 2, 3) nibbles of ql[64n + 32 (r % 2)..] and bits 2r, 2r + 1
        // of qh[32n..]. Groups of 16 outputs come in order (n, r, half), one scale each.
        let groups =
            b.ql.chunks_exact(64)
                .zip(b.qh.chunks_exact(32))
                .flat_map(|(ql64, qh32)| {
                    ql64.chunks_exact(32)
                        .cycle()
                        .zip(0..4u32)
                        .flat_map(move |(ql32, r)| {
                            ql32.chunks_exact(16)
                                .zip(qh32.chunks_exact(16))
                                .map(move |(ql16, qh16)| (ql16, qh16, 4 * (r / 2), 2 * r))
                        })
                });
        for (((ql16, qh16, lshift, hshift), &sc), y16) in
            groups.zip(&b.scales).zip(y.chunks_exact_mut(16))
        {
            let dsc = d * f32::from(sc);
            for ((&ql, &qh), v) in ql16.iter().zip(qh16).zip(y16) {
                let q = ((ql >> lshift) & 0x0F) | (((qh >> hshift) & 3) << 4);
                *v = dsc * (i32::from(q) - 32) as f32;
            }
        }
    });
}

pub(super) fn dequantize_q8_k(bytes: &[u8], out: &mut [f32]) {
    for_each_block::<BlockQ8_K, QK_K>(bytes, out, |b, y| {
        let d = f32::from_le_bytes(b.d);
        for (&q, v) in b.qs.iter().zip(y.iter_mut()) {
            *v = d * f32::from(q);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgmlType;

    /// f16 bits of 0.5.
    const HALF: [u8; 2] = [0x00, 0x38];

    const Q2_K_BYTES: usize = size_of::<BlockQ2_K>();
    const Q3_K_BYTES: usize = size_of::<BlockQ3_K>();
    const Q6_K_BYTES: usize = size_of::<BlockQ6_K>();
    const Q8_K_BYTES: usize = size_of::<BlockQ8_K>();

    #[test]
    fn layouts_match_ggml() {
        assert_eq!(GgmlType::Q2_K.block_layout(), (QK_K, Q2_K_BYTES));
        assert_eq!(GgmlType::Q3_K.block_layout(), (QK_K, Q3_K_BYTES));
        assert_eq!(GgmlType::Q6_K.block_layout(), (QK_K, Q6_K_BYTES));
        assert_eq!(GgmlType::Q8_K.block_layout(), (QK_K, Q8_K_BYTES));
    }

    #[test]
    fn q3_k_scales_unpack_6_bits() {
        let mut s = [0u8; 12];
        s[0] = 0xA5; // scale 0 low = 5, scale 8 low = 10
        s[8] = 0b1110_0100; // scale 0 high = 0, scale 4 high = 1, scale 8 high = 2, scale 12 high = 3
        let sc: Vec<i32> = q3_k_scales(s).iter().map(|v| i32::from(*v) - 32).collect();
        assert_eq!(sc[0], 5 - 32);
        assert_eq!(sc[4], 16 - 32);
        assert_eq!(sc[8], 10 + 32 - 32);
        assert_eq!(sc[12], 48 - 32);
        assert_eq!(sc[1], -32);
    }

    #[test]
    fn q2_k_places_groups_of_16() {
        let mut b = [0u8; Q2_K_BYTES];
        b[80..82].copy_from_slice(&HALF); // d
        b[82..84].copy_from_slice(&HALF); // dmin
        b[8 + 2 * 3 + 1] = 0x24; // n = 1, j = 3, second half: scale 4, min 2
        b[16 + 32 + 16 + 5] = 0b1100_0000; // q = 3 at shift 6 -> element 128 + 96 + 16 + 5
        let mut y = [0.0f32; QK_K];
        dequantize_q2_k(&b, &mut y);
        assert_eq!(y[128 + 96 + 16 + 5], 2.0 * 3.0 - 1.0);
        assert_eq!(y[128 + 96 + 16 + 4], -1.0);
        assert_eq!(y[0], 0.0);
    }

    #[test]
    fn q6_k_reads_quarters() {
        let mut b = [0u8; Q6_K_BYTES];
        b[208..210].copy_from_slice(&HALF);
        b[192..208].fill(2); // every scale 2
        b[32 + 17] = 0xF0; // ql1 of n = 0, l = 17: quarter 3 low 4 bits = 15
        b[128 + 17] = 0b1100_0000; // quarter 3 high bits = 3
        let mut y = [0.0f32; QK_K];
        dequantize_q6_k(&b, &mut y);
        assert_eq!(y[96 + 17], 0.5 * 2.0 * 31.0);
        assert_eq!(y[17], 0.5 * 2.0 * -32.0);
    }

    #[test]
    fn q8_k_uses_an_f32_scale() {
        let mut b = [0u8; Q8_K_BYTES];
        b[..4].copy_from_slice(&0.25f32.to_le_bytes());
        b[4] = 0x80;
        b[259] = 4;
        let mut y = [0.0f32; QK_K];
        dequantize_q8_k(&b, &mut y);
        assert_eq!((y[0], y[255], y[1]), (-32.0, 1.0, 0.0));
    }
}
