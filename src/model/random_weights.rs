//! Random weights for a shape-only GGUF (`flint gguf preset NAME OUT --weights random`): a
//! complete model file of any size, written streaming (one chunk of blocks in memory at a
//! time), the same bytes for the same seed, so a full-size model can be benchmarked on a
//! machine that cannot download one.
//!
//! What the values are: every block format gets random quants and sub-block scales (any bit
//! pattern decodes to a finite value) and block scales chosen so the decoded weights of a
//! `[K, N]` matrix have a standard deviation of `1 / √K` and mean about 0 (a trained model's
//! magnitudes: activations stay finite through any depth). The scale for a type is found by
//! decoding sample blocks with unit scales through [`crate::quant::dequantize`]. Weights are
//! centred: block minimums are set against the mean of the quants (legacy `m = −c·q̄`, k-quant
//! `dmin = c·q̄·s̄ / m̄`), and formats without one get a random sign per block scale. Norm
//! weights are 1, biases 0.
//!
//! A `qwen35` hybrid also gets values its Gated DeltaNet layers can run on (`FloatFill`):
//! `ssm_a = −exp(U(−1, 1))` (a decay rate), `ssm_dt.bias` in U(−0.5, 0.5), conv taps with std
//! 0.5 (uniform), and norm weights `1 + U(−0.1, 0.1)`, so a forward that skips a norm weight
//! does not go unnoticed.

use std::io::Write;

use crate::gguf::{GgmlType, Gguf, GgufError, TensorInfo};
use crate::quant::dequantize;

/// Bytes of random data generated and written at a time.
const CHUNK: usize = 8 << 20;

/// SplitMix64: fast, seeded, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn fill(&mut self, out: &mut [u8]) {
        let mut words = out.chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.next().to_le_bytes());
        }
        let rest = words.into_remainder();
        let last = self.next().to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Where a block format keeps its f16 scale and, if any, its f16 minimum, and what the minimum
/// is set to for a scale of 1 (see the module docs).
struct ScaleFields {
    d: usize,
    min: Option<(usize, f32)>,
    kind: ScaleKind,
}

/// How a block stores its scale.
#[derive(Clone, Copy, PartialEq)]
enum ScaleKind {
    /// An f16 at byte `d`.
    F16,
    /// One E8M0 byte at `d` (MXFP4: `2^(e − 128)`; the nearest power of two is written).
    E8m0,
    /// IQ1_M: the f16's four nibbles in the top nibbles of the four u16 at `d`.
    Nibbles,
}

fn scale_fields(ty: GgmlType) -> Option<ScaleFields> {
    use GgmlType::*;
    let f = |d, min| {
        Some(ScaleFields {
            d,
            min,
            kind: ScaleKind::F16,
        })
    };
    match ty {
        Q4_0 | Q5_0 | Q8_0 => f(0, None),
        // value = d·q + m, q in 0..=15 (Q4_1) or 0..=31 (Q5_1).
        Q4_1 => f(0, Some((2, -7.5))),
        Q5_1 => f(0, Some((2, -15.5))),
        // value = d·sc·q − dmin·m: 4-bit sc and m, q in 0..=3 (Q2_K); 6-bit sc and m, q in
        // 0..=15 / 0..=31 (Q4_K / Q5_K). dmin = d·q̄ centres the mean.
        Q2_K => f(80, Some((82, 1.5))),
        Q4_K => f(0, Some((2, 7.5))),
        Q5_K => f(0, Some((2, 15.5))),
        Q3_K => f(108, None),
        Q6_K => f(208, None),
        // One f16 scale; ±d (Q1_0) or (q − 1)·d codes, centred by the per-block sign.
        Q1_0 | Q2_0 | Q2_0_G128 | PQ2_0 => f(0, None),
        TQ1_0 => f(52, None),
        TQ2_0 => f(64, None),
        // Codebook formats: one f16 scale (IQ4_XS: the super-block's, its 6-bit sub-block
        // scales stay random), centred by the per-block sign; MXFP4's codebook is symmetric.
        IQ4_NL | IQ4_XS => f(0, None),
        MXFP4 => Some(ScaleFields {
            d: 0,
            min: None,
            kind: ScaleKind::E8m0,
        }),
        // Lattice i-quants: one f16 scale (sub-block scales and signs stay random).
        IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S => f(0, None),
        IQ1_M => Some(ScaleFields {
            d: 48,
            min: None,
            kind: ScaleKind::Nibbles,
        }),
        _ => None,
    }
}

/// Errors writing random weights.
#[derive(Debug, thiserror::Error)]
pub enum RandomError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("random weights: tensor '{name}' has type {ty}, which the generator does not write")]
    Type { name: String, ty: GgmlType },
    #[error("random weights: the header holds tensor data already (tensor '{name}')")]
    NotShapeOnly { name: String },
    #[error("writing random weights: {0}")]
    Io(#[from] std::io::Error),
}

/// Writes `header` (a shape-only GGUF: metadata and tensor infos, ending at the data offset)
/// and then random data for every tensor at the offsets the header gives; returns the bytes
/// written. The same `header` and `seed` give the same bytes.
pub fn write_random(header: &[u8], out: &mut impl Write, seed: u64) -> Result<u64, RandomError> {
    let g = Gguf::parse(header)?;
    if !g.shape_only {
        let name = g
            .tensors
            .first()
            .map(|t| t.name.clone())
            .unwrap_or_default();
        return Err(RandomError::NotShapeOnly { name });
    }
    out.write_all(header)?;
    let mut at = g.data_offset;
    let mut tensors: Vec<&TensorInfo> = g.tensors.iter().collect();
    tensors.sort_by_key(|t| t.offset);
    let mut buf = Vec::with_capacity(CHUNK);
    // Decoded std of unit-scale blocks, found once per type.
    let mut unit_stds: Vec<(GgmlType, f32)> = Vec::new();
    let hybrid = g.metadata.architecture().is_ok_and(|a| a == "qwen35");
    for (i, t) in tensors.into_iter().enumerate() {
        let start = g.data_offset + t.offset;
        pad(out, start.saturating_sub(at))?;
        let mut rng = Rng(seed ^ (i as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
        write_tensor(t, hybrid, &mut rng, &mut buf, &mut unit_stds, out)?;
        at = start + t.n_bytes;
    }
    let end = at.div_ceil(g.alignment) * g.alignment;
    pad(out, end - at)?;
    Ok(end)
}

fn pad(out: &mut impl Write, n: u64) -> std::io::Result<()> {
    const ZEROS: [u8; 64] = [0; 64];
    let mut n = n;
    while n > 0 {
        let k = n.min(64) as usize;
        out.write_all(&ZEROS[..k])?;
        n -= k as u64;
    }
    Ok(())
}

/// How the elements of a float tensor are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
enum FloatFill {
    /// Every element this value (norm weights 1, biases 0).
    Fixed(f32),
    /// Uniform with this standard deviation, mean 0.
    Uniform(f32),
    /// `1 + U(−0.1, 0.1)`: a hybrid's norm weights.
    NearOne,
    /// `−exp(U(−1, 1))`: a hybrid's `ssm_a`.
    NegExp,
}

impl FloatFill {
    /// The fill of tensor `name` whose rows have `row_len` elements; `hybrid`: a `qwen35` file.
    fn of(name: &str, row_len: u64, hybrid: bool) -> FloatFill {
        let sigma = 1.0 / (row_len.max(1) as f32).sqrt();
        if hybrid {
            if name.ends_with("ssm_a") {
                return FloatFill::NegExp;
            }
            if name.ends_with("ssm_dt.bias") {
                return FloatFill::Uniform(0.5 / 3f32.sqrt());
            }
            if name.contains("ssm_conv1d") {
                return FloatFill::Uniform(0.5);
            }
            if name.contains("norm") {
                return FloatFill::NearOne;
            }
        }
        if name.contains("norm") {
            FloatFill::Fixed(1.0)
        } else if name.ends_with(".bias") {
            FloatFill::Fixed(0.0)
        } else {
            FloatFill::Uniform(sigma)
        }
    }

    fn draw(self, rng: &mut Rng) -> f32 {
        match self {
            FloatFill::Fixed(v) => v,
            FloatFill::Uniform(std) => rng.unit() * std * 3f32.sqrt(),
            FloatFill::NearOne => 1.0 + 0.1 * rng.unit(),
            FloatFill::NegExp => -rng.unit().exp(),
        }
    }
}

/// One tensor's `n_bytes` of random data (`hybrid`: the file is a `qwen35`, see `FloatFill`).
fn write_tensor(
    t: &TensorInfo,
    hybrid: bool,
    rng: &mut Rng,
    buf: &mut Vec<u8>,
    unit_stds: &mut Vec<(GgmlType, f32)>,
    out: &mut impl Write,
) -> Result<(), RandomError> {
    let sigma = 1.0 / (t.row_len().max(1) as f32).sqrt();
    match t.ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            let fill = FloatFill::of(&t.name, t.row_len(), hybrid);
            let width = t.ty.type_size();
            let mut left = t.n_bytes;
            while left > 0 {
                buf.clear();
                for _ in 0..left.min(CHUNK as u64) as usize / width {
                    let v = fill.draw(rng);
                    match t.ty {
                        GgmlType::F16 => buf.extend(half::f16::from_f32(v).to_le_bytes()),
                        GgmlType::BF16 => buf.extend(half::bf16::from_f32(v).to_le_bytes()),
                        _ => buf.extend(v.to_le_bytes()),
                    }
                }
                out.write_all(buf)?;
                left -= buf.len() as u64;
            }
            Ok(())
        }
        ty => {
            let fields = scale_fields(ty).ok_or_else(|| RandomError::Type {
                name: t.name.clone(),
                ty,
            })?;
            let std = match unit_stds.iter().find(|(t, _)| *t == ty) {
                Some(&(_, s)) => s,
                None => {
                    let s = unit_std(ty, &fields)?;
                    unit_stds.push((ty, s));
                    s
                }
            };
            let c = half::f16::from_f32(sigma / std);
            let (_, size) = ty.block_layout();
            let per_chunk = (CHUNK / size).max(1) * size;
            let mut left = t.n_bytes;
            while left > 0 {
                let n = left.min(per_chunk as u64) as usize;
                buf.resize(n, 0);
                rng.fill(buf);
                for block in buf.chunks_exact_mut(size) {
                    set_scales(block, &fields, c);
                }
                out.write_all(buf)?;
                left -= n as u64;
            }
            Ok(())
        }
    }
}

/// Writes block scale `c` (and its minimum) into `block`. A format without a minimum decodes
/// signed quants with a mean of −½ step, so the scale's sign is drawn per block (from the
/// random byte it overwrites) to centre the weights.
fn set_scales(block: &mut [u8], f: &ScaleFields, c: half::f16) {
    if f.kind == ScaleKind::E8m0 {
        // 2^(e − 128) nearest c (E8M0 has no sign; e = 255 is NaN in the OCP format).
        let e = 128.0 + c.to_f32().abs().max(f32::MIN_POSITIVE).log2().round();
        block[f.d] = e.clamp(0.0, 254.0) as u8;
        return;
    }
    let c = if f.min.is_none() && block[f.d] & 1 == 1 {
        -c
    } else {
        c
    };
    if f.kind == ScaleKind::Nibbles {
        let bits = c.to_bits();
        for (k, sc) in block[f.d..f.d + 8].chunks_exact_mut(2).enumerate() {
            let v =
                (u16::from_le_bytes([sc[0], sc[1]]) & 0x0FFF) | (((bits >> (4 * k)) & 15) << 12);
            sc.copy_from_slice(&v.to_le_bytes());
        }
        return;
    }
    block[f.d..f.d + 2].copy_from_slice(&c.to_le_bytes());
    if let Some((at, ratio)) = f.min {
        let m = half::f16::from_f32(c.to_f32() * ratio);
        block[at..at + 2].copy_from_slice(&m.to_le_bytes());
    }
}

/// Standard deviation of the decoded weights of random blocks of `ty` with a block scale of 1.
fn unit_std(ty: GgmlType, f: &ScaleFields) -> Result<f32, RandomError> {
    let (elems, size) = ty.block_layout();
    let n_blocks = 256;
    let mut bytes = vec![0u8; n_blocks * size];
    Rng(0x5EED).fill(&mut bytes);
    for block in bytes.chunks_exact_mut(size) {
        set_scales(block, f, half::f16::ONE);
    }
    let values = dequantize(ty, &bytes, n_blocks * elems).map_err(|e| GgufError::Write {
        message: format!("decoding sample {ty} blocks: {e}"),
    })?;
    let n = values.len() as f64;
    let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = values
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / n;
    Ok((var.sqrt() as f32).max(f32::MIN_POSITIVE))
}
