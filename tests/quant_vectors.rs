//! `flint::quant::dequantize` against the reference dequantizers, bit for bit.
//!
//! The vectors in `tests/data/quant/` hold `<TYPE>.<label>.bin` (raw blocks) and
//! `<TYPE>.<label>.f32` (the expected little-endian f32 values, never computed by flint):
//! `scripts/gen_quant_vectors.py` writes those of gguf-py (its header documents them), and
//! `scripts/gen_quant_vectors_ternary.sh` those of ggml's C code (Q1_0, Q2_0, TQ1_0, TQ2_0 from
//! llama.cpp's ggml-quants.c; PQ2_0 and the legacy 128-element Q2_0, `Q2_0_G128.*`, from a
//! transcription of PrismML's). Every supported type must have at least one vector, values
//! compare by `f32::to_bits` (so NaN payloads count too), and each vector is also decoded from
//! an odd address.

use std::fs;
use std::path::{Path, PathBuf};

use flint::gguf::{GgmlType, ALL_TYPES};
use flint::quant::{dequantize, dequantize_into, is_supported};

/// One vector: the type, its raw bytes and the expected values.
struct Vector {
    name: String,
    ty: GgmlType,
    bytes: Vec<u8>,
    expected: Vec<f32>,
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/quant")
}

/// The type a file name's prefix names: a llama.cpp type name, or `Q2_0_G128` for PrismML's
/// legacy 128-element Q2_0 (on disk id 42 like mainline Q2_0, so no type name of its own).
fn vector_type(type_name: &str) -> Option<GgmlType> {
    if type_name == "Q2_0_G128" {
        return Some(GgmlType::Q2_0_G128);
    }
    GgmlType::from_name(type_name)
}

fn load_vectors() -> Vec<Vector> {
    let dir = data_dir();
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".bin").map(str::to_owned))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let type_name = name.split('.').next().unwrap_or_default();
            let ty = vector_type(type_name)
                .unwrap_or_else(|| panic!("{name}: unknown type {type_name}"));
            let bytes = fs::read(dir.join(format!("{name}.bin"))).unwrap();
            let raw = fs::read(dir.join(format!("{name}.f32"))).unwrap();
            assert_eq!(raw.len() % 4, 0, "{name}.f32: length {}", raw.len());
            let expected = raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            Vector {
                name,
                ty,
                bytes,
                expected,
            }
        })
        .collect()
}

/// Panics with the first differing element (and the count) unless `got` equals `want` bit for
/// bit; `block_size` locates the element in its block.
fn assert_bits_equal(name: &str, block_size: usize, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let mismatches: Vec<usize> = (0..got.len())
        .filter(|&i| got[i].to_bits() != want[i].to_bits())
        .collect();
    if let Some(&i) = mismatches.first() {
        panic!(
            "{name}: {} of {} values differ; first at {i} (block {}, element {}): got {} ({:#010x}), \
             want {} ({:#010x})",
            mismatches.len(),
            got.len(),
            i / block_size,
            i % block_size,
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

#[test]
fn every_supported_type_has_a_vector() {
    let vectors = load_vectors();
    for ty in ALL_TYPES.into_iter().filter(|t| is_supported(*t)) {
        let n = vectors.iter().filter(|v| v.ty == ty).count();
        assert!(n > 0, "no test vector for {ty} in {}", data_dir().display());
    }
    // The model rows and the vectors of ggml's C code must be there as well.
    for prefix in [
        "Q4_1.model_",
        "Q8_0.model_",
        "Q1_0.ggml_",
        "Q2_0.ggml_",
        "TQ1_0.ggml_",
        "TQ2_0.ggml_",
        "PQ2_0.prism_",
        "Q2_0_G128.prism_",
    ] {
        assert!(
            vectors.iter().any(|v| v.name.starts_with(prefix)),
            "{prefix}"
        );
    }
}

#[test]
fn dequantize_matches_the_reference_bit_for_bit() {
    for v in load_vectors() {
        let got = dequantize(v.ty, &v.bytes, v.expected.len())
            .unwrap_or_else(|e| panic!("{}: {e}", v.name));
        assert_bits_equal(&v.name, v.ty.block_size(), &got, &v.expected);
    }
}

#[test]
fn dequantize_from_an_unaligned_start() {
    for v in load_vectors() {
        for offset in [1, 3] {
            let mut shifted = vec![0xA5u8; offset];
            shifted.extend_from_slice(&v.bytes);
            let bytes = &shifted[offset..];
            let got = dequantize(v.ty, bytes, v.expected.len())
                .unwrap_or_else(|e| panic!("{} @+{offset}: {e}", v.name));
            assert_bits_equal(
                &format!("{} @+{offset}", v.name),
                v.ty.block_size(),
                &got,
                &v.expected,
            );
        }
    }
}

#[test]
fn dequantize_into_matches_and_works_per_block() {
    for v in load_vectors() {
        let mut out = vec![f32::from_bits(0x7FC0_DEAD); v.expected.len()];
        dequantize_into(v.ty, &v.bytes, &mut out).unwrap_or_else(|e| panic!("{}: {e}", v.name));
        assert_bits_equal(&v.name, v.ty.block_size(), &out, &v.expected);

        // Block by block gives the same values as the whole row.
        let (bs, ts) = v.ty.block_layout();
        let mut pieces = Vec::with_capacity(v.expected.len());
        for block in v.bytes.chunks(ts) {
            pieces.extend(dequantize(v.ty, block, bs).unwrap());
        }
        assert_bits_equal(&format!("{} per block", v.name), bs, &pieces, &v.expected);
    }
}

#[test]
fn truncated_vectors_are_errors_not_panics() {
    for v in load_vectors() {
        let short = &v.bytes[..v.bytes.len() - 1];
        assert!(
            dequantize(v.ty, short, v.expected.len()).is_err(),
            "{}",
            v.name
        );
        let (bs, _) = v.ty.block_layout();
        if bs > 1 {
            assert!(
                dequantize(v.ty, &v.bytes, v.expected.len() - 1).is_err(),
                "{}",
                v.name
            );
        }
    }
}
