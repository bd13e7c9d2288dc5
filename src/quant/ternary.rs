//! 1-bit and ternary block formats: Q1_0 (ggml), Q2_0 in both layouts (ggml's 64-element
//! block and PrismML's 128-element one, also PQ2_0), TQ1_0 and TQ2_0 (ggml). One f16 scale `d`
//! per block; a weight is `±d` (Q1_0) or `(q − 1)·d` with `q` in 0..=3 (0..=2 for the TQ types).
//! Arithmetic as in ggml-quants.c's `dequantize_row_*`: `(float)(q − 1) * d`, so a zero code
//! gives `0·d` (a negative zero when `d < 0`). Held bit for bit to vectors of ggml's own C code
//! (`scripts/gen_quant_vectors_ternary.sh`); layouts and sources: docs/QUANT_FORMATS.md.
//!
//! Element orders, which differ per format:
//! - Q1_0: element j is bit `j % 8` of byte `qs[j / 8]` (1 → `+d`, 0 → `−d`).
//! - Q2_0 (both layouts, PQ2_0): element j is bits `2(j % 4)..` of byte `qs[j / 4]`.
//! - TQ2_0: in each 32-byte half h, element `128h + 32l + m` is bits `2l..` of `qs[32h + m]`.
//! - TQ1_0: five base-3 digits per byte of `qs` (48 bytes), four per byte of `qh` (4 bytes);
//!   digit n of byte b is `((b · 3ⁿ mod 256) · 3) >> 8`. `qs[0..32]` give elements
//!   `32n + m` (n = 0..5), `qs[32..48]` elements `160 + 16n + m`, `qh` elements
//!   `240 + 4n + j`.

use bytemuck::{Pod, Zeroable};

use super::{f16_le, for_each_block};

/// block_q1_0 (18 bytes): `d: f16 @0`, `qs: [u8; 16] @2`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ1_0 {
    d: [u8; 2],
    qs: [u8; 16],
}

/// block_q2_0, ggml (18 bytes): `d: f16 @0`, `qs: [u8; 16] @2` (64 elements).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ2_0 {
    d: [u8; 2],
    qs: [u8; 16],
}

/// PrismML's 128-element Q2_0 / PQ2_0 (34 bytes): `d: f16 @0`, `qs: [u8; 32] @2`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockQ2_0G128 {
    d: [u8; 2],
    qs: [u8; 32],
}

/// block_tq1_0 (54 bytes): `qs: [u8; 48] @0`, `qh: [u8; 4] @48`, `d: f16 @52`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockTq1_0 {
    qs: [u8; 48],
    qh: [u8; 4],
    d: [u8; 2],
}

/// block_tq2_0 (66 bytes): `qs: [u8; 64] @0`, `d: f16 @64`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockTq2_0 {
    qs: [u8; 64],
    d: [u8; 2],
}

/// `(float)(q − 1) * d`, as ggml writes it.
#[inline]
fn code(q: u8, d: f32) -> f32 {
    (i32::from(q) - 1) as f32 * d
}

pub(super) fn dequantize_q1_0(bytes: &[u8], out: &mut [f32]) {
    for_each_block(bytes, out, |b: &BlockQ1_0, y: &mut [f32; 128]| {
        let d = f16_le(b.d);
        for (&byte, ys) in b.qs.iter().zip(y.chunks_exact_mut(8)) {
            for (bit, v) in ys.iter_mut().enumerate() {
                *v = if (byte >> bit) & 1 == 1 { d } else { -d };
            }
        }
    });
}

/// Four 2-bit codes a byte, low bits first.
fn q2_codes(qs: &[u8], d: f32, y: &mut [f32]) {
    for (&byte, ys) in qs.iter().zip(y.chunks_exact_mut(4)) {
        for (k, v) in ys.iter_mut().enumerate() {
            *v = code((byte >> (2 * k)) & 3, d);
        }
    }
}

pub(super) fn dequantize_q2_0(bytes: &[u8], out: &mut [f32]) {
    for_each_block(bytes, out, |b: &BlockQ2_0, y: &mut [f32; 64]| {
        q2_codes(&b.qs, f16_le(b.d), y);
    });
}

pub(super) fn dequantize_q2_0_g128(bytes: &[u8], out: &mut [f32]) {
    for_each_block(bytes, out, |b: &BlockQ2_0G128, y: &mut [f32; 128]| {
        q2_codes(&b.qs, f16_le(b.d), y);
    });
}

pub(super) fn dequantize_tq2_0(bytes: &[u8], out: &mut [f32]) {
    for_each_block(bytes, out, |b: &BlockTq2_0, y: &mut [f32; 256]| {
        let d = f16_le(b.d);
        // Each 32-byte half fills 128 elements: four 32-element runs, one per bit pair.
        for (qs, ys) in b.qs.chunks_exact(32).zip(y.chunks_exact_mut(128)) {
            for (l, run) in ys.chunks_exact_mut(32).enumerate() {
                for (&byte, v) in qs.iter().zip(run.iter_mut()) {
                    *v = code((byte >> (2 * l)) & 3, d);
                }
            }
        }
    });
}

/// Base-3 digit `n` of `byte` (ggml's fixed-point extraction).
#[inline]
fn trit(byte: u8, n: usize) -> u8 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let p = POW3.get(n).copied().unwrap_or(1);
    ((u16::from(byte.wrapping_mul(p)) * 3) >> 8) as u8
}

/// Elements of a stage of `qs`: for each digit n, one run of `qs.len()` elements.
fn trit_stage(qs: &[u8], digits: usize, d: f32, y: &mut [f32]) {
    for (n, run) in y.chunks_exact_mut(qs.len()).take(digits).enumerate() {
        for (&byte, v) in qs.iter().zip(run.iter_mut()) {
            *v = code(trit(byte, n), d);
        }
    }
}

pub(super) fn dequantize_tq1_0(bytes: &[u8], out: &mut [f32]) {
    for_each_block(bytes, out, |b: &BlockTq1_0, y: &mut [f32; 256]| {
        let d = f16_le(b.d);
        let (y0, rest) = y.split_at_mut(160);
        let (y1, y2) = rest.split_at_mut(80);
        let (qs0, qs1) = b.qs.split_at(32);
        trit_stage(qs0, 5, d, y0);
        trit_stage(qs1, 5, d, y1);
        trit_stage(&b.qh, 4, d, y2);
    });
}
