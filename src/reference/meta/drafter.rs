//! What a DSpark drafter declares about itself, read by the oracle from either GGUF format:
//!
//! | what            | `dflash`                                   | legacy `dspark`                      |
//! |-----------------|--------------------------------------------|--------------------------------------|
//! | block size γ    | `dflash.block_size`                        | `dspark.dspark.block_size`           |
//! | taps            | `dflash.target_layers` (layer inputs)      | `dspark.dspark.target_layers` + 1    |
//! | tap width `d_t` | `dflash.target_hidden_size`, else `fc` / m | `dspark.fc.weight` width / m         |
//! | confidence head | `conf_proj.weight` and `dflash.has_confidence_head` (default true) | `dspark.confidence_head.weight` |
//! | mask token      | `tokenizer.ggml.mask_token_id`             | `dspark.dspark.mask_token_id`        |
//! | anchor-first    | `dflash.sample_from_anchor` (default true) | always                               |
//! | log-SNR         | `dflash.log_snr_conditioning`, `dflash.min_log_snr`, `dflash.max_log_snr` | `dspark.dspark.*` (or `dspark.*`) |
//!
//! Legacy taps are HF layer-output ids; the input of layer `i + 1` is the output of layer `i`,
//! so the oracle adds one (tap −1, the embeddings, becomes 0).

use super::read::{bool_key, f32_key, int_array_key, u32_key};
use super::{MetaError, RefArch, RefHparams};
use crate::gguf::Gguf;

/// A drafter's declarations on top of its backbone.
#[derive(Debug, Clone, PartialEq)]
pub struct RefDrafterMeta {
    /// The drafter's backbone (`dflash.*` or `dspark.*` keys).
    pub hp: RefHparams,
    /// γ: slots per block.
    pub block_size: u32,
    /// Tapped target layers, layer-input convention (`n_layer` of the target = its last
    /// layer's output, before the final norm).
    pub target_layers: Vec<u32>,
    /// `d_t`: the width of one tap (the target's hidden size).
    pub target_hidden: u32,
    /// The Markov head's rank `R` (the row length of its first tensor; 0 without one).
    pub markov_rank: u32,
    pub has_confidence: bool,
    pub mask_token_id: Option<u32>,
    /// Anchor-first block: slot 0 holds the anchor and γ slots give γ drafts.
    pub sample_from_anchor: bool,
    /// The drafter has its own `token_embd.weight` / `output.weight`.
    pub own_embd: bool,
    pub own_output: bool,
    /// Log-SNR conditioning: `(min_log_snr, max_log_snr)`, finite with `max > min`; `None`
    /// for a drafter without it.
    pub log_snr: Option<(f32, f32)>,
}

impl RefDrafterMeta {
    /// Floats per context row: `m · d_t` (m taps).
    pub fn tap_width(&self) -> u64 {
        self.target_layers.len() as u64 * u64::from(self.target_hidden)
    }

    /// Read what the drafter `g` declares.
    pub fn from_gguf(g: &Gguf) -> Result<RefDrafterMeta, MetaError> {
        let hp = RefHparams::from_gguf(g)?;
        let m = &g.metadata;
        let legacy = match hp.arch {
            RefArch::Dflash => false,
            RefArch::DsparkLegacy => true,
            other => {
                return Err(MetaError::NotDrafter {
                    arch: other.name().to_string(),
                })
            }
        };
        let own = |k: &str| {
            if legacy {
                format!("dspark.dspark.{k}")
            } else {
                format!("dflash.{k}")
            }
        };
        let block_key = own("block_size");
        let block_size = u32_key(m, &block_key)?.ok_or(MetaError::Missing {
            key: block_key.clone(),
        })?;
        if block_size == 0 {
            return Err(MetaError::Invalid {
                key: block_key,
                value: "0".into(),
                why: "a block has at least one slot",
            });
        }

        let taps_key = own("target_layers");
        let stored = int_array_key(m, &taps_key)?.ok_or(MetaError::Missing {
            key: taps_key.clone(),
        })?;
        if stored.is_empty() {
            return Err(MetaError::Invalid {
                key: taps_key,
                value: "[]".into(),
                why: "a drafter taps at least one layer",
            });
        }
        let mut target_layers = Vec::with_capacity(stored.len());
        for &s in &stored {
            let tap = if legacy { s.saturating_add(1) } else { s };
            target_layers.push(u32::try_from(tap).map_err(|_| MetaError::Invalid {
                key: taps_key.clone(),
                value: format!("{stored:?}"),
                why: "a tap that is not a layer (negative or past u32)",
            })?);
        }

        let fc_name = drafter_tensor(hp.arch, "fc.weight");
        let declared_hidden = if legacy {
            None
        } else {
            u32_key(m, "dflash.target_hidden_size")?
        };
        let target_hidden = match declared_hidden {
            Some(d) => d,
            None => {
                let fc = g.tensor(fc_name).ok_or(MetaError::Missing {
                    key: format!("dflash.target_hidden_size (or tensor {fc_name})"),
                })?;
                let width = fc.shape.first().copied().unwrap_or(0);
                let n_taps = target_layers.len() as u64;
                if width % n_taps != 0 {
                    return Err(MetaError::Invalid {
                        key: format!("{fc_name} input width"),
                        value: width.to_string(),
                        why: "not a whole multiple of the number of taps",
                    });
                }
                u32::try_from(width / n_taps).map_err(|_| MetaError::Invalid {
                    key: format!("{fc_name} input width"),
                    value: width.to_string(),
                    why: "a tap wider than u32 counts",
                })?
            }
        };

        let w1_name = drafter_tensor(hp.arch, "markov_w1.weight");
        let markov_rank = match g.tensor(w1_name) {
            None => 0,
            Some(t) => {
                let r = t.shape.first().copied().unwrap_or(0);
                u32::try_from(r).map_err(|_| MetaError::Invalid {
                    key: format!("{w1_name} row length"),
                    value: r.to_string(),
                    why: "a rank past u32",
                })?
            }
        };

        let conf_present = g
            .tensor(drafter_tensor(hp.arch, "conf_proj.weight"))
            .is_some();
        let has_confidence = if legacy {
            conf_present
        } else {
            conf_present && bool_key(m, "dflash.has_confidence_head")?.unwrap_or(true)
        };
        let mask_key = if legacy {
            "dspark.dspark.mask_token_id"
        } else {
            "tokenizer.ggml.mask_token_id"
        };
        let sample_from_anchor = if legacy {
            true
        } else {
            bool_key(m, "dflash.sample_from_anchor")?.unwrap_or(true)
        };

        let log_snr = log_snr(m, legacy)?;
        Ok(RefDrafterMeta {
            log_snr,
            block_size,
            target_layers,
            target_hidden,
            markov_rank,
            has_confidence,
            mask_token_id: u32_key(m, mask_key)?,
            sample_from_anchor,
            own_embd: g.tensor("token_embd.weight").is_some(),
            own_output: g.tensor("output.weight").is_some(),
            hp,
        })
    }
}

/// The log-SNR range the drafter declares, if it is conditioned. Legacy keys are read
/// double-prefixed (`dspark.dspark.`), else single-prefixed (`dspark.`).
fn log_snr(m: &crate::gguf::Metadata, legacy: bool) -> Result<Option<(f32, f32)>, MetaError> {
    let prefixes: &[&str] = if legacy {
        &["dspark.dspark.", "dspark."]
    } else {
        &["dflash."]
    };
    let key = |k: &str| {
        prefixes
            .iter()
            .map(|p| format!("{p}{k}"))
            .find(|full| m.contains(full))
            .unwrap_or_else(|| format!("{}{k}", prefixes[0]))
    };
    if bool_key(m, &key("log_snr_conditioning"))? != Some(true) {
        return Ok(None);
    }
    let (min_key, max_key) = (key("min_log_snr"), key("max_log_snr"));
    let min = f32_key(m, &min_key)?.ok_or(MetaError::Missing {
        key: min_key.clone(),
    })?;
    let max = f32_key(m, &max_key)?.ok_or(MetaError::Missing {
        key: max_key.clone(),
    })?;
    if !min.is_finite() || !max.is_finite() || max <= min {
        return Err(MetaError::Invalid {
            key: format!("{min_key} / {max_key}"),
            value: format!("{min} / {max}"),
            why: "a log-SNR range needs finite bounds with max > min",
        });
    }
    Ok(Some((min, max)))
}

/// The name in a drafter file of `arch` of the tensor whose `dflash` name is `dflash_name`.
/// Only the drafter-only tensors differ in the legacy format; `blk.*`, `token_embd`,
/// `output` and `output_norm` keep their names.
pub fn drafter_tensor(arch: RefArch, dflash_name: &str) -> &str {
    if arch != RefArch::DsparkLegacy {
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
