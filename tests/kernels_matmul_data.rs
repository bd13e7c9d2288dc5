//! Test data for the matmul kernel tests (included by `kernels_matmul*.rs` with `#[path]`; as a
//! test crate of its own it holds no tests): random weights of every supported type with
//! finite scales, random activations, and comparison helpers.

#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};

use flint::gguf::GgmlType;

static GPU: Mutex<()> = Mutex::new(());

/// NMSE bound of every matmul kernel against the oracle (`Σ(y−ŷ)² / Σŷ²`). The kernels decode
/// weights exactly and keep X and Y in f32, so the only error is f32 accumulation against the
/// oracle's f64 sums. Measured worst case over every matmul test on lavapipe (device family,
/// the three wide families, the baseline kernel, split weights, M = 512 in the invariance
/// tests; K up to 1280; 237 cases): 8.6e-14 (F16 split at K = 1024). A sequential f32 sum
/// over K = 1280 has an expected NMSE of about K·u²/6 ≈ 7.6e-13 (u = 2^-24), so the bound,
/// about 100× the measured worst, still admits any summation order a GPU may use, while a
/// single quant decoded one step off (NMSE 1e-9 to 1e-4 over the controls in
/// `kernels_matmul_controls.rs`) fails it. The earlier bound, 5e-4, was ggml's for backends
/// that quantize activations.
pub const MATMUL_NMSE: f64 = 1e-11;

/// Held by every GPU test of a binary: lavapipe contexts created by parallel tests fight over
/// the CPU cores (measured: 20 s of work took 2 minutes in parallel on 2 cores).
pub fn gpu_lock() -> MutexGuard<'static, ()> {
    GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Fails unless `e <= MATMUL_NMSE`; prints the figure (`--nocapture` shows every case, which
/// is how the measured worst case above was found).
pub fn assert_matmul_nmse(what: &str, e: f64) {
    eprintln!("matmul NMSE {e:.3e} {what}");
    assert!(e <= MATMUL_NMSE, "{what}: NMSE {e:e} > {MATMUL_NMSE:e}");
}

/// SplitMix64 (the same generator as tests/common).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Any finite f16 (subnormals included), either sign.
    pub fn finite_f16(&mut self) -> [u8; 2] {
        loop {
            let h = self.next_u64() as u16;
            if (h >> 10) & 0x1f != 0x1f {
                return h.to_le_bytes();
            }
        }
    }
}

/// Byte offsets of the f16 scales (d, m, dmin) inside one GGUF block of `ty`.
pub fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::Q1_0 | GgmlType::Q2_0 | GgmlType::Q2_0_G128 | GgmlType::PQ2_0 => &[0],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        GgmlType::IQ4_NL | GgmlType::IQ4_XS => &[0],
        GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S => &[0],
        _ => &[],
    }
}

/// Random GGUF bytes of a `[K, N]` weight of `ty`. `moderate`: values of magnitude about 1
/// (matmul tests); otherwise any finite scale and, for float types, any bit pattern except
/// where noted (embedding exactness tests).
pub fn random_weight(ty: GgmlType, k: usize, n: usize, seed: u64, moderate: bool) -> Vec<u8> {
    let mut rng = Rng(seed);
    let count = k * n;
    match ty {
        GgmlType::F32 if moderate => (0..count).flat_map(|_| rng.f32().to_le_bytes()).collect(),
        GgmlType::F16 if moderate => (0..count)
            .flat_map(|_| half::f16::from_f32(rng.f32()).to_le_bytes())
            .collect(),
        GgmlType::BF16 if moderate => (0..count)
            .flat_map(|_| ((rng.f32().to_bits() >> 16) as u16).to_le_bytes())
            .collect(),
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => rng.bytes(count * ty.type_size()),
        _ => {
            let (block, size) = ty.block_layout();
            let n_blocks = count / block;
            let mut bytes = rng.bytes(n_blocks * size);
            for b in 0..n_blocks {
                for &at in scale_offsets(ty) {
                    let h = if moderate {
                        half::f16::from_f32(rng.f32() / 16.0).to_le_bytes()
                    } else {
                        rng.finite_f16()
                    };
                    bytes[b * size + at..b * size + at + 2].copy_from_slice(&h);
                }
                if ty == GgmlType::IQ1_M {
                    // The f16 scale's nibbles in the top nibbles of the u16 scales @48.
                    let h = if moderate {
                        half::f16::from_f32(rng.f32() / 16.0).to_bits()
                    } else {
                        u16::from_le_bytes(rng.finite_f16())
                    };
                    for k in 0..4 {
                        let at = b * size + 48 + 2 * k;
                        let v = u16::from_le_bytes([bytes[at], bytes[at + 1]]) & 0x0FFF;
                        let v = v | (((h >> (4 * k)) & 15) << 12);
                        bytes[at..at + 2].copy_from_slice(&v.to_le_bytes());
                    }
                }
                if ty == GgmlType::MXFP4 && moderate {
                    // E8M0 scale byte: 2^(e - 128) in 2^-6 ..= 2^-2 (values up to 12 x that).
                    bytes[b * size] = 122 + rng.below(5) as u8;
                }
            }
            bytes
        }
    }
}

/// `n` values uniform in [-1, 1).
pub fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    (0..n).map(|_| rng.f32()).collect()
}

/// The smallest K the kernels accept for `ty` (the block size, at least the unit).
pub fn min_k(ty: GgmlType) -> usize {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 4,
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => 256,
        GgmlType::TQ1_0 | GgmlType::TQ2_0 | GgmlType::IQ4_XS => 256,
        GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ3_XXS
        | GgmlType::IQ3_S
        | GgmlType::IQ1_S
        | GgmlType::IQ1_M => 256,
        GgmlType::Q1_0 | GgmlType::Q2_0_G128 | GgmlType::PQ2_0 => 128,
        GgmlType::Q2_0 => 64,
        _ => 32,
    }
}

/// Panics unless `got` and `want` are bit-identical, naming the first difference.
pub fn assert_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let bad = (0..got.len()).filter(|&i| got[i].to_bits() != want[i].to_bits());
    let bad: Vec<usize> = bad.collect();
    if let Some(&i) = bad.first() {
        panic!(
            "{what}: {} of {} values differ; first at {i}: {:#010x} ({}) vs {:#010x} ({})",
            bad.len(),
            got.len(),
            got[i].to_bits(),
            got[i],
            want[i].to_bits(),
            want[i]
        );
    }
}
