//! Every Gemma 4 weight's shape held to its layer's hyperparameters (llama.cpp b11434's
//! `load_arch_tensors` in `src/models/gemma4.cpp`): per layer, the head size and KV heads of
//! its kind, its FFN width, its experts and per-layer-embedding weights. ggml order
//! `[inputs, outputs]`, `d` hidden size, `V` vocabulary, `h` layer il's head size, `kv` its KV
//! heads, `n_h` query heads, `f` its FFN width, `E` experts of width `f_e`, `P` per-layer width:
//!
//! ```text
//! token_embd [d, V]  output [d, V] (optional: tied)  output_norm [d]
//! rope_freqs [key_length/2]                 (needed once any layer is global)
//! per_layer_token_embd [P·L, V]  per_layer_model_proj [d, P·L]  per_layer_proj_norm [P]   (P > 0)
//! blk.i.attn_norm, post_attention_norm, ffn_norm, post_ffw_norm [d]   layer_output_scale [1]?
//! blk.i.attn_q [d, n_h·h]  attn_q_norm [h]  attn_output [n_h·h, d]
//! blk.i.attn_k [d, kv·h]  attn_k_norm [h]  attn_v [d, kv·h]? (V = K without it)   own-KV layers
//! blk.i.ffn_gate / ffn_up [d, f]  ffn_down [f, d]
//! MoE: ffn_gate_inp [d, E]  ffn_gate_inp.scale [d]  pre_ffw_norm_2, post_ffw_norm_{1,2} [d]
//!      ffn_gate_up_exps [d, 2·f_e, E] (or ffn_gate_exps / ffn_up_exps [d, f_e, E])
//!      ffn_down_exps [f_e, d, E]  ffn_down_exps.scale [E]?
//! PLE: inp_gate [d, P]  proj [P, d]  post_norm [d]
//! ```
//! A fused `attn_qkv` (which llama.cpp also accepts) is refused by name: flint reads q, k, v
//! apart.

use super::gemma4::Gemma4Hparams;
use super::hparams::{Hparams, HparamsError};
use super::shapes::Checker;

/// Checks every tensor of a Gemma 4 model.
pub(super) fn check(c: &Checker<'_>, hp: &Hparams, g4: &Gemma4Hparams) -> Result<(), HparamsError> {
    let (d, v) = (u64::from(hp.n_embd), u64::from(hp.n_vocab));
    c.required("token_embd.weight", &[d, v])?;
    c.optional("output.weight", &[d, v])?;
    c.required("output_norm.weight", &[d])?;
    let rope = [u64::from(g4.head_dim_full / 2)];
    if g4.sliding.iter().any(|&s| !s) {
        c.required("rope_freqs.weight", &rope)?;
    }
    let pl = u64::from(g4.n_embd_per_layer);
    if pl > 0 {
        let all = pl * u64::from(hp.n_layer);
        c.required("per_layer_token_embd.weight", &[all, v])?;
        c.required("per_layer_model_proj.weight", &[d, all])?;
        c.required("per_layer_proj_norm.weight", &[pl])?;
    }
    for il in 0..hp.n_layer {
        check_attention(c, hp, g4, il)?;
        check_ffn(c, hp, g4, il)?;
        let p = |s: &str| format!("blk.{il}.{s}");
        c.optional(&p("layer_output_scale.weight"), &[1])?;
        if pl > 0 {
            c.required(&p("inp_gate.weight"), &[d, pl])?;
            c.required(&p("proj.weight"), &[pl, d])?;
            c.required(&p("post_norm.weight"), &[d])?;
        }
    }
    Ok(())
}

/// Layer `il`'s attention: q always, k (and v) on the layers that keep their own cache.
fn check_attention(
    c: &Checker<'_>,
    hp: &Hparams,
    g4: &Gemma4Hparams,
    il: u32,
) -> Result<(), HparamsError> {
    let p = |s: &str| format!("blk.{il}.{s}");
    if c.g.tensor(&p("attn_qkv.weight")).is_some() {
        return Err(HparamsError::Invalid {
            what: p("attn_qkv.weight"),
            value: "present".into(),
            why: "a fused q/k/v projection is not supported for gemma4",
        });
    }
    let d = u64::from(hp.n_embd);
    let h = u64::from(g4.head_dim(il));
    let q = u64::from(hp.n_head) * h;
    let kv = u64::from(g4.n_head_kv(il)) * h;
    c.required(&p("attn_norm.weight"), &[d])?;
    c.required(&p("attn_q.weight"), &[d, q])?;
    c.required(&p("attn_q_norm.weight"), &[h])?;
    c.required(&p("attn_output.weight"), &[q, d])?;
    c.required(&p("post_attention_norm.weight"), &[d])?;
    if g4.has_kv(il) {
        c.required(&p("attn_k.weight"), &[d, kv])?;
        c.required(&p("attn_k_norm.weight"), &[h])?;
    }
    c.optional(&p("attn_v.weight"), &[d, kv])
}

/// Layer `il`'s dense FFN and, on a MoE layer, its router and experts.
fn check_ffn(
    c: &Checker<'_>,
    hp: &Hparams,
    g4: &Gemma4Hparams,
    il: u32,
) -> Result<(), HparamsError> {
    let p = |s: &str| format!("blk.{il}.{s}");
    let (d, f) = (u64::from(hp.n_embd), u64::from(g4.n_ff(il)));
    for norm in ["ffn_norm.weight", "post_ffw_norm.weight"] {
        c.required(&p(norm), &[d])?;
    }
    c.required(&p("ffn_gate.weight"), &[d, f])?;
    c.required(&p("ffn_up.weight"), &[d, f])?;
    c.required(&p("ffn_down.weight"), &[f, d])?;
    let Some(moe) = g4.moe.as_ref().filter(|_| g4.moe_layers[il as usize]) else {
        return Ok(());
    };
    let (e, fe) = (u64::from(moe.n_expert), u64::from(moe.n_ff_exp));
    c.required(&p("ffn_gate_inp.weight"), &[d, e])?;
    for norm in [
        "ffn_gate_inp.scale",
        "pre_ffw_norm_2.weight",
        "post_ffw_norm_1.weight",
        "post_ffw_norm_2.weight",
    ] {
        c.required(&p(norm), &[d])?;
    }
    if c.g.tensor(&p("ffn_gate_up_exps.weight")).is_some() {
        c.required(&p("ffn_gate_up_exps.weight"), &[d, 2 * fe, e])?;
    } else {
        c.required(&p("ffn_gate_exps.weight"), &[d, fe, e])?;
        c.required(&p("ffn_up_exps.weight"), &[d, fe, e])?;
    }
    c.required(&p("ffn_down_exps.weight"), &[fe, d, e])?;
    c.optional(&p("ffn_down_exps.scale"), &[e])
}
