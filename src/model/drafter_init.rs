//! Random DSpark drafters for a given target (`flint dspark init`): a Qwen3-style backbone at the
//! target's dimensions plus the fusion, Markov and confidence heads, with seeded weights, written
//! in llama.cpp's `dflash` format or the legacy PrismML `dspark` format (docs/DSPARK.md).
//!
//! Such a drafter proposes nothing useful; it exists so the GPU drafter can be checked against
//! the CPU oracle ([`crate::reference::dspark`]) on the real target without a trained checkpoint.
//!
//! Weights (GGUF shapes `{ne0, ne1}`, `d` = target hidden size, `m` taps, `R` Markov rank,
//! `V` target vocabulary): per layer `blk.i.*` as in a Qwen3 block, `fc.weight {m·d, d}`,
//! `enc.output_norm.weight {d}`, `output_norm.weight {d}`, `markov_w1.weight {R, V}`,
//! `markov_w2.weight {R, V}`, `conf_proj.weight {d+R, 1}`, `conf_proj.bias {1}`. No
//! `token_embd` / `output`: a drafter borrows the target's. Matrices are N(0, 0.02²) except
//! `markov_w1`, an embedding table, N(0, 1) (so the Markov bias `W2·W1[prev]` has a visible
//! effect, std ≈ 0.02·√R); norms 1 + N(0, 0.02²) (not exactly 1, so a swapped norm weight
//! shows); the confidence bias 0. Each tensor draws from its own xoshiro256** stream seeded by
//! the seed and the tensor's `dflash` name, so both formats hold bit-identical weights.
//!
//! Options: `log_snr` adds log-SNR conditioning (range −9..9, `log_snr_fc1 {128, d}` and
//! `log_snr_fc2 {d, d}` N(0, 0.1²), biases N(0, 0.02²)); `no_vocab` writes
//! `tokenizer.ggml.model = none` and only the vocabulary size (else the target's `tokenizer.*`
//! keys are copied); `own_embd` writes the drafter's own `token_embd` and `output`; the matrix
//! type may differ per role (`fc`, `token_embd` / `output`, the Markov head): any of
//! [`fill::MATRIX_TYPES`], a block type only where the row length is a whole number of
//! blocks (the 128-element Q2_0 needs widths that are multiples of 128).
//!
//! Mask token: the target's `tokenizer.ggml.padding_token_id` when it has one inside the
//! vocabulary, else its last id (a real id either way, so the GPU can embed it).

mod fill;
mod meta;

use crate::gguf::{GgmlType, Gguf, GgufError, GgufWriter};
use crate::sampling::Xoshiro256StarStar;

pub use fill::MATRIX_TYPES;

use super::drafter_meta::tensor_name;
use super::hparams::{Arch, Hparams, HparamsError};

/// What kind of drafter to make.
#[derive(Debug, Clone, PartialEq)]
pub struct InitOptions {
    /// Drafter layers (default 1).
    pub layers: u32,
    /// γ: draft slots per block (default 4).
    pub block: u32,
    /// Markov rank `R` (default 64; 0 = no Markov head).
    pub rank: u32,
    pub seed: u64,
    /// Write a confidence head (default true).
    pub confidence: bool,
    /// Tapped target layers, layer-input convention, ascending; `None`: [`default_taps`].
    pub taps: Option<Vec<u32>>,
    /// Write the legacy PrismML `dspark` format instead of `dflash`.
    pub legacy: bool,
    /// Matrix type (norms and biases are always F32).
    pub ty: GgmlType,
    /// `fc`'s type (default: `ty`).
    pub fc_ty: Option<GgmlType>,
    /// `token_embd` / `output` type, with `own_embd` (default: `ty`).
    pub embd_ty: Option<GgmlType>,
    /// The Markov head's type (default: `ty`).
    pub markov_ty: Option<GgmlType>,
    /// Write the drafter's own `token_embd` and `output` (else it borrows the target's).
    pub own_embd: bool,
    /// Log-SNR conditioning (PrismML GIDD drafters).
    pub log_snr: bool,
    /// No vocabulary: `tokenizer.ggml.model = none` and the vocabulary size only.
    pub no_vocab: bool,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions {
            layers: 1,
            block: 4,
            rank: 64,
            seed: 0,
            confidence: true,
            taps: None,
            legacy: false,
            ty: GgmlType::F16,
            fc_ty: None,
            embd_ty: None,
            markov_ty: None,
            own_embd: false,
            log_snr: false,
            no_vocab: false,
        }
    }
}

/// Why a drafter cannot be made for this target with these options.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(transparent)]
    Hparams(#[from] HparamsError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("the target is itself a drafter (architecture {arch}); give the target model")]
    TargetIsDrafter { arch: &'static str },
    #[error("--layers {layers}: a drafter has at least one layer")]
    NoLayers { layers: u32 },
    #[error("--block {block}: a block has at least one slot")]
    NoBlock { block: u32 },
    #[error("--taps: a drafter taps at least one target layer")]
    NoTaps,
    #[error("tap {tap} is past the target's {n_layer} layers (taps are 0..={n_layer}, layer-input convention)")]
    TapOutOfRange { tap: u32, n_layer: u32 },
    #[error("taps {taps:?} are not strictly ascending")]
    TapsNotAscending { taps: Vec<u32> },
    #[error("Q2_0 in both layouts ({types:?}): one file holds one layout of type id 42")]
    Q2Layouts { types: Vec<GgmlType> },
    #[error("{name}: type {ty} is not one a random drafter is written in, or its rows of {row_len} are not whole blocks")]
    MatrixType {
        name: String,
        ty: GgmlType,
        row_len: u64,
    },
    #[error("{what} = {value} does not fit the GGUF field")]
    TooLarge { what: &'static str, value: u64 },
}

/// Default taps for a target of `n_layer` layers: `min(4, n_layer)` ids spread evenly over
/// `1..=n_layer-1` (early, middle and late layers; `[1]` for a one-layer target).
pub fn default_taps(n_layer: u32) -> Vec<u32> {
    let (lo, hi) = (1u32, n_layer.saturating_sub(1).max(1));
    let count = n_layer.min(4).min(hi - lo + 1).max(1);
    let mut taps: Vec<u32> = (0..count)
        .map(|i| {
            if count == 1 {
                return lo;
            }
            let num = u64::from(i) * u64::from(hi - lo) * 2 + u64::from(count - 1);
            lo + (num / (2 * u64::from(count - 1))) as u32 // round(i·(hi−lo)/(count−1))
        })
        .collect();
    taps.dedup();
    taps
}

/// The mask id a drafter of `target` uses (see the module docs).
pub fn mask_token_id(target: &Gguf, n_vocab: u32) -> u32 {
    let pad = target
        .metadata
        .opt("tokenizer.ggml.padding_token_id", |m, k| m.u32(k))
        .ok()
        .flatten();
    match pad {
        Some(id) if id < n_vocab => id,
        _ => n_vocab.saturating_sub(1),
    }
}

/// The taps `opts` asks for, checked against a target of `n_layer` layers.
pub fn resolve_taps(opts: &InitOptions, n_layer: u32) -> Result<Vec<u32>, InitError> {
    let taps = opts.taps.clone().unwrap_or_else(|| default_taps(n_layer));
    if taps.is_empty() {
        return Err(InitError::NoTaps);
    }
    if let Some(&tap) = taps.iter().find(|&&t| t > n_layer) {
        return Err(InitError::TapOutOfRange { tap, n_layer });
    }
    if taps.windows(2).any(|w| w[0] >= w[1]) {
        return Err(InitError::TapsNotAscending { taps });
    }
    Ok(taps)
}

/// The drafter's FFN width: the target's dense `feed_forward_length` where it has one; for a
/// mixture-of-experts target that leaves it 0 (qwen35moe files), the shared expert's width (the
/// dense FFN every token of such a target runs), else one routed expert's width. z-lab's DFlash
/// drafters copy the target config's `intermediate_size`, which is the dense width where the
/// target has one; a MoE target without one has no better width to give than its experts'.
pub fn drafter_ff(hp: &Hparams) -> u32 {
    match (&hp.moe, hp.n_ff) {
        (Some(m), 0) => m.n_ff_shexp.filter(|&f| f > 0).unwrap_or(m.n_ff_exp),
        _ => hp.n_ff,
    }
}

/// A random drafter for `target` (metadata and weights; write it with
/// [`GgufWriter::write_file`]).
pub fn random_drafter(target: &Gguf, opts: &InitOptions) -> Result<GgufWriter, InitError> {
    let hp = Hparams::from_gguf(target)?;
    if hp.arch.is_drafter() {
        return Err(InitError::TargetIsDrafter {
            arch: hp.arch.name(),
        });
    }
    if opts.layers == 0 {
        return Err(InitError::NoLayers { layers: 0 });
    }
    if opts.block == 0 {
        return Err(InitError::NoBlock { block: 0 });
    }
    let taps = resolve_taps(opts, hp.n_layer)?;
    let types: Vec<GgmlType> = [opts.ty]
        .into_iter()
        .chain(opts.fc_ty)
        .chain(opts.embd_ty.filter(|_| opts.own_embd))
        .chain(opts.markov_ty.filter(|_| opts.rank > 0))
        .collect();
    if types.contains(&GgmlType::Q2_0) && types.contains(&GgmlType::Q2_0_G128) {
        return Err(InitError::Q2Layouts { types });
    }
    let arch = if opts.legacy {
        Arch::DsparkLegacy
    } else {
        Arch::Dflash
    };
    let mut w = GgufWriter::new();
    meta::write_metadata(&mut w, target, &hp, opts, arch, &taps)?;
    let mut t = Tensors {
        w: &mut w,
        arch,
        seed: opts.seed,
        opts,
    };
    let (d, f, v) = (
        u64::from(hp.n_embd),
        u64::from(drafter_ff(&hp)),
        u64::from(hp.n_vocab),
    );
    let (q, kv, hd) = (
        u64::from(hp.q_dim()),
        u64::from(hp.k_dim()),
        u64::from(hp.head_dim),
    );
    let vd = u64::from(hp.v_dim());
    let (r, m) = (u64::from(opts.rank), taps.len() as u64);
    t.add("fc.weight", &[m * d, d], Fill::Matrix(0.02))?;
    t.add("enc.output_norm.weight", &[d], Fill::Norm)?;
    if opts.own_embd {
        t.add("token_embd.weight", &[d, v], Fill::Matrix(1.0))?;
        t.add("output.weight", &[d, v], Fill::Matrix(0.02))?;
    }
    if opts.log_snr {
        t.add("log_snr_fc1.weight", &[128, d], Fill::Matrix(0.1))?;
        t.add("log_snr_fc1.bias", &[d], Fill::Bias)?;
        t.add("log_snr_fc2.weight", &[d, d], Fill::Matrix(0.1))?;
        t.add("log_snr_fc2.bias", &[d], Fill::Bias)?;
    }
    for i in 0..opts.layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        t.add(&p("attn_norm.weight"), &[d], Fill::Norm)?;
        t.add(&p("attn_q.weight"), &[d, q], Fill::Matrix(0.02))?;
        t.add(&p("attn_k.weight"), &[d, kv], Fill::Matrix(0.02))?;
        t.add(&p("attn_v.weight"), &[d, vd], Fill::Matrix(0.02))?;
        t.add(
            &p("attn_output.weight"),
            &[u64::from(hp.n_head * hp.head_dim_v), d],
            Fill::Matrix(0.02),
        )?;
        t.add(&p("attn_q_norm.weight"), &[hd], Fill::Norm)?;
        t.add(&p("attn_k_norm.weight"), &[hd], Fill::Norm)?;
        t.add(&p("ffn_norm.weight"), &[d], Fill::Norm)?;
        t.add(&p("ffn_gate.weight"), &[d, f], Fill::Matrix(0.02))?;
        t.add(&p("ffn_up.weight"), &[d, f], Fill::Matrix(0.02))?;
        t.add(&p("ffn_down.weight"), &[f, d], Fill::Matrix(0.02))?;
    }
    t.add("output_norm.weight", &[d], Fill::Norm)?;
    if r > 0 {
        t.add("markov_w1.weight", &[r, v], Fill::Matrix(1.0))?;
        t.add("markov_w2.weight", &[r, v], Fill::Matrix(0.02))?;
    }
    if opts.confidence {
        t.add("conf_proj.weight", &[d + r, 1], Fill::Matrix(0.02))?;
        t.add("conf_proj.bias", &[1], Fill::Zero)?;
    }
    Ok(w)
}

/// How a tensor is filled.
#[derive(Debug, Clone, Copy)]
enum Fill {
    /// N(0, std²), in the matrix type.
    Matrix(f64),
    /// 1 + N(0, 0.02²), F32.
    Norm,
    /// Zeros, F32.
    Zero,
    /// N(0, 0.02²), F32.
    Bias,
}

struct Tensors<'a> {
    w: &'a mut GgufWriter,
    arch: Arch,
    seed: u64,
    opts: &'a InitOptions,
}

impl Tensors<'_> {
    /// Add tensor `name` (its `dflash` name; renamed for the legacy format).
    fn add(&mut self, name: &str, shape: &[u64], fill: Fill) -> Result<(), InitError> {
        let n: u64 = shape.iter().product();
        let n = usize::try_from(n).map_err(|_| InitError::TooLarge {
            what: "tensor elements",
            value: n,
        })?;
        let mut rng = Xoshiro256StarStar::new(self.seed ^ fnv1a(name));
        let o = self.opts;
        let ty = match (fill, name) {
            (Fill::Matrix(_), "fc.weight") => o.fc_ty.unwrap_or(o.ty),
            (Fill::Matrix(_), "token_embd.weight" | "output.weight") => o.embd_ty.unwrap_or(o.ty),
            (Fill::Matrix(_), "markov_w1.weight" | "markov_w2.weight") => {
                o.markov_ty.unwrap_or(o.ty)
            }
            (Fill::Matrix(_), _) => o.ty,
            _ => GgmlType::F32,
        };
        let std = match fill {
            Fill::Matrix(std) => std,
            _ => 0.02,
        };
        let draw = |rng: &mut Xoshiro256StarStar| match fill {
            Fill::Matrix(std) => (std * normal(rng)) as f32,
            Fill::Norm => (1.0 + 0.02 * normal(rng)) as f32,
            Fill::Bias => (0.02 * normal(rng)) as f32,
            Fill::Zero => 0.0,
        };
        let row_len = shape.first().copied().unwrap_or(1);
        let bad = || InitError::MatrixType {
            name: name.to_string(),
            ty,
            row_len,
        };
        let blocks_fit = row_len % ty.block_layout().0.max(1) as u64 == 0;
        if !MATRIX_TYPES.contains(&ty) || !blocks_fit {
            return Err(bad());
        }
        let data = fill::encode(ty, n, std, &mut rng, draw).ok_or_else(bad)?;
        self.w
            .add_tensor(tensor_name(self.arch, name), shape, ty, data)?;
        Ok(())
    }
}

/// One standard normal draw (Box–Muller, the cosine branch).
fn normal(rng: &mut Xoshiro256StarStar) -> f64 {
    let u1 = 1.0 - rng.next_f64(); // (0, 1]: ln is finite
    let u2 = rng.next_f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// FNV-1a of a tensor name: the per-tensor stream.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_taps_spread_over_the_layers() {
        assert_eq!(default_taps(30), [1, 10, 20, 29]);
        assert_eq!(default_taps(36), [1, 12, 24, 35]);
        assert_eq!(default_taps(1), [1]);
        assert_eq!(default_taps(2), [1]);
        assert_eq!(default_taps(3), [1, 2]);
        assert_eq!(default_taps(4), [1, 2, 3]);
        assert_eq!(default_taps(5), [1, 2, 3, 4]);
    }

    #[test]
    fn taps_are_checked() {
        let opts = |taps: Vec<u32>| InitOptions {
            taps: Some(taps),
            ..InitOptions::default()
        };
        assert!(matches!(
            resolve_taps(&opts(vec![2, 31]), 30),
            Err(InitError::TapOutOfRange {
                tap: 31,
                n_layer: 30
            })
        ));
        assert!(matches!(
            resolve_taps(&opts(vec![5, 5]), 30),
            Err(InitError::TapsNotAscending { .. })
        ));
        assert!(matches!(
            resolve_taps(&opts(vec![]), 30),
            Err(InitError::NoTaps)
        ));
        assert_eq!(resolve_taps(&opts(vec![0, 30]), 30).unwrap(), [0, 30]);
    }
}
