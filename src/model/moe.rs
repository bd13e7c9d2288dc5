//! Mixture-of-experts models (`qwen3moe`, `qwen35moe`): the expert hyperparameters, read as
//! llama.cpp b11434 reads them, and one layer's router and experts uploaded to the device.
//!
//! Keys (`{arch}.` prefix): `expert_count` (E), `expert_used_count` (k; a per-layer array must
//! be uniform), `expert_feed_forward_length` (f; absent or 0: `feed_forward_length / k`),
//! qwen35moe's `expert_shared_feed_forward_length` (default `feed_forward_length`). llama.cpp
//! hard-codes the routing of both architectures (softmax over E, top-k, weights divided by
//! `max(Σ, 6.103515625e-5)`, no scale: `src/models/qwen3moe.cpp`, `qwen35moe.cpp`,
//! `build_moe_ffn` in `src/llama-graph.cpp`) and does not read `expert_weights_scale`,
//! `expert_weights_norm` or `expert_gating_func` for them; a file whose values for those keys
//! contradict that rule, or that asks for group-limited routing (`expert_group_count > 1`,
//! which llama.cpp would apply) or more shared experts than the architecture has, is refused
//! naming the key.
//!
//! Tensors of layer `il` (ggml order): `ffn_gate_inp` `[d, E]`, `ffn_gate_exps` /
//! `ffn_up_exps` `[d, f, E]`, `ffn_down_exps` `[f, d, E]`; qwen35moe adds, where
//! `ffn_up_shexp` exists, `ffn_{gate,up}_shexp` `[d, f_sh]`, `ffn_down_shexp` `[f_sh, d]` and
//! `ffn_gate_inp_shexp` `[d]`. Any other routing or expert tensor of the layer (merged
//! `ffn_gate_up_exps`, `exp_probs_b`, biases, per-expert scales) is refused by name.

use crate::gguf::{Gguf, GgufFile, MetaValue};
use crate::gpu::GpuContext;
use crate::kernels::matmul::GpuWeight;
use crate::kernels::ops::moe::{MoeGpuWeights, MAX_EXPERT};
use crate::Result;

use super::hparams::{int_array, HparamsError};

/// The expert shape of a MoE model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoeHparams {
    pub n_expert: u32,
    pub n_expert_used: u32,
    /// Width of one routed expert.
    pub n_ff_exp: u32,
    /// qwen35moe: the shared expert's width (used where a layer has `ffn_up_shexp`).
    pub n_ff_shexp: Option<u32>,
}

/// Tensor-name fragments of routing and expert tensors.
const EXPERT_MARKS: [&str; 3] = ["exp", "gate_inp", "chexps"];

fn invalid(what: String, value: String, why: &'static str) -> HparamsError {
    HparamsError::Invalid { what, value, why }
}

/// `key` as one u32: a scalar, or a per-layer array whose entries are all equal.
fn uniform_u32(g: &Gguf, key: &str) -> std::result::Result<Option<u32>, HparamsError> {
    let m = &g.metadata;
    let value = match m.get(key) {
        None => return Ok(None),
        Some(MetaValue::Array(_)) => {
            let v = int_array(g, key)?;
            let first = v.first().copied().unwrap_or(0);
            if v.iter().any(|&x| x != first) {
                let why = "per-layer values that differ are not supported";
                return Err(invalid(key.into(), format!("{v:?}"), why));
            }
            first
        }
        Some(_) => i64::from(m.u32(key)?),
    };
    u32::try_from(value)
        .map(Some)
        .map_err(|_| invalid(key.into(), value.to_string(), "not in 0..=u32::MAX"))
}

impl MoeHparams {
    /// Reads the expert keys of `g` (architecture prefix `p`, `feed_forward_length` `n_ff`);
    /// `shared`: the architecture has a shared expert (qwen35moe).
    pub fn from_gguf(
        g: &Gguf,
        p: &str,
        n_ff: u32,
        shared: bool,
    ) -> std::result::Result<MoeHparams, HparamsError> {
        let m = &g.metadata;
        let key = |k: &str| format!("{p}.{k}");
        let n_expert = m.opt(&key("expert_count"), |m, k| m.u32(k))?.unwrap_or(0);
        let n_expert_used = uniform_u32(g, &key("expert_used_count"))?.unwrap_or(0);
        if n_expert == 0 || n_expert_used == 0 || n_expert_used > n_expert {
            return Err(invalid(
                format!("{} / {}", key("expert_count"), key("expert_used_count")),
                format!("{n_expert} / {n_expert_used}"),
                "a MoE model needs experts, and uses at least one and at most all",
            ));
        }
        if n_expert > MAX_EXPERT {
            let why = "more experts than the router kernel handles (512)";
            return Err(invalid(key("expert_count"), n_expert.to_string(), why));
        }
        let n_ff_exp = match uniform_u32(g, &key("expert_feed_forward_length"))? {
            Some(f) if f > 0 => f,
            _ => n_ff / n_expert_used,
        };
        if n_ff_exp == 0 || n_ff_exp % 4 != 0 {
            let why = "the expert width must be a non-zero multiple of 4";
            return Err(invalid(
                key("expert_feed_forward_length"),
                n_ff_exp.to_string(),
                why,
            ));
        }
        let n_ff_shexp = match shared {
            true => Some(
                match m.opt(&key("expert_shared_feed_forward_length"), |m, k| m.u32(k))? {
                    Some(f) if f > 0 => f,
                    _ => n_ff,
                },
            ),
            false => None,
        };
        if let Some(n) = m.opt(&key("expert_group_count"), |m, k| m.u32(k))? {
            if n > 1 {
                let why = "group-limited expert routing is not supported";
                return Err(invalid(key("expert_group_count"), n.to_string(), why));
            }
        }
        if let Some(s) = m.opt(&key("expert_weights_scale"), |m, k| m.f32(k))? {
            if s != 0.0 && s != 1.0 {
                let why = "llama.cpp does not scale this architecture's expert weights";
                return Err(invalid(key("expert_weights_scale"), s.to_string(), why));
            }
        }
        if let Some(MetaValue::Bool(false)) = m.get(&key("expert_weights_norm")) {
            let why = "llama.cpp always renormalises this architecture's top-k weights";
            return Err(invalid(key("expert_weights_norm"), "false".into(), why));
        }
        // llama.cpp's enum: 1 softmax, 2 sigmoid, 3 softmax over the k, 4 sqrt-softplus.
        if let Some(f) = m.opt(&key("expert_gating_func"), |m, k| m.u32(k))? {
            if f != 1 {
                let why = "llama.cpp routes this architecture with softmax (1)";
                return Err(invalid(key("expert_gating_func"), f.to_string(), why));
            }
        }
        if let Some(n) = m.opt(&key("expert_shared_count"), |m, k| m.u32(k))? {
            if n > u32::from(shared) {
                let why = "qwen35moe has at most one shared expert, qwen3moe none";
                return Err(invalid(key("expert_shared_count"), n.to_string(), why));
            }
        }
        Ok(MoeHparams {
            n_expert,
            n_expert_used,
            n_ff_exp,
            n_ff_shexp,
        })
    }

    /// The MoE block's scratch buffers (`kernels::ops::moe::MoeScratch`, its names) as f32s
    /// per token row, for hidden size `d`: router logits `E`, ids and weights `k`, expert
    /// gate / up / activation `k · f` each, expert outputs `k · d`, and with a shared expert
    /// its gate / up / activation `f_sh` each, output `d` and gate logit 1.
    pub fn scratch_widths(&self, d: u32) -> Vec<(&'static str, u64)> {
        let (e, k, f) = (
            u64::from(self.n_expert),
            u64::from(self.n_expert_used),
            u64::from(self.n_ff_exp),
        );
        let mut v = vec![
            ("logits", e),
            ("ids", k),
            ("weights", k),
            ("gate", k * f),
            ("up", k * f),
            ("h", k * f),
            ("y", k * u64::from(d)),
        ];
        if let Some(sf) = self.n_ff_shexp {
            let sf = u64::from(sf);
            v.extend([
                ("shexp_gate", sf),
                ("shexp_up", sf),
                ("shexp_h", sf),
                ("shexp_out", u64::from(d)),
                ("shexp_logit", 1),
            ]);
        }
        v
    }

    /// Checks layer `il`'s routing and expert tensors: the names this runtime reads, with their
    /// shapes, and no other; returns whether the layer has a shared expert.
    pub fn check_layer(
        &self,
        g: &Gguf,
        il: u32,
        d: u32,
    ) -> std::result::Result<bool, HparamsError> {
        let name = |s: &str| format!("blk.{il}.{s}");
        let (d, e, f) = (
            u64::from(d),
            u64::from(self.n_expert),
            u64::from(self.n_ff_exp),
        );
        let mut want = vec![
            (name("ffn_gate_inp.weight"), vec![d, e]),
            (name("ffn_gate_exps.weight"), vec![d, f, e]),
            (name("ffn_up_exps.weight"), vec![d, f, e]),
            (name("ffn_down_exps.weight"), vec![f, d, e]),
        ];
        let shared = match self.n_ff_shexp {
            Some(sf) if g.tensor(&name("ffn_up_shexp.weight")).is_some() => {
                let sf = u64::from(sf);
                want.push((name("ffn_gate_shexp.weight"), vec![d, sf]));
                want.push((name("ffn_up_shexp.weight"), vec![d, sf]));
                want.push((name("ffn_down_shexp.weight"), vec![sf, d]));
                want.push((name("ffn_gate_inp_shexp.weight"), vec![d]));
                true
            }
            _ => false,
        };
        for (n, shape) in &want {
            let t = g.tensor(n).ok_or_else(|| {
                HparamsError::Metadata(crate::gguf::GgufError::MissingTensor { name: n.clone() })
            })?;
            let mut found = t.shape.clone();
            while found.len() > shape.len() && found.last() == Some(&1) {
                found.pop();
            }
            if &found != shape {
                return Err(HparamsError::TensorShape {
                    tensor: n.clone(),
                    expected: shape.clone(),
                    found: t.shape.clone(),
                });
            }
        }
        let prefix = format!("blk.{il}.");
        let other = g.tensors.iter().find(|t| {
            t.name.starts_with(&prefix)
                && EXPERT_MARKS.iter().any(|m| t.name.contains(m))
                && !want.iter().any(|(n, _)| n == &t.name)
        });
        if let Some(t) = other {
            let why = "an expert or routing tensor this runtime does not run";
            return Err(invalid(t.name.clone(), format!("{:?}", t.shape), why));
        }
        Ok(shared)
    }
}

/// Uploads layer `il`'s router and experts (each expert tensor as one weight of `E · rows`
/// rows, split by whole experts where a binding limit demands), shapes checked first; a tensor
/// for which `host(name)` holds goes to host memory the kernels read directly
/// (`memory::placement`).
pub fn upload_layer(
    ctx: &GpuContext,
    file: &GgufFile,
    il: u32,
    d: u32,
    hp: &MoeHparams,
    host: &dyn Fn(&str) -> bool,
) -> Result<MoeGpuWeights> {
    let shared = hp.check_layer(&file.gguf, il, d)?;
    let up = |suffix: &str| -> Result<GpuWeight> {
        let name = format!("blk.{il}.{suffix}.weight");
        let (t, data) = file.tensor_data(&name)?;
        // A 3-D expert tensor [K, N, E] as [K, N · E], split by whole experts.
        let group = if t.shape.len() == 3 { t.shape[1] } else { 1 };
        let shape = [t.row_len(), t.n_rows()];
        let on_host = host(&name);
        Ok(GpuWeight::upload_grouped_placed(
            ctx, &name, t.ty, shape, data, group, on_host,
        )?)
    };
    let shared = match shared {
        true => Some([
            up("ffn_gate_shexp")?,
            up("ffn_up_shexp")?,
            up("ffn_down_shexp")?,
            up("ffn_gate_inp_shexp")?,
        ]),
        false => None,
    };
    // Splits past the binding limit must hold whole experts (`matvec_id_dispatches` checks).
    Ok(MoeGpuWeights {
        router: up("ffn_gate_inp")?,
        gate_exps: up("ffn_gate_exps")?,
        up_exps: up("ffn_up_exps")?,
        down_exps: up("ffn_down_exps")?,
        shared,
        n_expert: hp.n_expert,
        n_used: hp.n_expert_used,
    })
}

/// The layer of a routed-expert weight (`blk.N.ffn_{gate,up,down}_exps.weight`).
pub fn expert_layer(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("blk.")?;
    let (layer, tail) = rest.split_once('.')?;
    let is_exps = ["ffn_gate_exps.", "ffn_up_exps.", "ffn_down_exps."]
        .iter()
        .any(|p| tail.starts_with(p));
    match is_exps {
        true => layer.parse().ok(),
        false => None,
    }
}
