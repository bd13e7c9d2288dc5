//! What a mixture-of-experts model (`qwen3moe`, `qwen35moe`) adds to the backbone: the router's
//! shape and rules, the experts' width and the shared expert's, read as llama.cpp b11434 reads
//! them (`llama_model::load_hparams` for the generic keys, `src/models/qwen3moe.cpp` and
//! `qwen35moe.cpp` for the rest, `build_moe_ffn` in `src/llama-graph.cpp` for the rules).
//!
//! Both architectures hard-code the routing: softmax over all experts, top-k by probability,
//! the k weights divided by `max(Σ, 6.103515625e-5)`, no scale. llama.cpp does not read
//! `expert_weights_scale`, `expert_weights_norm` or `expert_gating_func` for them; a file that
//! declares a different rule in those keys is refused here, naming the key, rather than run
//! with a rule the file says is wrong. Keys llama.cpp honours but the oracle does not run
//! (expert groups, per-layer counts that differ) are refused the same way.

use super::read::{bool_key, f32_key, int_array_key, u32_key};
use super::{MetaError, RefArch, RefHparams};
use crate::gguf::{Gguf, MetaValue, Metadata};

/// The clamp of the top-k weights' sum (the smallest normal f16), `build_moe_ffn`.
pub const WEIGHTS_SUM_MIN: f32 = 1.0 / 16384.0; // 2^-14 = 6.103515625e-5

/// The expert shape of a `qwen3moe` / `qwen35moe` model.
#[derive(Debug, Clone, PartialEq)]
pub struct RefMoe {
    /// `{arch}.expert_count`: experts per layer.
    pub n_expert: u32,
    /// `{arch}.expert_used_count` (k): experts each token runs.
    pub n_expert_used: u32,
    /// `{arch}.expert_feed_forward_length`; absent or 0: `feed_forward_length / k`.
    pub n_ff_exp: u32,
    /// qwen35moe: `{arch}.expert_shared_feed_forward_length` (default `feed_forward_length`),
    /// the shared expert's width where the layer has one (`ffn_up_shexp`).
    pub n_ff_shexp: Option<u32>,
}

/// One value of a key that may be a scalar or a per-layer array whose entries must all be
/// equal (the oracle runs one expert shape for every layer).
fn scalar_or_uniform(m: &Metadata, key: &str) -> Result<Option<u32>, MetaError> {
    if !matches!(m.get(key), Some(MetaValue::Array(_))) {
        return u32_key(m, key);
    }
    let Some(v) = int_array_key(m, key)? else {
        return Ok(None);
    };
    let first = v.first().copied().unwrap_or(0);
    if v.iter().any(|&x| x != first) {
        return Err(MetaError::Invalid {
            key: key.to_string(),
            value: format!("{v:?}"),
            why: "per-layer values that differ are not supported",
        });
    }
    u32::try_from(first)
        .map(Some)
        .map_err(|_| MetaError::Invalid {
            key: key.to_string(),
            value: first.to_string(),
            why: "not in 0..=u32::MAX",
        })
}

impl RefMoe {
    /// Read the expert keys of the MoE file `g` whose backbone `hp` was read from it.
    pub fn from_gguf(g: &Gguf, hp: &RefHparams) -> Result<RefMoe, MetaError> {
        if !matches!(hp.arch, RefArch::Qwen3Moe | RefArch::Qwen35Moe) {
            return Err(MetaError::Invalid {
                key: "general.architecture".into(),
                value: hp.arch.name().into(),
                why: "not a mixture-of-experts architecture (qwen3moe, qwen35moe)",
            });
        }
        let m = &g.metadata;
        let p = hp.arch.name();
        let key = |k: &str| format!("{p}.{k}");
        let invalid = |k: &str, value: String, why| MetaError::Invalid {
            key: key(k),
            value,
            why,
        };
        // llama.cpp throws "n_expert must be > 0" / "n_expert_used must be > 0".
        let n_expert = u32_key(m, &key("expert_count"))?.unwrap_or(0);
        super::positive(&key("expert_count"), n_expert)?;
        let n_expert_used = scalar_or_uniform(m, &key("expert_used_count"))?.unwrap_or(0);
        super::positive(&key("expert_used_count"), n_expert_used)?;
        if n_expert_used > n_expert {
            return Err(invalid(
                "expert_used_count",
                format!("{n_expert_used} (expert_count {n_expert})"),
                "more experts used than there are",
            ));
        }
        let n_ff_exp = match scalar_or_uniform(m, &key("expert_feed_forward_length"))? {
            Some(f) if f > 0 => f,
            _ => hp.n_ff / n_expert_used,
        };
        super::positive(&key("expert_feed_forward_length"), n_ff_exp)?;
        let n_ff_shexp = match hp.arch {
            RefArch::Qwen35Moe => Some(
                match u32_key(m, &key("expert_shared_feed_forward_length"))? {
                    Some(f) if f > 0 => f,
                    _ => hp.n_ff,
                },
            ),
            _ => None,
        };
        // Routing rules the file may declare: only llama.cpp's hard-coded one is accepted.
        if let Some(groups) = u32_key(m, &key("expert_group_count"))? {
            if groups > 1 {
                return Err(invalid(
                    "expert_group_count",
                    groups.to_string(),
                    "group-limited routing is not supported",
                ));
            }
        }
        if let Some(scale) = f32_key(m, &key("expert_weights_scale"))? {
            if scale != 0.0 && scale != 1.0 {
                return Err(invalid(
                    "expert_weights_scale",
                    scale.to_string(),
                    "llama.cpp does not scale this architecture's expert weights",
                ));
            }
        }
        if bool_key(m, &key("expert_weights_norm"))? == Some(false) {
            return Err(invalid(
                "expert_weights_norm",
                "false".into(),
                "llama.cpp always renormalises this architecture's top-k weights",
            ));
        }
        // llama.cpp's enum: 1 softmax, 2 sigmoid, 3 softmax over the k, 4 sqrt-softplus.
        if let Some(f) = u32_key(m, &key("expert_gating_func"))? {
            if f != 1 {
                return Err(invalid(
                    "expert_gating_func",
                    f.to_string(),
                    "llama.cpp routes this architecture with softmax (1)",
                ));
            }
        }
        if let Some(n) = u32_key(m, &key("expert_shared_count"))? {
            let most = u32::from(hp.arch == RefArch::Qwen35Moe);
            if n > most {
                return Err(invalid(
                    "expert_shared_count",
                    n.to_string(),
                    "qwen35moe has at most one shared expert, qwen3moe none",
                ));
            }
        }
        Ok(RefMoe {
            n_expert,
            n_expert_used,
            n_ff_exp,
            n_ff_shexp,
        })
    }
}
