//! CPU dequantization of ggml block formats to f32, bit-identical to llama.cpp's
//! `dequantize_row_*` (ggml-quants.c): the oracle every GPU kernel is checked against.
//!
//! [`dequantize`] and [`dequantize_into`] check the type and the lengths before touching the
//! data, so no input panics; blocks are read from byte slices as little-endian values at any
//! alignment. Each format's block layout (byte offsets) is written at its decoder:
//! [`float`] (F32, F16, BF16, F64, I8, I16, I32), [`legacy`] (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0),
//! [`kquants`] (Q2_K, Q3_K, Q6_K, Q8_K), [`kquants_min`] (Q4_K, Q5_K), [`ternary`] (Q1_0,
//! Q2_0 in both layouts, PQ2_0, TQ1_0, TQ2_0), [`iq4`] (IQ4_NL, IQ4_XS, MXFP4) and [`iq_lattice`]
//! (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M; grids in `iq_grids` and `iq1_grid`).
//! Test vectors from gguf-py: `scripts/gen_quant_vectors.py`, `tests/quant_vectors.rs`.
//!
//! The decoders never index with a computed position: blocks are `#[repr(C)]` structs of byte
//! arrays (ggml's `block_*` layouts) cast from the input, and every loop walks them with
//! `chunks_exact`/`zip`, so the lints below hold and no block content can panic.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod float;
mod iq4;
#[rustfmt::skip]
mod iq1_grid;
mod iq_grids;
mod iq_lattice;
mod kquants;
mod kquants_min;
mod legacy;
mod ternary;

use crate::gguf::GgmlType;

pub use iq_lattice::{grid_bytes, grid_len};

/// Errors of the quant module.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("dequantization of {ty} is not supported")]
    Unsupported { ty: GgmlType },
    #[error("{n_elements} elements of {ty} is not a multiple of its block size {block_size}")]
    NotBlockMultiple {
        ty: GgmlType,
        n_elements: usize,
        block_size: usize,
    },
    #[error("{n_elements} elements of {ty} need {expected_bytes} bytes, found {found_bytes}")]
    LengthMismatch {
        ty: GgmlType,
        n_elements: usize,
        expected_bytes: usize,
        found_bytes: usize,
    },
    #[error("{n_elements} elements of {ty} overflow the byte size")]
    TooLarge { ty: GgmlType, n_elements: usize },
}

/// Decoder of a whole number of blocks: `bytes.len() / type_size == out.len() / block_size`.
type RowDecoder = fn(&[u8], &mut [f32]);

/// The decoder for `ty`, or `None` when flint cannot dequantize it.
fn decoder(ty: GgmlType) -> Option<RowDecoder> {
    use GgmlType::*;
    let decode: RowDecoder = match ty {
        F32 => float::dequantize_f32,
        F16 => float::dequantize_f16,
        BF16 => float::dequantize_bf16,
        F64 => float::dequantize_f64,
        I8 => float::dequantize_i8,
        I16 => float::dequantize_i16,
        I32 => float::dequantize_i32,
        Q4_0 => legacy::dequantize_q4_0,
        Q4_1 => legacy::dequantize_q4_1,
        Q5_0 => legacy::dequantize_q5_0,
        Q5_1 => legacy::dequantize_q5_1,
        Q8_0 => legacy::dequantize_q8_0,
        Q2_K => kquants::dequantize_q2_k,
        Q3_K => kquants::dequantize_q3_k,
        Q4_K => kquants_min::dequantize_q4_k,
        Q5_K => kquants_min::dequantize_q5_k,
        Q6_K => kquants::dequantize_q6_k,
        Q8_K => kquants::dequantize_q8_k,
        Q1_0 => ternary::dequantize_q1_0,
        Q2_0 => ternary::dequantize_q2_0,
        Q2_0_G128 | PQ2_0 => ternary::dequantize_q2_0_g128,
        TQ1_0 => ternary::dequantize_tq1_0,
        TQ2_0 => ternary::dequantize_tq2_0,
        IQ4_NL => iq4::dequantize_iq4_nl,
        IQ4_XS => iq4::dequantize_iq4_xs,
        MXFP4 => iq4::dequantize_mxfp4,
        IQ2_XXS => iq_lattice::dequantize_iq2_xxs,
        IQ2_XS => iq_lattice::dequantize_iq2_xs,
        IQ2_S => iq_lattice::dequantize_iq2_s,
        IQ3_XXS => iq_lattice::dequantize_iq3_xxs,
        IQ3_S => iq_lattice::dequantize_iq3_s,
        IQ1_S => iq_lattice::dequantize_iq1_s,
        IQ1_M => iq_lattice::dequantize_iq1_m,
        Q8_1 | I64 | NVFP4 => return None,
    };
    Some(decode)
}

/// True when [`dequantize`] handles `ty`.
pub fn is_supported(ty: GgmlType) -> bool {
    decoder(ty).is_some()
}

/// Dequantize `n_elements` values of type `ty` stored in `bytes` (whole blocks, exactly
/// `n_elements / block_size * type_size` bytes), at any alignment.
///
/// # Errors
/// [`QuantError::Unsupported`] for a type flint cannot decode, [`QuantError::NotBlockMultiple`],
/// [`QuantError::LengthMismatch`] or [`QuantError::TooLarge`] when the lengths disagree; the
/// data is not read before the lengths are checked.
pub fn dequantize(ty: GgmlType, bytes: &[u8], n_elements: usize) -> Result<Vec<f32>, QuantError> {
    let decode = checked_decoder(ty, bytes.len(), n_elements)?;
    let mut out = vec![0.0f32; n_elements];
    decode(bytes, &mut out);
    Ok(out)
}

/// Dequantize into `out`; `out.len()` is the element count.
///
/// # Errors
/// As [`dequantize`]; `out` is untouched on error.
pub fn dequantize_into(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let decode = checked_decoder(ty, bytes.len(), out.len())?;
    decode(bytes, out);
    Ok(())
}

/// The decoder for `ty` once the type and the lengths are known to be valid.
fn checked_decoder(
    ty: GgmlType,
    found_bytes: usize,
    n_elements: usize,
) -> Result<RowDecoder, QuantError> {
    let decode = decoder(ty).ok_or(QuantError::Unsupported { ty })?;
    let (block_size, type_size) = ty.block_layout();
    if !n_elements.is_multiple_of(block_size) {
        return Err(QuantError::NotBlockMultiple {
            ty,
            n_elements,
            block_size,
        });
    }
    let expected_bytes = (n_elements / block_size)
        .checked_mul(type_size)
        .ok_or(QuantError::TooLarge { ty, n_elements })?;
    if expected_bytes != found_bytes {
        return Err(QuantError::LengthMismatch {
            ty,
            n_elements,
            expected_bytes,
            found_bytes,
        });
    }
    Ok(decode)
}

/// Run `decode` on each block of `bytes`: blocks of type `B` (a byte-aligned `#[repr(C)]` struct
/// mirroring ggml's `block_*`, or a byte array), `BS` values each. The caller has checked that
/// `bytes` and `out` hold the same number of whole blocks, and `B` has alignment 1 (asserted at
/// compile time), so the cast always succeeds, at any address.
fn for_each_block<B: bytemuck::AnyBitPattern, const BS: usize>(
    bytes: &[u8],
    out: &mut [f32],
    decode: impl Fn(&B, &mut [f32; BS]),
) {
    const { assert!(std::mem::align_of::<B>() == 1) };
    let Ok(blocks) = bytemuck::try_cast_slice::<u8, B>(bytes) else {
        return;
    };
    for (block, y) in blocks.iter().zip(out.chunks_exact_mut(BS)) {
        if let Ok(y) = <&mut [f32; BS]>::try_from(y) {
            decode(block, y);
        }
    }
}

/// A little-endian f16 widened to f32 (exact; a signaling NaN comes back quiet with its
/// payload, as with F16C's `vcvtph2ps` that llama.cpp uses).
#[inline]
fn f16_le(bytes: [u8; 2]) -> f32 {
    half::f16::from_le_bytes(bytes).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::types::ALL_TYPES;
    use proptest::prelude::*;

    const SUPPORTED: [GgmlType; 34] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::F64,
        GgmlType::I8,
        GgmlType::I16,
        GgmlType::I32,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_K,
        GgmlType::Q1_0,
        GgmlType::Q2_0,
        GgmlType::Q2_0_G128,
        GgmlType::PQ2_0,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
        GgmlType::MXFP4,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ2_S,
        GgmlType::IQ3_XXS,
        GgmlType::IQ3_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
    ];

    #[test]
    fn supported_set_is_exact() {
        for ty in ALL_TYPES {
            assert_eq!(is_supported(ty), SUPPORTED.contains(&ty), "{ty}");
        }
    }

    #[test]
    fn unsupported_types_are_errors_naming_the_type() {
        for ty in [GgmlType::Q8_1, GgmlType::I64, GgmlType::NVFP4] {
            let (bs, ts) = ty.block_layout();
            let err = dequantize(ty, &vec![0u8; ts], bs).unwrap_err();
            assert!(
                matches!(err, QuantError::Unsupported { ty: t } if t == ty),
                "{err}"
            );
        }
    }

    #[test]
    fn non_block_multiples_are_rejected() {
        let err = dequantize(GgmlType::Q4_0, &[0u8; 18], 33).unwrap_err();
        assert!(matches!(
            err,
            QuantError::NotBlockMultiple {
                ty: GgmlType::Q4_0,
                n_elements: 33,
                block_size: 32
            }
        ));
        let mut out = [0.0f32; 255];
        let err = dequantize_into(GgmlType::Q6_K, &[0u8; 210], &mut out).unwrap_err();
        assert!(matches!(err, QuantError::NotBlockMultiple { .. }), "{err}");
    }

    #[test]
    fn wrong_byte_lengths_are_rejected() {
        for found in [0, 17, 19, 36] {
            let err = dequantize(GgmlType::Q4_0, &vec![0u8; found], 32).unwrap_err();
            assert!(
                matches!(
                    err,
                    QuantError::LengthMismatch { expected_bytes: 18, found_bytes, .. }
                        if found_bytes == found
                ),
                "{err}"
            );
        }
        let mut out = [0.0f32; 3];
        let err = dequantize_into(GgmlType::F32, &[0u8; 11], &mut out).unwrap_err();
        assert!(matches!(err, QuantError::LengthMismatch { .. }), "{err}");
    }

    #[test]
    fn overflowing_sizes_are_rejected() {
        let err = dequantize(GgmlType::F32, &[], usize::MAX).unwrap_err();
        assert!(matches!(err, QuantError::TooLarge { .. }), "{err}");
    }

    #[test]
    fn empty_input_is_empty_output() {
        for ty in SUPPORTED {
            assert_eq!(dequantize(ty, &[], 0).unwrap(), Vec::<f32>::new());
        }
    }

    #[test]
    fn zero_blocks_decode_to_zero_everywhere() {
        // Catches a decoder whose block constants disagree with ggml's layout: it would leave
        // part of `out` unwritten.
        for ty in SUPPORTED {
            let (bs, ts) = ty.block_layout();
            let mut out = vec![1.0f32; 3 * bs];
            dequantize_into(ty, &vec![0u8; 3 * ts], &mut out).unwrap();
            assert!(out.iter().all(|v| *v == 0.0), "{ty}: {out:?}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_input_never_panics(
            id in 0usize..ALL_TYPES.len(),
            bytes in proptest::collection::vec(any::<u8>(), 0..1200),
            n_elements in 0usize..1100,
        ) {
            let ty = ALL_TYPES[id];
            let (bs, ts) = ty.block_layout();
            let valid = is_supported(ty) && n_elements % bs == 0 && n_elements / bs * ts == bytes.len();
            let result = dequantize(ty, &bytes, n_elements);
            prop_assert_eq!(result.is_ok(), valid);
            if let Ok(values) = result {
                prop_assert_eq!(values.len(), n_elements);
            }
        }

        #[test]
        fn whole_blocks_of_random_bytes_decode(
            id in 0usize..SUPPORTED.len(),
            n_blocks in 0usize..4,
            seed in any::<u64>(),
        ) {
            let ty = SUPPORTED[id];
            let (bs, ts) = ty.block_layout();
            let mut state = seed;
            let bytes: Vec<u8> = (0..n_blocks * ts)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (state >> 56) as u8
                })
                .collect();
            prop_assert_eq!(dequantize(ty, &bytes, n_blocks * bs).map(|v| v.len()).ok(), Some(n_blocks * bs));
        }
    }
}
