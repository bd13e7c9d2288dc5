//! Random DSpark drafters for a given target (`flint dspark init`): a Qwen3-style backbone at the
//! target's dimensions plus the fusion, Markov and confidence heads, with seeded weights, written
//! in llama.cpp's `dflash` format or the legacy PrismML `dspark` format (dspark-spec §2).
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
//! Mask token: the target's `tokenizer.ggml.padding_token_id` when it has one inside the
//! vocabulary, else its last id (a real id either way, so the GPU can embed it).

use crate::gguf::{GgmlType, Gguf, GgufError, GgufWriter, MetaArray, MetaValue};
use crate::sampling::Xoshiro256StarStar;

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
    /// Matrix type: F16 or F32 (norms and the confidence bias are always F32).
    pub ty: GgmlType,
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
    #[error("--type {ty}: drafter matrices are written as F16 or F32")]
    MatrixType { ty: GgmlType },
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
    if !matches!(opts.ty, GgmlType::F16 | GgmlType::F32) {
        return Err(InitError::MatrixType { ty: opts.ty });
    }
    let taps = resolve_taps(opts, hp.n_layer)?;
    let arch = if opts.legacy {
        Arch::DsparkLegacy
    } else {
        Arch::Dflash
    };
    let mut w = GgufWriter::new();
    write_metadata(&mut w, target, &hp, opts, arch, &taps)?;
    let mut t = Tensors {
        w: &mut w,
        arch,
        seed: opts.seed,
        ty: opts.ty,
    };
    let (d, f, v) = (
        u64::from(hp.n_embd),
        u64::from(hp.n_ff),
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

fn write_metadata(
    w: &mut GgufWriter,
    target: &Gguf,
    hp: &Hparams,
    opts: &InitOptions,
    arch: Arch,
    taps: &[u32],
) -> Result<(), InitError> {
    let p = arch.name();
    let key = |k: &str| format!("{p}.{k}");
    // Drafter-only keys: `dflash.<k>`, legacy `dspark.dspark.<k>`.
    let own = |k: &str| match arch {
        Arch::DsparkLegacy => format!("dspark.dspark.{k}"),
        _ => format!("dflash.{k}"),
    };
    w.set("general.architecture", MetaValue::String(p.into()));
    w.set(
        "general.name",
        MetaValue::String(format!("flint random DSpark drafter (seed {})", opts.seed)),
    );
    let u = MetaValue::U32;
    w.set(&key("block_count"), u(opts.layers));
    w.set(&key("context_length"), u(hp.n_ctx_train.min(4096)));
    w.set(&key("embedding_length"), u(hp.n_embd));
    w.set(&key("feed_forward_length"), u(hp.n_ff));
    w.set(&key("attention.head_count"), u(hp.n_head));
    w.set(&key("attention.head_count_kv"), u(hp.n_head_kv));
    w.set(&key("attention.key_length"), u(hp.head_dim));
    w.set(&key("attention.value_length"), u(hp.head_dim_v));
    w.set(&key("rope.dimension_count"), u(hp.head_dim));
    w.set(&key("rope.freq_base"), MetaValue::F32(hp.rope_base));
    w.set(
        &key("attention.layer_norm_rms_epsilon"),
        MetaValue::F32(hp.rms_eps),
    );
    w.set(&key("vocab_size"), u(hp.n_vocab));
    let mask = mask_token_id(target, hp.n_vocab);
    w.set(&own("block_size"), u(opts.block));
    let stored = taps
        .iter()
        .map(|&t| {
            // Legacy taps are HF layer-output ids: one lower (tap 0, the embeddings, is −1).
            let t = i64::from(t) - i64::from(arch == Arch::DsparkLegacy);
            i32::try_from(t).map_err(|_| InitError::TooLarge {
                what: "tap",
                value: t.unsigned_abs(),
            })
        })
        .collect::<Result<Vec<i32>, _>>()?;
    w.set(
        &own("target_layers"),
        MetaValue::Array(MetaArray::I32(stored)),
    );
    match arch {
        Arch::DsparkLegacy => {
            w.set(&own("markov_rank"), u(opts.rank));
            w.set(&own("mask_token_id"), u(mask));
            w.set(&own("confidence_head"), MetaValue::Bool(opts.confidence));
            w.set(
                &own("confidence_head_with_markov"),
                MetaValue::Bool(opts.confidence && opts.rank > 0),
            );
            w.set(&own("log_snr_conditioning"), MetaValue::Bool(false));
            w.set("tokenizer.ggml.model", MetaValue::String("none".into()));
        }
        _ => {
            w.set(&own("target_hidden_size"), u(hp.n_embd));
            w.set(&own("sample_from_anchor"), MetaValue::Bool(true));
            w.set(
                &own("has_confidence_head"),
                MetaValue::Bool(opts.confidence),
            );
            w.set("tokenizer.ggml.mask_token_id", u(mask));
        }
    }
    Ok(())
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
}

struct Tensors<'a> {
    w: &'a mut GgufWriter,
    arch: Arch,
    seed: u64,
    ty: GgmlType,
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
        let values = (0..n).map(|_| match fill {
            Fill::Matrix(std) => (std * normal(&mut rng)) as f32,
            Fill::Norm => (1.0 + 0.02 * normal(&mut rng)) as f32,
            Fill::Zero => 0.0,
        });
        let ty = match fill {
            Fill::Matrix(_) => self.ty,
            _ => GgmlType::F32,
        };
        let data: Vec<u8> = match ty {
            GgmlType::F16 => values
                .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
            _ => values.flat_map(f32::to_le_bytes).collect(),
        };
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
