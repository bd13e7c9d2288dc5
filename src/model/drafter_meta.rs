//! What a DSpark drafter declares about itself, from either GGUF format (docs/DSPARK.md):
//! llama.cpp's `dflash` (taps in the layer-input convention) and the legacy PrismML `dspark`
//! (double-prefixed keys, taps in the HF layer-output convention: one lower).
//!
//! Log-SNR conditioning (PrismML GIDD drafters): `dflash.log_snr_conditioning` /
//! `dspark.dspark.log_snr_conditioning` (also read as `dspark.log_snr_conditioning`) with
//! `min_log_snr < max_log_snr`, both finite, under the same prefix.

use crate::gguf::{Gguf, GgufError};

use super::hparams::{int_array, Arch, Hparams, HparamsError};

/// Drafter-specific metadata on top of its backbone [`Hparams`].
#[derive(Debug, Clone, PartialEq)]
pub struct DrafterMeta {
    pub hp: Hparams,
    /// γ: draft slots per block.
    pub block_size: u32,
    /// Tapped target layers, layer-input convention (`n_layer` = pre-final-norm output).
    pub target_layers: Vec<u32>,
    /// `d_t`: the target's hidden size (each tap is this wide).
    pub target_hidden: u32,
    /// Markov head rank `R` (0 without a Markov head).
    pub markov_rank: u32,
    pub has_confidence: bool,
    pub mask_token_id: Option<u32>,
    /// Anchor-first layout: γ slots give γ drafts (else γ − 1).
    pub sample_from_anchor: bool,
    /// The drafter carries its own `token_embd` / LM head (else it borrows the target's).
    pub own_embd: bool,
    pub own_output: bool,
    /// Log-SNR conditioning of the draft rows' embeddings, when the drafter has it.
    pub log_snr: Option<LogSnr>,
}

/// The log-SNR range of a conditioned drafter: the anchor slot takes `max`, masked slots `min`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogSnr {
    pub min: f32,
    pub max: f32,
}

impl DrafterMeta {
    /// Tap width: `m × d_t` floats per context row.
    pub fn tap_width(&self) -> u64 {
        self.target_layers.len() as u64 * u64::from(self.target_hidden)
    }

    /// Most drafts one block yields.
    pub fn max_drafts(&self) -> u32 {
        if self.sample_from_anchor {
            self.block_size
        } else {
            self.block_size.saturating_sub(1)
        }
    }

    pub fn from_gguf(g: &Gguf) -> Result<DrafterMeta, HparamsError> {
        let hp = Hparams::from_gguf(g)?;
        let m = &g.metadata;
        let invalid = |what: &str, value: String, why| HparamsError::Invalid {
            what: what.to_string(),
            value,
            why,
        };
        let (block_size, layers, markov_w1, conf, mask) = match hp.arch {
            Arch::Dflash => {
                let layers = int_array(g, "dflash.target_layers")?;
                (
                    m.u32("dflash.block_size")?,
                    layers,
                    "markov_w1.weight",
                    g.tensor("conf_proj.weight").is_some()
                        && m.opt("dflash.has_confidence_head", |m, k| m.bool(k))?
                            .unwrap_or(true),
                    m.opt("tokenizer.ggml.mask_token_id", |m, k| m.u32(k))?,
                )
            }
            Arch::DsparkLegacy => {
                // Legacy taps are HF layer-output ids: the input of layer id + 1.
                let layers = int_array(g, "dspark.dspark.target_layers")?
                    .into_iter()
                    .map(|l| l.saturating_add(1))
                    .collect();
                (
                    m.u32("dspark.dspark.block_size")?,
                    layers,
                    "dspark.markov_head_a.weight",
                    g.tensor("dspark.confidence_head.weight").is_some(),
                    m.opt("dspark.dspark.mask_token_id", |m, k| m.u32(k))?,
                )
            }
            other => {
                return Err(HparamsError::UnsupportedArch {
                    arch: format!("{} (not a DSpark drafter)", other.name()),
                })
            }
        };
        let target_layers = layers
            .iter()
            .map(|&l| {
                u32::try_from(l).map_err(|_| invalid("target layer", l.to_string(), "negative"))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        if target_layers.is_empty() {
            return Err(invalid(
                "target_layers",
                "[]".into(),
                "a drafter taps at least one layer",
            ));
        }
        if block_size == 0 {
            return Err(invalid("block_size", "0".into(), "must be at least 1"));
        }
        let fc = ["fc.weight", "dspark.fc.weight"]
            .iter()
            .find_map(|n| g.tensor(n));
        let target_hidden = match m.opt("dflash.target_hidden_size", |m, k| m.u32(k))? {
            Some(d) => d,
            None => {
                let fc = fc.ok_or_else(|| GgufError::MissingTensor {
                    name: "fc.weight".into(),
                })?;
                let width = fc.shape.first().copied().unwrap_or(0);
                let n = target_layers.len() as u64;
                if width % n != 0 {
                    return Err(invalid(
                        "fc.weight input width",
                        width.to_string(),
                        "not a multiple of the number of taps",
                    ));
                }
                u32::try_from(width / n)
                    .map_err(|_| invalid("fc width", width.to_string(), "too large"))?
            }
        };
        let markov_rank = g
            .tensor(markov_w1)
            .and_then(|t| t.shape.first().copied())
            .map(|r| u32::try_from(r).unwrap_or(0))
            .unwrap_or(0);
        let log_snr = read_log_snr(g, hp.arch)?;
        Ok(DrafterMeta {
            log_snr,
            block_size,
            target_layers,
            target_hidden,
            markov_rank,
            has_confidence: conf,
            mask_token_id: mask,
            sample_from_anchor: m
                .opt("dflash.sample_from_anchor", |m, k| m.bool(k))?
                .unwrap_or(true),
            own_embd: g.tensor("token_embd.weight").is_some(),
            own_output: g.tensor("output.weight").is_some(),
            hp,
        })
    }
}

/// The log-SNR keys of a drafter of `arch`, in the order they are looked up: the
/// double-prefixed legacy key first, then the single-prefixed one.
pub fn log_snr_keys(arch: Arch, key: &str) -> Vec<String> {
    match arch {
        Arch::DsparkLegacy => vec![format!("dspark.dspark.{key}"), format!("dspark.{key}")],
        _ => vec![format!("dflash.{key}")],
    }
}

/// The log-SNR range a drafter declares (`None` without conditioning), checked: both bounds
/// present and finite, `max > min`.
fn read_log_snr(g: &Gguf, arch: Arch) -> Result<Option<LogSnr>, HparamsError> {
    let m = &g.metadata;
    let first = |key: &str| log_snr_keys(arch, key).into_iter().find(|k| m.contains(k));
    let Some(flag) = first("log_snr_conditioning") else {
        return Ok(None);
    };
    if !m.bool(&flag)? {
        return Ok(None);
    }
    let bound = |key: &str| -> Result<(String, f32), HparamsError> {
        let k = first(key).ok_or_else(|| GgufError::MissingKey {
            key: log_snr_keys(arch, key).swap_remove(0),
        })?;
        let v = m.f32(&k)?;
        Ok((k, v))
    };
    let ((min_key, min), (max_key, max)) = (bound("min_log_snr")?, bound("max_log_snr")?);
    if !min.is_finite() || !max.is_finite() || max <= min {
        return Err(HparamsError::Invalid {
            what: format!("log-SNR range ({min_key}, {max_key})"),
            value: format!("min {min}, max {max}"),
            why: "needs finite bounds with max > min",
        });
    }
    Ok(Some(LogSnr { min, max }))
}

/// The drafter-only tensors, by their `dflash` names (docs/DSPARK.md).
pub const DRAFTER_TENSORS: [&str; 6] = [
    "fc.weight",
    "enc.output_norm.weight",
    "markov_w1.weight",
    "markov_w2.weight",
    "conf_proj.weight",
    "conf_proj.bias",
];

/// The name a tensor has in a drafter file of `arch`, given its `dflash` name: the legacy
/// PrismML `dspark` format renames the drafter-only tensors (§2.2); `blk.*`, `token_embd`,
/// `output` and `output_norm` are the same in both.
pub fn tensor_name(arch: Arch, dflash_name: &str) -> &str {
    if arch != Arch::DsparkLegacy {
        return dflash_name;
    }
    match dflash_name {
        "fc.weight" => "dspark.fc.weight",
        "enc.output_norm.weight" => "dspark.hidden_norm.weight",
        "markov_w1.weight" => "dspark.markov_head_a.weight",
        "markov_w2.weight" => "dspark.markov_head_b.weight",
        "conf_proj.weight" => "dspark.confidence_head.weight",
        "conf_proj.bias" => "dspark.confidence_head.bias",
        "log_snr_fc1.weight" => "dspark.log_snr_fc1.weight",
        "log_snr_fc1.bias" => "dspark.log_snr_fc1.bias",
        "log_snr_fc2.weight" => "dspark.log_snr_fc2.weight",
        "log_snr_fc2.bias" => "dspark.log_snr_fc2.bias",
        other => other,
    }
}
