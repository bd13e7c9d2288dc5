//! Tensor data for random drafters: seeded values in any matrix type `flint dspark init`
//! writes. Float types hold N(0, std²) draws; block types (Q4_1, Q2_0 in either layout) hold random quants with the block scale set so the decoded weights have about the
//! asked standard deviation (`std / rms(unit-scale code)`) and mean 0 (Q4_1's minimum
//! `−7.5·d`; the symmetric formats flip the scale's sign per block at random).

use crate::gguf::GgmlType;
use crate::sampling::Xoshiro256StarStar;

/// Matrix types a random drafter may hold.
pub const MATRIX_TYPES: [GgmlType; 6] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_1,
    GgmlType::Q2_0,
    GgmlType::Q2_0_G128,
];

/// The RMS of a block type's decoded codes at a scale of 1 (and its minimum ratio, if any).
fn unit_rms(ty: GgmlType) -> Option<(f64, Option<f64>)> {
    match ty {
        // q in 0..=15 with m = −7.5·d
        GgmlType::Q4_1 => Some((4.61, Some(-7.5))),
        // q − 1, q in 0..=3: codes −1, 0, 1, 2
        GgmlType::Q2_0 | GgmlType::Q2_0_G128 => Some((1.22, None)),
        _ => None,
    }
}

/// `n` values of `ty` drawn by `draw` (floats) or random blocks of scale `std` (block types);
/// `None` for a type this module does not write or `n` not a whole number of blocks.
pub fn encode(
    ty: GgmlType,
    n: usize,
    std: f64,
    rng: &mut Xoshiro256StarStar,
    mut draw: impl FnMut(&mut Xoshiro256StarStar) -> f32,
) -> Option<Vec<u8>> {
    match ty {
        GgmlType::F32 => Some((0..n).flat_map(|_| draw(rng).to_le_bytes()).collect()),
        GgmlType::F16 => Some(
            (0..n)
                .flat_map(|_| half::f16::from_f32(draw(rng)).to_le_bytes())
                .collect(),
        ),
        GgmlType::BF16 => Some(
            (0..n)
                .flat_map(|_| half::bf16::from_f32(draw(rng)).to_le_bytes())
                .collect(),
        ),
        _ => {
            let (rms, min) = unit_rms(ty)?;
            let (elems, size) = ty.block_layout();
            if elems == 0 || !n.is_multiple_of(elems) {
                return None;
            }
            let c = std / rms;
            let mut out = vec![0u8; n / elems * size];
            for block in out.chunks_exact_mut(size) {
                for b in block.iter_mut() {
                    *b = (rng.next_u64() >> 56) as u8;
                }
                let sign = if min.is_none() && rng.next_u64() & 1 == 1 {
                    -1.0
                } else {
                    1.0
                };
                let d = half::f16::from_f64(sign * c);
                block[0..2].copy_from_slice(&d.to_le_bytes());
                if let Some(ratio) = min {
                    let m = half::f16::from_f64(d.to_f64() * ratio);
                    block[2..4].copy_from_slice(&m.to_le_bytes());
                }
            }
            Some(out)
        }
    }
}
