//! The 4-bit codebook formats: IQ4_NL and IQ4_XS (ggml's non-linear 16-value codebook
//! `kvalues_iq4nl`) and MXFP4 (OCP microscaling FP4: E2M1 values with an E8M0 block scale).
//! Arithmetic as in ggml-quants.c's `dequantize_row_iq4_nl` / `_iq4_xs` / `_mxfp4` and gguf-py:
//! every product is exact in f32 (IQ4_XS: 11-bit `d` × 6-bit `ls − 32` × 7-bit code = 24 bits),
//! so GPU kernels may fuse them. Sources and layouts: docs/QUANT_FORMATS.md.
//!
//! Element order (all three): in each 32-element run with 16 quant bytes `qs`, element `j` is
//! the low nibble of `qs[j]` and element `j + 16` its high nibble.

use bytemuck::{Pod, Zeroable};

use super::{f16_le, for_each_block};

/// ggml-common.h `kvalues_iq4nl`: the IQ4_NL / IQ4_XS codebook, by 4-bit code.
pub(crate) const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// ggml-common.h `kvalues_mxfp4`: the E2M1 values doubled (the E8M0 scale is halved to match),
/// by 4-bit code (bit 3 is the sign).
pub(crate) const KVALUES_MXFP4: [i8; 16] =
    [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// block_iq4_nl (18 bytes): `d: f16 @0`, `qs: [u8; 16] @2`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockIq4Nl {
    d: [u8; 2],
    qs: [u8; 16],
}

/// block_iq4_xs (136 bytes): `d: f16 @0`, `scales_h: u16 @2` (high 2 bits of the eight 6-bit
/// sub-block scales, 2 bits each), `scales_l: [u8; 4] @4` (low 4 bits, a nibble each),
/// `qs: [u8; 128] @8` (16 bytes per 32-element sub-block).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockIq4Xs {
    d: [u8; 2],
    scales_h: [u8; 2],
    scales_l: [u8; 4],
    qs: [u8; 128],
}

/// block_mxfp4 (17 bytes): `e: u8 @0` (E8M0 scale), `qs: [u8; 16] @1`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockMxfp4 {
    e: u8,
    qs: [u8; 16],
}

/// One 32-element run: `y[j] = d · kv[qs[j] & 15]`, `y[j + 16] = d · kv[qs[j] >> 4]`.
fn nibble_run(qs: &[u8], kv: &[i8; 16], d: f32, y: &mut [f32]) {
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, a), b) in qs.iter().zip(lo).zip(hi) {
        let code = |c: u8| kv.get(usize::from(c)).copied().unwrap_or(0);
        *a = d * f32::from(code(q & 15));
        *b = d * f32::from(code(q >> 4));
    }
}

pub(super) fn dequantize_iq4_nl(bytes: &[u8], out: &mut [f32]) {
    for_each_block(bytes, out, |b: &BlockIq4Nl, y: &mut [f32; 32]| {
        nibble_run(&b.qs, &KVALUES_IQ4NL, f16_le(b.d), y);
    });
}

/// The 6-bit scale of sub-block `ib` (0..8) of an IQ4_XS block, before the `− 32`.
pub(crate) fn iq4_xs_scale(scales_h: u16, scales_l: [u8; 4], ib: usize) -> i32 {
    let lo = scales_l
        .get(ib / 2)
        .map_or(0, |s| (s >> (4 * (ib % 2))) & 15);
    let hi = (scales_h >> (2 * ib)) & 3;
    i32::from(lo) | (i32::from(hi) << 4)
}

pub(super) fn dequantize_iq4_xs(bytes: &[u8], out: &mut [f32]) {
    for_each_block(bytes, out, |b: &BlockIq4Xs, y: &mut [f32; 256]| {
        let d = f16_le(b.d);
        let scales_h = u16::from_le_bytes(b.scales_h);
        for (ib, (qs, y32)) in
            b.qs.chunks_exact(16)
                .zip(y.chunks_exact_mut(32))
                .enumerate()
        {
            let dl = d * (iq4_xs_scale(scales_h, b.scales_l, ib) - 32) as f32;
            nibble_run(qs, &KVALUES_IQ4NL, dl, y32);
        }
    });
}

/// ggml-impl.h `ggml_e8m0_to_fp32_half`: `2^(e − 128)` as f32 bits (subnormal for e < 2).
pub(crate) fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (u32::from(e) - 1) << 23
    };
    f32::from_bits(bits)
}

pub(super) fn dequantize_mxfp4(bytes: &[u8], out: &mut [f32]) {
    for_each_block(bytes, out, |b: &BlockMxfp4, y: &mut [f32; 32]| {
        nibble_run(&b.qs, &KVALUES_MXFP4, e8m0_to_f32_half(b.e), y);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_half_is_two_to_the_e_minus_128() {
        for e in 0..=255u8 {
            assert_eq!(
                e8m0_to_f32_half(e),
                2f64.powi(i32::from(e) - 128) as f32,
                "{e}"
            );
        }
    }

    #[test]
    fn mxfp4_codes_are_twice_the_e2m1_values() {
        // E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; 0b001 is the subnormal 0.5.
        for (c, &kv) in KVALUES_MXFP4.iter().enumerate() {
            let (s, e, m) = (c >> 3, (c >> 1) & 3, c & 1);
            let mag = if e == 0 {
                m as f32 * 0.5
            } else {
                (1.0 + m as f32 * 0.5) * 2f32.powi(e as i32 - 1)
            };
            let v = if s == 1 { -mag } else { mag };
            assert_eq!(f32::from(kv), 2.0 * v, "code {c}");
        }
    }
}
