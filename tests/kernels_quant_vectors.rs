//! The GPU decoders against the reference vectors of tests/quant_vectors.rs directly: every
//! block-format vector in `tests/data/quant/` (gguf-py's `gguf.quants.dequantize`, or ggml's C
//! code for the ternary types; edge scales included: ±0, subnormal and maximal f16 scales, every
//! MXFP4 E8M0 exponent) is uploaded as a weight of several rows and gathered by the embedding
//! kernel, whose output must equal the expected f32 values bit for bit (the decoders'
//! `w_get4`, which the matmul kernels' unit decoders share their tables and layouts with).
//! Then a mat-vec over the same weight (edge scales included) is held to the CPU oracle (the
//! matmul bound of kernels_matmul_data.rs) where every value is finite.

use crate::common;
use crate::data;

use std::fs;
use std::path::Path;

use common::gpu::{assert_clean, ctx, nmse};
use data::{assert_bits, assert_matmul_nmse, random_f32};
use flint::gguf::GgmlType;
use flint::kernels::matmul::{embed_now, matmul_now, Family, GpuWeight, SUPPORTED_TYPES};
use flint::reference::matmul as oracle;

/// `(name, type, bytes, expected)` of every block-format vector the matmul layout supports.
fn vectors() -> Vec<(String, GgmlType, Vec<u8>, Vec<f32>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/quant");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let f = e.unwrap().file_name().to_string_lossy().into_owned();
            f.strip_suffix(".bin").map(str::to_owned)
        })
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let prefix = name.split('.').next().unwrap_or_default();
        let ty = match prefix {
            "Q2_0_G128" => GgmlType::Q2_0_G128,
            p => match GgmlType::from_name(p) {
                Some(t) => t,
                None => continue,
            },
        };
        if !ty.is_quantized() || !SUPPORTED_TYPES.contains(&ty) {
            continue;
        }
        let bytes = fs::read(dir.join(format!("{name}.bin"))).unwrap();
        let raw = fs::read(dir.join(format!("{name}.f32"))).unwrap();
        let expected = raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        out.push((name, ty, bytes, expected));
    }
    out
}

#[test]
fn every_block_vector_decodes_on_the_gpu_bit_for_bit() {
    let _serial = data::gpu_lock();
    let ctx = ctx();
    let family = Family::for_context(&ctx);
    let mut seen = Vec::new();
    for (name, ty, bytes, expected) in vectors() {
        let (bs, ts) = ty.block_layout();
        let n_blocks = bytes.len() / ts;
        // Rows of the most blocks (up to 8) that divide the vector.
        let per_row = [8, 4, 2, 1]
            .into_iter()
            .find(|b| n_blocks % b == 0)
            .unwrap_or(1);
        let (k, n) = (per_row * bs, n_blocks / per_row);
        let w = GpuWeight::upload(&ctx, &name, ty, [k as u64, n as u64], &bytes)
            .unwrap_or_else(|e| panic!("{name}: [{k}, {n}]: {e}"));
        let ids: Vec<u32> = (0..n as u32).collect();
        let got = embed_now(&ctx, &w, &ids).unwrap();
        assert_bits(&format!("{name} [{k}, {n}] embedding"), &got, &expected);
        if expected.iter().all(|v| v.is_finite()) {
            let x = random_f32(k, 0xC0FFEE);
            let want = oracle::matmul(ty, &bytes, k, n, &x, 1).unwrap();
            let y = matmul_now(&ctx, family, &w, &x, 1).unwrap();
            assert_matmul_nmse(&format!("{name} [{k}, {n}] mat-vec"), nmse(&y, &want));
        }
        seen.push(ty);
    }
    use GgmlType::*;
    for ty in [
        IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M,
    ] {
        assert!(seen.contains(&ty), "no vector of {ty}");
    }
    assert_clean(&ctx);
}
