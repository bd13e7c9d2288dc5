//! The lattice i-quants: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (ggml-quants.c's
//! `dequantize_row_iq*`; grids in [`super::iq_grids`], layouts and sources in
//! docs/QUANT_FORMATS.md). A 256-element super-block is 8 sub-blocks of 32, each 4 groups of 8
//! elements; a group is a grid point (8 coordinates, or two IQ3 points of 4) with per-element
//! signs, or (IQ1) a point of −1/0/1 coordinates shifted by ±1/8, times the group's scale:
//! `y = scale · (±g)` or `y = scale · (g + δ)`. Every product is exact in f32, so the order
//! ggml writes (`db · g · ±1`) and this one give the same bits.

use bytemuck::{Pod, Zeroable};

use super::iq1_grid::IQ1S_GRID;
use super::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::{f16_le, for_each_block};
use crate::gguf::GgmlType;

/// ggml-common.h `IQ1S_DELTA`.
const IQ1S_DELTA: f32 = 0.125;

/// One group of 8 elements: `y[j] = scale · v[j]` (v: signed grid coordinates, or IQ1's
/// `g + δ`).
struct Group {
    scale: f32,
    v: [f32; 8],
}

/// ggml-common.h `ksigns_iq2xs[i]`: the 7 stored sign bits and their parity as bit 7 (an even
/// number of negative signs per group).
fn ksigns(i: u32) -> u8 {
    let i = i & 127;
    (i | ((i.count_ones() & 1) << 7)) as u8
}

/// The 8 bytes of grid point `p` (u8 magnitudes) with sign bit j of `signs` negating byte j.
fn signed8(p: u64, signs: u8) -> [f32; 8] {
    let b = p.to_le_bytes();
    std::array::from_fn(|j| {
        let m = f32::from(b.get(j).copied().unwrap_or(0));
        if (signs >> j) & 1 == 1 {
            -m
        } else {
            m
        }
    })
}

/// Two IQ3 grid points of 4 as one point of 8 (the first point's bytes first).
fn iq3_pair(grid: &[u32], i1: usize, i2: usize) -> u64 {
    let g = |i: usize| u64::from(grid.get(i).copied().unwrap_or(0));
    g(i1) | (g(i2) << 32)
}

fn grid_at(grid: &[u64], i: usize) -> u64 {
    grid.get(i).copied().unwrap_or(0)
}

fn byte(bytes: &[u8], i: usize) -> u8 {
    bytes.get(i).copied().unwrap_or(0)
}

/// The little-endian u16 at byte `at`.
fn u16_at(bytes: &[u8], at: usize) -> u32 {
    u32::from(u16::from_le_bytes([byte(bytes, at), byte(bytes, at + 1)]))
}

/// The little-endian u32 at byte `at`.
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(std::array::from_fn(|k| byte(bytes, at + k)))
}

/// `d · (0.5 + s) · f` (IQ2: f = 1/4, IQ3_XXS: 1/2), in ggml's order.
fn half_step(d: f32, s: u32, f: f32) -> f32 {
    d * (0.5 + s as f32) * f
}

/// block_iq2_xxs (66 bytes): `d: f16 @0`, `qs: [u16; 32] @2`. Sub-block ib: u32 `a0 = qs
/// bytes 8ib..`, `a1 = bytes 8ib+4..`; group l: point `iq2xxs_grid[byte l of a0]`, signs
/// `ksigns[(a1 >> 7l) & 127]`; scale `d · (0.5 + a1 >> 28) / 4`.
fn groups_iq2_xxs(d: f32, qs: &[u8], ib: usize, l: usize) -> Group {
    let (a0, a1) = (u32_at(qs, 8 * ib), u32_at(qs, 8 * ib + 4));
    let p = grid_at(&IQ2XXS_GRID, ((a0 >> (8 * l)) & 255) as usize);
    Group {
        scale: half_step(d, a1 >> 28, 0.25),
        v: signed8(p, ksigns(a1 >> (7 * l))),
    }
}

/// block_iq2_xs (74 bytes): `d @0`, `qs: [u16; 32] @2` (9-bit point, 7 sign bits), `scales:
/// [u8; 8] @66` (a nibble per 16 elements).
fn groups_iq2_xs(d: f32, rest: &[u8], ib: usize, l: usize) -> Group {
    let q = u16_at(rest, 2 * (4 * ib + l));
    let s = (u32::from(byte(rest, 64 + ib)) >> (4 * (l / 2))) & 15;
    Group {
        scale: half_step(d, s, 0.25),
        v: signed8(grid_at(&IQ2XS_GRID, (q & 511) as usize), ksigns(q >> 9)),
    }
}

/// block_iq2_s (82 bytes): `d @0`, `qs: [u8; 32] @2` (low 8 bits of the point), `signs: [u8;
/// 32] @34`, `qh: [u8; 8] @66` (2 high bits per group), `scales: [u8; 8] @74`.
fn groups_iq2_s(d: f32, rest: &[u8], ib: usize, l: usize) -> Group {
    let qh = u32::from(byte(rest, 64 + ib));
    let idx = u32::from(byte(rest, 4 * ib + l)) | ((qh << (8 - 2 * l)) & 0x300);
    let s = (u32::from(byte(rest, 72 + ib)) >> (4 * (l / 2))) & 15;
    Group {
        scale: half_step(d, s, 0.25),
        v: signed8(
            grid_at(&IQ2S_GRID, idx as usize),
            byte(rest, 32 + 4 * ib + l),
        ),
    }
}

/// block_iq3_xxs (98 bytes): `d @0`, `qs: [u8; 64] @2` (8-bit points of 4), `scales_and_signs:
/// [u32; 8] @66` (28 sign bits in 4 × 7, scale in the top 4).
fn groups_iq3_xxs(d: f32, rest: &[u8], ib: usize, l: usize) -> Group {
    let aux = u32_at(rest, 64 + 4 * ib);
    let (i1, i2) = (byte(rest, 8 * ib + 2 * l), byte(rest, 8 * ib + 2 * l + 1));
    Group {
        scale: half_step(d, aux >> 28, 0.5),
        v: signed8(
            iq3_pair(&IQ3XXS_GRID, i1.into(), i2.into()),
            ksigns(aux >> (7 * l)),
        ),
    }
}

/// block_iq3_s (110 bytes): `d @0`, `qs: [u8; 64] @2`, `qh: [u8; 8] @66` (ninth point bits),
/// `signs: [u8; 32] @74`, `scales: [u8; 4] @106` (a nibble per 32 elements: `d · (1 + 2s)`).
fn groups_iq3_s(d: f32, rest: &[u8], ib: usize, l: usize) -> Group {
    let qh = u32::from(byte(rest, 64 + ib));
    let i1 = u32::from(byte(rest, 8 * ib + 2 * l)) | ((qh << (8 - 2 * l)) & 256);
    let i2 = u32::from(byte(rest, 8 * ib + 2 * l + 1)) | ((qh << (7 - 2 * l)) & 256);
    let s = (u32::from(byte(rest, 104 + ib / 2)) >> (4 * (ib % 2))) & 15;
    Group {
        scale: d * (1 + 2 * s) as f32,
        v: signed8(
            iq3_pair(&IQ3S_GRID, i1 as usize, i2 as usize),
            byte(rest, 72 + 4 * ib + l),
        ),
    }
}

/// The 8 coordinates (−1, 0, 1) of IQ1 grid point `idx`, each `+ δ`.
fn iq1_point(idx: u32, delta: f32) -> [f32; 8] {
    let b = grid_at(&IQ1S_GRID, idx as usize).to_le_bytes();
    std::array::from_fn(|j| f32::from(b.get(j).copied().unwrap_or(0) as i8) + delta)
}

/// block_iq1_s (50 bytes): `d @0`, `qs: [u8; 32] @2` (low 8 bits of the 11-bit point), `qh:
/// [u16; 8] @34` (per sub-block: 3 high bits per group, 3-bit scale `d · (2s + 1)` at bit 12,
/// the sign of δ at bit 15).
fn groups_iq1_s(d: f32, rest: &[u8], ib: usize, l: usize) -> Group {
    let qh = u16_at(rest, 32 + 2 * ib);
    let idx = u32::from(byte(rest, 4 * ib + l)) | (((qh >> (3 * l)) & 7) << 8);
    let delta = if qh & 0x8000 != 0 {
        -IQ1S_DELTA
    } else {
        IQ1S_DELTA
    };
    Group {
        scale: d * (2 * ((qh >> 12) & 7) + 1) as f32,
        v: iq1_point(idx, delta),
    }
}

/// block_iq1_m (56 bytes): `qs: [u8; 32] @0`, `qh: [u8; 16] @32` (a nibble per group: 3 high
/// point bits and the sign of δ at bit 3), `scales: [u16; 4] @48` (3-bit scales, two per
/// sub-block, in bits 0..12 of each; the block's f16 scale in the top nibbles, sc0's lowest).
fn groups_iq1_m(d: f32, b: &[u8], ib: usize, l: usize) -> Group {
    let sc = u16_at(b, 48 + 2 * (ib / 2));
    let s = (sc >> (6 * (ib % 2) + 3 * (l / 2))) & 7;
    let qh = u32::from(byte(b, 32 + 2 * ib + l / 2));
    let idx = u32::from(byte(b, 4 * ib + l)) | ((qh << (8 - 4 * (l % 2))) & 0x700);
    let neg = qh & if l.is_multiple_of(2) { 0x08 } else { 0x80 } != 0;
    Group {
        scale: d * (2 * s + 1) as f32,
        v: iq1_point(idx, if neg { -IQ1S_DELTA } else { IQ1S_DELTA }),
    }
}

/// The f16 scale of an IQ1_M block from the top nibbles of its four scale words.
fn iq1_m_d(b: &[u8]) -> f32 {
    let sc = |i: usize| u16_at(b, 48 + 2 * i);
    let bits = (sc(0) >> 12) | ((sc(1) >> 8) & 0xf0) | ((sc(2) >> 4) & 0xf00) | (sc(3) & 0xf000);
    f16_le((bits as u16).to_le_bytes())
}

/// Raw block bytes of each type (the decoders index them by ggml's offsets).
macro_rules! raw_block {
    ($name:ident, $n:expr) => {
        #[repr(C)]
        #[derive(Clone, Copy, Pod, Zeroable)]
        struct $name([u8; $n]);
    };
}
raw_block!(Raw50, 50);
raw_block!(Raw56, 56);
raw_block!(Raw66, 66);
raw_block!(Raw74, 74);
raw_block!(Raw82, 82);
raw_block!(Raw98, 98);
raw_block!(Raw110, 110);

/// Fills a super-block from its 32 groups.
fn fill(y: &mut [f32; 256], group: impl Fn(usize, usize) -> Group) {
    for (gi, y8) in y.chunks_exact_mut(8).enumerate() {
        let g = group(gi / 4, gi % 4);
        for (v, &q) in y8.iter_mut().zip(&g.v) {
            *v = g.scale * q;
        }
    }
}

/// A block whose first two bytes are its f16 `d`: `d` and the rest.
fn split_d(b: &[u8]) -> (f32, &[u8]) {
    let (d, rest) = b.split_at(2.min(b.len()));
    (f16_le([byte(d, 0), byte(d, 1)]), rest)
}

macro_rules! decoder {
    ($fn:ident, $raw:ident, $groups:ident) => {
        pub(super) fn $fn(bytes: &[u8], out: &mut [f32]) {
            for_each_block(bytes, out, |b: &$raw, y: &mut [f32; 256]| {
                let (d, rest) = split_d(&b.0);
                fill(y, |ib, l| $groups(d, rest, ib, l));
            });
        }
    };
}
decoder!(dequantize_iq2_xxs, Raw66, groups_iq2_xxs);
decoder!(dequantize_iq2_xs, Raw74, groups_iq2_xs);
decoder!(dequantize_iq2_s, Raw82, groups_iq2_s);
decoder!(dequantize_iq3_xxs, Raw98, groups_iq3_xxs);
decoder!(dequantize_iq3_s, Raw110, groups_iq3_s);
decoder!(dequantize_iq1_s, Raw50, groups_iq1_s);

pub(super) fn dequantize_iq1_m(bytes: &[u8], out: &mut [f32]) {
    for_each_block(bytes, out, |b: &Raw56, y: &mut [f32; 256]| {
        let d = iq1_m_d(&b.0);
        fill(y, |ib, l| groups_iq1_m(d, &b.0, ib, l));
    });
}

/// The grid of a lattice type as little-endian bytes, one grid point after the other (what
/// the GPU decoders read from the weight buffer), or `None` for other types.
pub fn grid_bytes(ty: GgmlType) -> Option<Vec<u8>> {
    use GgmlType::*;
    let wide = |g: &[u64]| g.iter().flat_map(|p| p.to_le_bytes()).collect();
    let narrow = |g: &[u32]| g.iter().flat_map(|p| p.to_le_bytes()).collect();
    Some(match ty {
        IQ2_XXS => wide(&IQ2XXS_GRID),
        IQ2_XS => wide(&IQ2XS_GRID),
        IQ2_S => wide(&IQ2S_GRID),
        IQ3_XXS => narrow(&IQ3XXS_GRID),
        IQ3_S => narrow(&IQ3S_GRID),
        IQ1_S | IQ1_M => wide(&IQ1S_GRID),
        _ => return None,
    })
}

/// Bytes of [`grid_bytes`] (0 for other types), without building it.
pub fn grid_len(ty: GgmlType) -> usize {
    use GgmlType::*;
    match ty {
        IQ2_XXS => 8 * IQ2XXS_GRID.len(),
        IQ2_XS => 8 * IQ2XS_GRID.len(),
        IQ2_S => 8 * IQ2S_GRID.len(),
        IQ3_XXS => 4 * IQ3XXS_GRID.len(),
        IQ3_S => 4 * IQ3S_GRID.len(),
        IQ1_S | IQ1_M => 8 * IQ1S_GRID.len(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_lengths_agree() {
        for ty in crate::gguf::types::ALL_TYPES {
            assert_eq!(grid_bytes(ty).map_or(0, |b| b.len()), grid_len(ty), "{ty}");
        }
    }

    #[test]
    fn ksigns_have_even_parity() {
        for i in 0..128u32 {
            assert_eq!(ksigns(i).count_ones() % 2, 0, "{i}");
            assert_eq!(u32::from(ksigns(i)) & 127, i);
        }
    }
}
