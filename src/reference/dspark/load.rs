//! Loading a drafter next to its target, and every check between the two, before any weight is
//! dequantized: taps within the target's layers (`0..=n_layer`), declared tap width = the
//! target's hidden size, `fc` input width = `m · d_t`, Markov rows (and any own embedding or
//! LM-head rows) = the target's vocabulary, both Markov tensors of one rank, `conf_proj` input
//! width = `d + R`, a mask id inside the vocabulary, and the drafter hidden size = the target's
//! when it borrows the target's embeddings, the drafter's declared vocabulary = the target's LM
//! head rows (a vocabulary-less drafter, `tokenizer.ggml.model = none`, declares only its size),
//! and for a log-SNR conditioned drafter its `log_snr_fc1` `{128, d}` / `log_snr_fc2` `{d, d}`
//! with their biases (the range is checked with the metadata). Drafters the oracle does not model are refused
//! with [`DsparkRefError::Unsupported`]: a causal block, sliding windows, logit soft-capping, tensor scales, attention sinks, the bonus-anchor
//! layout, `head_dim_v != head_dim`.

use std::collections::BTreeMap;

use super::snr::{self, SnrWeights};
use super::{DrafterWeights, DsparkRefError, RefDrafter};
use crate::gguf::{GgmlType, Gguf, GgufError, GgufFile, TensorInfo};
use crate::reference::forward::{LayerWeights, RefKvCache, Tensors};
use crate::reference::meta::{drafter_tensor as tensor_name, RefArch, RefDrafterMeta, RefHparams};
use crate::reference::ops::RopeRef;

/// Metadata keys (after the arch prefix: `dflash.` or `dspark.dspark.`) and tensors the oracle
/// does not model, with what each means.
const UNSUPPORTED_KEYS: [(&str, &str); 4] = [
    ("attention.sliding_window", "sliding-window attention"),
    ("final_logit_softcapping", "logit soft-capping"),
    ("logit_scale", "logit scale"),
    ("decoder_arch", "decoder architecture"),
];
const UNSUPPORTED_TENSORS: [&str; 4] = [
    "fc.scale",
    "markov_w2.scale",
    "d2t",
    "blk.0.attn_sinks.weight",
];

impl RefDrafter {
    /// Load `drafter` for `target`, its cache rounding K/V through `kv_type` (F32, F16, Q8_0 or
    /// Q4_0; F16 mirrors the default GPU cache).
    pub fn load(
        drafter: &GgufFile,
        target: &GgufFile,
        kv_type: GgmlType,
    ) -> Result<RefDrafter, DsparkRefError> {
        RefDrafter::from_gguf(
            &drafter.gguf,
            drafter.bytes(),
            &target.gguf,
            target.bytes(),
            kv_type,
        )
    }

    /// As [`Self::load`], from parsed files and the bytes each was parsed from.
    pub fn from_gguf(
        drafter: &Gguf,
        drafter_bytes: &[u8],
        target: &Gguf,
        target_bytes: &[u8],
        kv_type: GgmlType,
    ) -> Result<RefDrafter, DsparkRefError> {
        let thp = RefHparams::from_gguf(target)?;
        if thp.arch.is_drafter() {
            return Err(DsparkRefError::TargetIsDrafter {
                arch: thp.arch.name(),
            });
        }
        let meta = RefDrafterMeta::from_gguf(drafter)?;
        refuse_unsupported(drafter, &meta)?;
        let hp = &meta.hp;
        let arch = hp.arch;
        let n_vocab = thp.n_vocab;
        let tensor = |name: &str| -> Result<&TensorInfo, DsparkRefError> {
            let name = tensor_name(arch, name);
            drafter.tensor(name).ok_or_else(|| {
                GgufError::MissingTensor {
                    name: name.to_string(),
                }
                .into()
            })
        };

        // ---- the drafter against the target ---------------------------------------------
        if let Some(&tap) = meta.target_layers.iter().find(|&&t| t > thp.n_layer) {
            return Err(DsparkRefError::TapOutOfRange {
                tap,
                n_layer: thp.n_layer,
            });
        }
        let fc = tensor("fc.weight")?;
        let expected = meta.target_layers.len() as u64 * u64::from(thp.n_embd);
        if fc.row_len() != expected {
            return Err(DsparkRefError::FcWidth {
                tensor: fc.name.clone(),
                found: fc.row_len(),
                taps: meta.target_layers.len(),
                target_hidden: thp.n_embd,
                expected,
            });
        }
        if meta.target_hidden != thp.n_embd {
            return Err(DsparkRefError::TargetHidden {
                drafter: meta.target_hidden,
                target: thp.n_embd,
            });
        }
        let markov = check_markov(drafter, arch, n_vocab)?;
        let rank = markov.as_ref().map_or(0, |(r, _, _)| *r);
        if meta.has_confidence {
            let conf = tensor("conf_proj.weight")?;
            let expected = u64::from(hp.n_embd) + u64::from(rank);
            if conf.row_len() != expected || conf.n_rows() != 1 {
                return Err(DsparkRefError::ConfWidth {
                    tensor: conf.name.clone(),
                    found: conf.row_len(),
                    d: hp.n_embd,
                    rank,
                    expected,
                });
            }
        }
        for name in ["token_embd.weight", "output.weight"] {
            if let Some(t) = drafter.tensor(name) {
                vocab_rows(t, n_vocab)?;
            }
        }
        // A vocabulary-less drafter declares only its size: it must be the target's.
        let lm_rows = ["output.weight", "token_embd.weight"]
            .iter()
            .find_map(|n| target.tensor(n))
            .map_or(u64::from(n_vocab), TensorInfo::n_rows);
        if u64::from(hp.n_vocab) != lm_rows {
            return Err(DsparkRefError::VocabSize {
                drafter: hp.n_vocab,
                target: lm_rows,
            });
        }
        let borrows = !meta.own_embd || !meta.own_output;
        if borrows && hp.n_embd != thp.n_embd {
            return Err(DsparkRefError::EmbdWidth {
                drafter: hp.n_embd,
                target: thp.n_embd,
            });
        }
        let mask_token = meta.mask_token_id.ok_or(DsparkRefError::MissingMask)?;
        if mask_token >= n_vocab {
            return Err(DsparkRefError::MaskOutOfRange {
                id: mask_token,
                n_vocab,
            });
        }
        // The cache type, checked the way the target's oracle cache checks it.
        RefKvCache::new(1, hp.k_dim() as usize, hp.v_dim() as usize, kv_type)?;

        // ---- weights -----------------------------------------------------------------------
        let dt = Tensors {
            g: drafter,
            bytes: drafter_bytes,
        };
        let tt = Tensors {
            g: target,
            bytes: target_bytes,
        };
        let (d, v) = (hp.n_embd as usize, n_vocab as usize);
        let name = |n: &str| tensor_name(arch, n).to_string();
        let mut layers = Vec::with_capacity(hp.n_layer as usize);
        for il in 0..hp.n_layer {
            layers.push(load_layer(&dt, hp, il)?);
        }
        let token_embd = match dt.opt("token_embd.weight", d, v)? {
            Some(e) => e,
            None => tt.get("token_embd.weight", d, v)?,
        };
        let lm_head = match dt.opt("output.weight", d, v)? {
            Some(o) => Some(o),
            None => match tt.opt("output.weight", d, v)? {
                Some(o) => Some(o),
                // A tied target: its LM head is its token_embd, which the drafter may not use.
                None if meta.own_embd => Some(tt.get("token_embd.weight", d, v)?),
                None => None,
            },
        };
        let markov = match markov {
            Some((r, w1, w2)) => Some((
                dt.get(&w1, r as usize, v)?, // [V, R]
                dt.get(&w2, r as usize, v)?, // [V, R]
            )),
            None => None,
        };
        let conf = if meta.has_confidence {
            let w = dt.get(&name("conf_proj.weight"), d + rank as usize, 1)?;
            let b = dt.opt(&name("conf_proj.bias"), 1, 1)?;
            Some((w, b.and_then(|b| b.first().copied()).unwrap_or(0.0)))
        } else {
            None
        };
        let log_snr = match meta.log_snr {
            Some((min, max)) => {
                let w = SnrWeights {
                    fc1: dt.get(&name("log_snr_fc1.weight"), snr::FEATURES, d)?,
                    b1: dt.get(&name("log_snr_fc1.bias"), d, 1)?,
                    fc2: dt.get(&name("log_snr_fc2.weight"), d, d)?,
                    b2: dt.get(&name("log_snr_fc2.bias"), d, 1)?,
                };
                Some(snr::rows(&w, meta.block_size as usize, d, min, max))
            }
            None => None,
        };
        let weights = DrafterWeights {
            log_snr,
            fc: dt.get(&name("fc.weight"), expected as usize, d)?,
            enc_norm: dt.get(&name("enc.output_norm.weight"), d, 1)?,
            layers,
            output_norm: dt.get("output_norm.weight", d, 1)?,
            token_embd,
            lm_head,
            markov,
            conf,
        };
        let rope = RopeRef {
            n_rot: hp.n_rot as usize,
            neox: true,
            freq_base: hp.rope_base,
            freq_scale: hp.rope_freq_scale,
        };
        Ok(RefDrafter {
            meta,
            weights,
            rope,
            mask_token,
            n_vocab,
            kv_type,
            cache: BTreeMap::new(),
        })
    }
}

/// Refuse what the oracle does not model (see the module docs).
fn refuse_unsupported(g: &Gguf, meta: &RefDrafterMeta) -> Result<(), DsparkRefError> {
    let hp = &meta.hp;
    let unsupported = |what, value: String| Err(DsparkRefError::Unsupported { what, value });
    let prefix = match hp.arch {
        RefArch::DsparkLegacy => "dspark.dspark.",
        _ => "dflash.",
    };
    let m = &g.metadata;
    let causal_key = format!("{prefix}attention.causal");
    if m.opt(&causal_key, |m, k| m.bool(k)).unwrap_or(Some(true)) == Some(true) {
        return unsupported("causal block attention", format!("{causal_key} = true"));
    }
    for (key, what) in UNSUPPORTED_KEYS {
        let key = format!("{prefix}{key}");
        if m.contains(&key) {
            return unsupported(what, format!("key {key}"));
        }
    }
    for t in UNSUPPORTED_TENSORS {
        let legacy = format!("dspark.{t}");
        if g.tensor(t).is_some() || g.tensor(&legacy).is_some() {
            return unsupported("tensor", t.to_string());
        }
    }
    if !meta.sample_from_anchor {
        return unsupported(
            "block layout",
            "bonus-anchor (sample_from_anchor = false)".into(),
        );
    }
    // Qwen3 blocks: per-head q/k RMSNorm in every layer (layer 0 stands for all here; a
    // missing one in a later layer fails at load as a missing tensor).
    let qk_norm = g.tensor("blk.0.attn_q_norm.weight").is_some();
    if hp.head_dim_v != hp.head_dim || !hp.n_rot.is_multiple_of(2) || !qk_norm {
        return unsupported(
            "head shape",
            format!(
                "head_dim {} head_dim_v {} n_rot {} q/k norms {qk_norm}",
                hp.head_dim, hp.head_dim_v, hp.n_rot
            ),
        );
    }
    Ok(())
}

/// The Markov head's rank and tensor names, checked: both tensors or neither, one rank, one
/// row per token of the target.
fn check_markov(
    g: &Gguf,
    arch: RefArch,
    n_vocab: u32,
) -> Result<Option<(u32, String, String)>, DsparkRefError> {
    let (n1, n2) = (
        tensor_name(arch, "markov_w1.weight"),
        tensor_name(arch, "markov_w2.weight"),
    );
    let (w1, w2) = match (g.tensor(n1), g.tensor(n2)) {
        (None, None) => return Ok(None),
        (Some(a), Some(b)) => (a, b),
        (a, _) => {
            let (present, missing) = if a.is_some() { (n1, n2) } else { (n2, n1) };
            return Err(DsparkRefError::MarkovIncomplete {
                present: present.to_string(),
                missing: missing.to_string(),
            });
        }
    };
    vocab_rows(w1, n_vocab)?;
    vocab_rows(w2, n_vocab)?;
    let rank = u32::try_from(w1.row_len()).map_err(|_| DsparkRefError::Unsupported {
        what: "Markov rank",
        value: w1.row_len().to_string(),
    })?;
    if rank == 0 {
        return Err(DsparkRefError::Unsupported {
            what: "Markov rank",
            value: format!("0 ({n1} has empty rows)"),
        });
    }
    if w2.row_len() != u64::from(rank) {
        return Err(DsparkRefError::MarkovRank {
            tensor: n2.to_string(),
            found: w2.row_len(),
            w1: n1.to_string(),
            rank,
        });
    }
    Ok(Some((rank, n1.to_string(), n2.to_string())))
}

/// `t` has one row per token of the target's vocabulary.
fn vocab_rows(t: &TensorInfo, n_vocab: u32) -> Result<(), DsparkRefError> {
    if t.n_rows() != u64::from(n_vocab) {
        return Err(DsparkRefError::VocabRows {
            tensor: t.name.clone(),
            rows: t.n_rows(),
            target_vocab: n_vocab,
        });
    }
    Ok(())
}

/// Drafter layer `il`: a Qwen3 block (q/k norms, no biases).
fn load_layer(t: &Tensors<'_>, hp: &RefHparams, il: u32) -> Result<LayerWeights, DsparkRefError> {
    let name = |s: &str| format!("blk.{il}.{s}");
    let d = hp.n_embd as usize;
    let (q_dim, k_dim, v_dim) = (
        hp.q_dim() as usize,
        hp.k_dim() as usize,
        hp.v_dim() as usize,
    );
    let (n_ff, head_dim) = (hp.n_ff as usize, hp.head_dim as usize);
    Ok(LayerWeights {
        attn_norm: t.get(&name("attn_norm.weight"), d, 1)?,
        wq: t.get(&name("attn_q.weight"), d, q_dim)?,
        wk: t.get(&name("attn_k.weight"), d, k_dim)?,
        wv: t.get(&name("attn_v.weight"), d, v_dim)?,
        bq: None,
        bk: None,
        bv: None,
        q_norm: Some(t.get(&name("attn_q_norm.weight"), head_dim, 1)?),
        k_norm: Some(t.get(&name("attn_k_norm.weight"), head_dim, 1)?),
        wo: t.get(&name("attn_output.weight"), q_dim, d)?,
        ffn_norm: t.get(&name("ffn_norm.weight"), d, 1)?,
        ffn_gate: t.get(&name("ffn_gate.weight"), d, n_ff)?,
        ffn_up: t.get(&name("ffn_up.weight"), d, n_ff)?,
        ffn_down: t.get(&name("ffn_down.weight"), n_ff, d)?,
        moe: None,
    })
}
