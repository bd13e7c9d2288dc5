//! Every weight's shape held to the hyperparameters on the GGUF header, before anything is
//! uploaded: a file whose `output.weight` rows are not the vocabulary, or whose FFN or attention
//! matrices do not match the head counts, is refused with
//! [`HparamsError::TensorShape`] (naming the tensor, the expected and the found shape) instead
//! of running with misaligned logits. As llama.cpp's `create_tensor`, which refuses a tensor of
//! the wrong shape, the vocabulary is the tokenizer's token count (else `vocab_size`).
//!
//! Shapes in ggml order `[ne0, ne1]` = `[inputs, outputs]` (`d` hidden size, `V` vocabulary,
//! `q` = `n_head·head_dim`, doubled in qwen35's gated attention, `k` = `n_head_kv·head_dim`,
//! `v` = `n_head_kv·head_dim_v`, `o` = `n_head·head_dim_v`, `f` FFN size):
//!
//! ```text
//! token_embd.weight  [d, V]   output.weight [d, V] (optional: tied)   output_norm.weight [d]
//! rope_freqs.weight  [n_rot/2] (optional)
//! blk.i.attn_norm    [d]      ffn_norm / post_attention_norm [d]
//! blk.i.attn_q [d, q]  attn_k [d, k]  attn_v [d, v]  attn_output [o, d]
//! blk.i.attn_{q,k,v}.bias [q], [k], [v] (optional)  attn_{q,k}_norm [head_dim] (qk-norm models)
//! blk.i.ffn_gate [d, f]  ffn_up [d, f]  ffn_down [f, d]
//! DeltaNet: attn_qkv [d, conv]  attn_gate [d, value]  ssm_beta / ssm_alpha [d, n_v]
//!           ssm_conv1d [d_conv, conv]  ssm_dt.bias / ssm_a [n_v]  ssm_norm [head_v]
//!           ssm_out [value, d]
//! ```
//!
//! A DSpark drafter ([`check_drafter_shapes`]) has the same backbone (its embeddings and LM head
//! optional: borrowed from the target) and its heads: `fc [m·d_t, d]`, `enc.output_norm [d]`,
//! `markov_w1` / `markov_w2 [R, V]`, `conf_proj [d + R]` and its bias `[1]`, and, when
//! conditioned, `log_snr_fc1 [128, d]` `[d]`, `log_snr_fc2 [d, d]` `[d]`.
//!
//! Trailing 1s do not count: `[k]` and `[k, 1]` are the same vector.
//!
//! The widths themselves (`n_head × key_length`, the DeltaNet conv channels, …) are checked to
//! fit 32 bits when the hyperparameters are read ([`check_widths`]), so the shapes here, and
//! the accessors everything later uses, never wrap.

use crate::gguf::{Gguf, GgufError};

use super::drafter_meta::{tensor_name, DrafterMeta};
use super::hparams::{Hparams, HparamsError, LayerKind};

/// Sinusoidal features of a log-SNR conditioned drafter's first projection.
const LOG_SNR_FEATURES: u64 = 128;

/// Checks the shapes of every tensor a model of `hp` runs (`g` the target model's header).
pub fn check_shapes(g: &Gguf, hp: &Hparams) -> Result<(), HparamsError> {
    if let Some(g4) = &hp.gemma4 {
        return super::gemma4_shapes::check(&Checker { g }, hp, g4);
    }
    check_backbone(g, hp, true)
}

/// Checks a DSpark drafter's backbone and heads against what it declares (`meta`).
pub fn check_drafter_shapes(g: &Gguf, meta: &DrafterMeta) -> Result<(), HparamsError> {
    let hp = &meta.hp;
    check_backbone(g, hp, false)?;
    let c = Checker { g };
    let name = |n: &'static str| tensor_name(hp.arch, n);
    let (d, v, r) = (
        u64::from(hp.n_embd),
        u64::from(hp.n_vocab),
        u64::from(meta.markov_rank),
    );
    c.required(name("fc.weight"), &[meta.tap_width(), d])?;
    c.required(name("enc.output_norm.weight"), &[d])?;
    if r > 0 {
        c.required(name("markov_w1.weight"), &[r, v])?;
        c.required(name("markov_w2.weight"), &[r, v])?;
    }
    if meta.has_confidence {
        c.required(name("conf_proj.weight"), &[d + r])?;
        c.optional(name("conf_proj.bias"), &[1])?;
    }
    if meta.log_snr.is_some() {
        c.required(name("log_snr_fc1.weight"), &[LOG_SNR_FEATURES, d])?;
        c.required(name("log_snr_fc1.bias"), &[d])?;
        c.required(name("log_snr_fc2.weight"), &[d, d])?;
        c.required(name("log_snr_fc2.bias"), &[d])?;
    }
    Ok(())
}

/// The backbone: embeddings, LM head, final norm and every layer. `own_embd`: the token
/// embeddings must be in the file (a drafter may borrow the target's).
fn check_backbone(g: &Gguf, hp: &Hparams, own_embd: bool) -> Result<(), HparamsError> {
    let c = Checker { g };
    let (d, v) = (u64::from(hp.n_embd), u64::from(hp.n_vocab));
    if own_embd {
        c.required("token_embd.weight", &[d, v])?;
    } else {
        c.optional("token_embd.weight", &[d, v])?;
    }
    c.optional("output.weight", &[d, v])?;
    c.required("output_norm.weight", &[d])?;
    c.optional("rope_freqs.weight", &[u64::from(hp.n_rot / 2)])?;
    for il in 0..hp.n_layer {
        check_layer(&c, hp, il)?;
    }
    Ok(())
}

/// Layer `il`: its norms, its mixer and its FFN.
fn check_layer(c: &Checker<'_>, hp: &Hparams, il: u32) -> Result<(), HparamsError> {
    let p = |s: &str| format!("blk.{il}.{s}");
    let (d, f) = (u64::from(hp.n_embd), u64::from(hp.n_ff));
    c.required(&p("attn_norm.weight"), &[d])?;
    let ffn_norm = if hp.hybrid.is_some() {
        "post_attention_norm.weight"
    } else {
        "ffn_norm.weight"
    };
    c.required(&p(ffn_norm), &[d])?;
    if hp.gemma3.is_some() {
        c.required(&p("post_attention_norm.weight"), &[d])?;
        c.required(&p("post_ffw_norm.weight"), &[d])?;
    }
    match hp.layer_kind(il) {
        LayerKind::Attention => check_attention(c, hp, il)?,
        LayerKind::DeltaNet => check_delta_net(c, hp, il)?,
    }
    if let Some(moe) = &hp.moe {
        // Router, experts, shared expert; any other expert or routing tensor is refused.
        moe.check_layer(c.g, il, hp.n_embd)?;
        return Ok(());
    }
    c.required(&p("ffn_gate.weight"), &[d, f])?;
    c.required(&p("ffn_up.weight"), &[d, f])?;
    c.required(&p("ffn_down.weight"), &[f, d])
}

/// Layer `il`'s attention (gated in a hybrid: `attn_q` holds q and its gate per head).
fn check_attention(c: &Checker<'_>, hp: &Hparams, il: u32) -> Result<(), HparamsError> {
    let p = |s: &str| format!("blk.{il}.{s}");
    let d = u64::from(hp.n_embd);
    let gate = if hp.attn_gated() { 2 } else { 1 };
    let q = gate * u64::from(hp.n_head) * u64::from(hp.head_dim);
    let k = u64::from(hp.n_head_kv) * u64::from(hp.head_dim);
    let v = u64::from(hp.n_head_kv) * u64::from(hp.head_dim_v);
    let o = u64::from(hp.n_head) * u64::from(hp.head_dim_v);
    c.required(&p("attn_q.weight"), &[d, q])?;
    c.required(&p("attn_k.weight"), &[d, k])?;
    c.required(&p("attn_v.weight"), &[d, v])?;
    c.required(&p("attn_output.weight"), &[o, d])?;
    c.optional(&p("attn_q.bias"), &[q])?;
    c.optional(&p("attn_k.bias"), &[k])?;
    c.optional(&p("attn_v.bias"), &[v])?;
    let hd = u64::from(hp.head_dim);
    for norm in ["attn_q_norm.weight", "attn_k_norm.weight"] {
        if hp.qk_norm {
            c.required(&p(norm), &[hd])?;
        } else {
            c.optional(&p(norm), &[hd])?;
        }
    }
    Ok(())
}

/// Layer `il`'s Gated DeltaNet (a hybrid's recurrent layer).
fn check_delta_net(c: &Checker<'_>, hp: &Hparams, il: u32) -> Result<(), HparamsError> {
    let Some(h) = &hp.hybrid else {
        return Err(HparamsError::Invalid {
            what: format!("layer {il}"),
            value: "Gated DeltaNet".into(),
            why: "a recurrent layer in a model without the hybrid keys",
        });
    };
    let p = |s: &str| format!("blk.{il}.{s}");
    let d = u64::from(hp.n_embd);
    let n_v = u64::from(h.n_v_heads);
    let key = u64::from(h.n_k_heads) * u64::from(h.head_k_dim);
    let value = n_v * u64::from(h.head_v_dim);
    let conv = 2 * key + value;
    c.required(&p("attn_qkv.weight"), &[d, conv])?;
    c.required(&p("attn_gate.weight"), &[d, value])?;
    c.required(&p("ssm_beta.weight"), &[d, n_v])?;
    c.required(&p("ssm_alpha.weight"), &[d, n_v])?;
    c.required(&p("ssm_conv1d.weight"), &[u64::from(h.d_conv), conv])?;
    c.required(&p("ssm_dt.bias"), &[n_v])?;
    c.required(&p("ssm_a"), &[n_v])?;
    c.required(&p("ssm_norm.weight"), &[u64::from(h.head_v_dim)])?;
    c.required(&p("ssm_out.weight"), &[value, d])
}

/// Checks, once at load, that every width the accessors ([`Hparams::q_dim`], …,
/// [`super::hybrid::HybridHparams::conv_dim`]) and the weights compute from the metadata fits
/// 32 bits, so they can stay infallible: a file with huge values is refused with
/// [`HparamsError::Overflow`] instead of wrapping ([`Hparams::from_gguf`] calls it).
pub(super) fn check_widths(hp: &Hparams) -> Result<(), HparamsError> {
    let p = hp.arch.name();
    let keys = |a: &str, b: &str| format!("{p}.{a} × {p}.{b}");
    let gate = if hp.attn_gated() { 2 } else { 1 };
    for (what, factors) in [
        (
            keys("attention.head_count", "attention.key_length"),
            [hp.n_head, hp.head_dim, gate],
        ),
        (
            keys("attention.head_count_kv", "attention.key_length"),
            [hp.n_head_kv, hp.head_dim, 1],
        ),
        (
            keys("attention.head_count_kv", "attention.value_length"),
            [hp.n_head_kv, hp.head_dim_v, 1],
        ),
        (
            keys("attention.head_count", "attention.value_length"),
            [hp.n_head, hp.head_dim_v, 1],
        ),
        (
            format!("vocabulary × {p}.embedding_length"),
            [hp.n_vocab, hp.n_embd, 1],
        ),
        (
            keys("feed_forward_length", "embedding_length"),
            [hp.n_ff, hp.n_embd, 1],
        ),
    ] {
        product(&what, &factors)?;
    }
    if let Some(h) = &hp.hybrid {
        let qk = product(
            &format!("2 × {}", keys("ssm.group_count", "ssm.state_size")),
            &[2, h.n_k_heads, h.head_k_dim],
        )?;
        let conv = qk
            .checked_add(h.value_dim())
            .ok_or_else(|| HparamsError::Overflow {
                what: format!("conv1d channels (q and k + {p}.ssm.inner_size)"),
                value: format!("{qk} + {}", h.value_dim()),
            })?;
        product(
            &format!("conv1d channels × {p}.ssm.conv_kernel"),
            &[conv, h.d_conv],
        )?;
    }
    Ok(())
}

/// The product of `factors` in 32 bits, or [`HparamsError::Overflow`] naming `what` and the
/// factors (1s left out).
fn product(what: &str, factors: &[u32]) -> Result<u32, HparamsError> {
    factors
        .iter()
        .try_fold(1u32, |acc, &f| acc.checked_mul(f))
        .ok_or_else(|| HparamsError::Overflow {
            what: what.to_string(),
            value: factors
                .iter()
                .filter(|&&f| f != 1)
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" × "),
        })
}

/// Holds the tensors of one header to their expected shapes.
pub(super) struct Checker<'a> {
    pub(super) g: &'a Gguf,
}

impl Checker<'_> {
    /// Tensor `name` must exist with shape `want`.
    pub(super) fn required(&self, name: &str, want: &[u64]) -> Result<(), HparamsError> {
        match self.g.tensor(name) {
            Some(t) => same(name, &t.shape, want),
            None => Err(GgufError::MissingTensor {
                name: name.to_string(),
            }
            .into()),
        }
    }

    /// Tensor `name`, where the file has it, must have shape `want`.
    pub(super) fn optional(&self, name: &str, want: &[u64]) -> Result<(), HparamsError> {
        match self.g.tensor(name) {
            Some(t) => same(name, &t.shape, want),
            None => Ok(()),
        }
    }
}

/// `found` equals `want` but for trailing 1s.
fn same(name: &str, found: &[u64], want: &[u64]) -> Result<(), HparamsError> {
    let trim = |s: &[u64]| -> Vec<u64> {
        let mut s = s.to_vec();
        while s.last() == Some(&1) {
            s.pop();
        }
        s
    };
    if trim(found) == trim(want) {
        return Ok(());
    }
    Err(HparamsError::TensorShape {
        tensor: name.to_string(),
        expected: want.to_vec(),
        found: found.to_vec(),
    })
}
