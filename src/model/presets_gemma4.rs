//! Gemma 4 presets: the published dimensions of Gemma 4 E4B, 26B-A4B and 31B
//! (google/gemma-4-{E4B,26B-A4B,31B}-it `config.json`, `text_config`: hidden size, layers,
//! heads, `num_key_value_heads` (sliding) and `num_global_key_value_heads`, `head_dim` 256 /
//! `global_head_dim` 512, `intermediate_size`, `sliding_window`, the 5:1 sliding pattern,
//! `num_kv_shared_layers`, `hidden_size_per_layer_input`, `attention_k_eq_v` (no `attn_v` on
//! global layers), the experts, `rope_theta` 1e6 global with `partial_rotary_factor` 0.25 and
//! 10000 sliding), a 262,144-token vocabulary and the tied LM head, written as llama.cpp's
//! converter writes them (`conversion/gemma.py`, `Gemma4Model`) with the tensor types of its
//! Q4_K_M recipe (`src/llama-quant.cpp`: `token_embd` and `per_layer_token_embd` share the
//! token-embedding category, Q6_K; attn_v and ffn_down (experts too) Q6_K in the layers
//! `more_bits` picks; norms, `ffn_gate_inp` and `per_layer_model_proj` unquantized).
//!
//! Where the sizes come from (per K or V row, `n_kv · head`): E4B 2 × 256 (sliding) and
//! 2 × 512 (global), 24 layers with their own K/V; 26B-A4B 8 × 256 and 2 × 512; 31B 16 × 256
//! and 4 × 512.

use crate::gguf::{GgmlType, GgufError, GgufWriter, MetaArray, MetaValue};

/// Gemma 4 dimensions.
struct G4 {
    layers: u32,
    d: u32,
    ff: u32,
    heads: u32,
    kv_swa: u32,
    kv_full: u32,
    window: u32,
    ctx: u32,
    /// `num_kv_shared_layers`.
    shared: u32,
    /// `hidden_size_per_layer_input` (0: none).
    ple: u32,
    /// `attention_k_eq_v`: global layers without `attn_v`.
    k_eq_v: bool,
    /// (experts, used, expert width).
    experts: Option<(u32, u32, u32)>,
}

const HEAD_SWA: u32 = 256;
const HEAD_FULL: u32 = 512;
const VOCAB: u32 = 262_144;

const G4_E4B: G4 = G4 {
    layers: 42,
    d: 2560,
    ff: 10240,
    heads: 8,
    kv_swa: 2,
    kv_full: 2,
    window: 512,
    ctx: 131_072,
    shared: 18,
    ple: 256,
    k_eq_v: false,
    experts: None,
};
const G4_26B_A4B: G4 = G4 {
    layers: 30,
    d: 2816,
    ff: 2112,
    heads: 16,
    kv_swa: 8,
    kv_full: 2,
    window: 1024,
    ctx: 262_144,
    shared: 0,
    ple: 0,
    k_eq_v: true,
    experts: Some((128, 8, 704)),
};
const G4_31B: G4 = G4 {
    layers: 60,
    d: 5376,
    ff: 21504,
    heads: 32,
    kv_swa: 16,
    kv_full: 4,
    experts: None,
    ..G4_26B_A4B
};

/// The writer of Gemma 4 preset `name`, or `None` for another name.
pub fn preset_writer(name: &str) -> Option<Result<GgufWriter, GgufError>> {
    Some(match name {
        "gemma4-e4b-q4_k_m" => gemma4(&G4_E4B),
        "gemma4-26b-a4b-q4_k_m" => gemma4(&G4_26B_A4B),
        "gemma4-31b-q4_k_m" => gemma4(&G4_31B),
        _ => return None,
    })
}

/// llama.cpp's fallback for a k-quant whose rows are not whole 256-element super-blocks.
fn fit(ty: GgmlType, row_len: u32) -> GgmlType {
    match ty {
        _ if row_len.is_multiple_of(256) => ty,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q6_K => GgmlType::Q8_0,
        other => other,
    }
}

/// Layer il slides unless it is the 6th of its group (`il % 6 == 5`).
fn sliding(il: u32) -> bool {
    il % 6 != 5
}

fn gemma4(x: &G4) -> Result<GgufWriter, GgufError> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("gemma4".into()));
    let k = |s: &str| format!("gemma4.{s}");
    for (key, v) in [
        ("context_length", x.ctx),
        ("embedding_length", x.d),
        ("block_count", x.layers),
        ("feed_forward_length", x.ff),
        ("attention.head_count", x.heads),
        ("attention.key_length", HEAD_FULL),
        ("attention.value_length", HEAD_FULL),
        ("attention.key_length_swa", HEAD_SWA),
        ("attention.value_length_swa", HEAD_SWA),
        ("rope.dimension_count", HEAD_FULL),
        ("rope.dimension_count_swa", HEAD_SWA),
        ("attention.sliding_window", x.window),
        ("attention.shared_kv_layers", x.shared),
        ("embedding_length_per_layer_input", x.ple),
        ("vocab_size", VOCAB),
    ] {
        w.set(&k(key), MetaValue::U32(v));
    }
    let kv: Vec<u32> = (0..x.layers)
        .map(|il| if sliding(il) { x.kv_swa } else { x.kv_full })
        .collect();
    w.set(
        &k("attention.head_count_kv"),
        MetaValue::Array(MetaArray::U32(kv)),
    );
    let pattern = (0..x.layers).map(sliding).collect();
    w.set(
        &k("attention.sliding_window_pattern"),
        MetaValue::Array(MetaArray::Bool(pattern)),
    );
    w.set(&k("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6));
    w.set(&k("rope.freq_base"), MetaValue::F32(1e6));
    w.set(&k("rope.freq_base_swa"), MetaValue::F32(10000.0));
    w.set(&k("final_logit_softcapping"), MetaValue::F32(30.0));
    if let Some((e, used, fe)) = x.experts {
        w.set(&k("expert_count"), MetaValue::U32(e));
        w.set(&k("expert_used_count"), MetaValue::U32(used));
        w.set(&k("expert_feed_forward_length"), MetaValue::U32(fe));
    }
    globals(&mut w, x)?;
    for il in 0..x.layers {
        layer(&mut w, x, il)?;
    }
    w.add_tensor_shape("output_norm.weight", &[u64::from(x.d)], GgmlType::F32)?;
    Ok(w)
}

/// The model-wide tensors: embeddings, `rope_freqs`, the per-layer-embedding tables.
fn globals(w: &mut GgufWriter, x: &G4) -> Result<(), GgufError> {
    let (d, v) = (u64::from(x.d), u64::from(VOCAB));
    w.add_tensor_shape("token_embd.weight", &[d, v], GgmlType::Q6_K)?;
    w.add_tensor_shape(
        "rope_freqs.weight",
        &[u64::from(HEAD_FULL / 2)],
        GgmlType::F32,
    )?;
    if x.ple > 0 {
        let all = u64::from(x.ple) * u64::from(x.layers);
        w.add_tensor_shape("per_layer_token_embd.weight", &[all, v], GgmlType::Q6_K)?;
        w.add_tensor_shape("per_layer_model_proj.weight", &[d, all], GgmlType::BF16)?;
        w.add_tensor_shape(
            "per_layer_proj_norm.weight",
            &[u64::from(x.ple)],
            GgmlType::F32,
        )?;
    }
    Ok(())
}

/// Layer `il`'s tensors.
fn layer(w: &mut GgufWriter, x: &G4, il: u32) -> Result<(), GgufError> {
    let p = |s: &str| format!("blk.{il}.{s}");
    let (q4, q6, f32) = (GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F32);
    let more = if super::more_bits(il, x.layers) {
        q6
    } else {
        q4
    };
    let (sl, d, ff) = (sliding(il), u64::from(x.d), u64::from(x.ff));
    let head = u64::from(if sl { HEAD_SWA } else { HEAD_FULL });
    let q = u64::from(x.heads) * head;
    let kv = u64::from(if sl { x.kv_swa } else { x.kv_full }) * head;
    for n in [
        "attn_norm",
        "post_attention_norm",
        "ffn_norm",
        "post_ffw_norm",
    ] {
        w.add_tensor_shape(&p(&format!("{n}.weight")), &[d], f32)?;
    }
    w.add_tensor_shape(&p("attn_q.weight"), &[d, q], q4)?;
    w.add_tensor_shape(&p("attn_q_norm.weight"), &[head], f32)?;
    if il < x.layers - x.shared {
        w.add_tensor_shape(&p("attn_k.weight"), &[d, kv], q4)?;
        w.add_tensor_shape(&p("attn_k_norm.weight"), &[head], f32)?;
        if sl || !x.k_eq_v {
            w.add_tensor_shape(&p("attn_v.weight"), &[d, kv], more)?;
        }
    }
    w.add_tensor_shape(&p("attn_output.weight"), &[q, d], q4)?;
    w.add_tensor_shape(&p("layer_output_scale.weight"), &[1], f32)?;
    w.add_tensor_shape(&p("ffn_gate.weight"), &[d, ff], q4)?;
    w.add_tensor_shape(&p("ffn_up.weight"), &[d, ff], q4)?;
    // 2112 and 704 are not whole 256-element super-blocks: llama.cpp falls back to Q8_0/Q5_0.
    let down = fit;
    w.add_tensor_shape(&p("ffn_down.weight"), &[ff, d], down(more, x.ff))?;
    if let Some((e, _, fe)) = x.experts {
        let (e64, fe64) = (u64::from(e), u64::from(fe));
        w.add_tensor_shape(&p("ffn_gate_inp.weight"), &[d, e64], f32)?;
        for n in ["ffn_gate_inp.scale", "pre_ffw_norm_2.weight"] {
            w.add_tensor_shape(&p(n), &[d], f32)?;
        }
        for n in ["post_ffw_norm_1.weight", "post_ffw_norm_2.weight"] {
            w.add_tensor_shape(&p(n), &[d], f32)?;
        }
        w.add_tensor_shape(&p("ffn_gate_up_exps.weight"), &[d, 2 * fe64, e64], q4)?;
        let ty = down(more, fe);
        w.add_tensor_shape(&p("ffn_down_exps.weight"), &[fe64, d, e64], ty)?;
        w.add_tensor_shape(&p("ffn_down_exps.scale"), &[e64], f32)?;
    }
    if x.ple > 0 {
        let pl = u64::from(x.ple);
        w.add_tensor_shape(&p("inp_gate.weight"), &[d, pl], q4)?;
        w.add_tensor_shape(&p("proj.weight"), &[pl, d], q4)?;
        w.add_tensor_shape(&p("post_norm.weight"), &[d], f32)?;
    }
    Ok(())
}
