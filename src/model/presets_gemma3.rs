//! Gemma 3 presets: the published dimensions of Gemma 3 270M, 1B, 4B, 12B and 27B
//! (google/gemma-3-{270m,1b-it,4b-it,12b-it,27b-it} `config.json` on Hugging Face: hidden
//! size, layers, heads, KV heads, head_dim, intermediate size, `sliding_window`,
//! `rope_theta` 1e6 with linear ×8 scaling from 4B up, `rope_local_base_freq` 10000, the 5:1
//! sliding pattern), a 262,144-token vocabulary and the tied LM head, with the tensor types of
//! llama.cpp's quantization recipes (`src/llama-quant.cpp`: Q4_K_M gives attn_v and ffn_down
//! Q6_K in the layers `more_bits` picks and the tied `token_embd` Q6_K; a row length that is
//! not a multiple of 256 falls back from Q4_K to Q5_0 and from Q6_K to Q8_0).
//!
//! `gemma3-tiny-f32` is not a published model: a tiny `gemma3` (6 layers, global at 2 and 5,
//! window 16, head_dim 256) for tests, meant to be written with random weights.

use crate::gguf::{GgmlType, GgufError, GgufWriter, MetaValue};

/// Gemma 3 dimensions.
struct G3 {
    layers: u32,
    d: u32,
    ff: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    window: u32,
    ctx: u32,
    /// Linear RoPE scaling of the global layers (1: none).
    rope_scale: f32,
    vocab: u32,
    /// `attention.sliding_window_pattern` (`None`: llama.cpp's default 6).
    pattern: Option<u32>,
}

const G3_270M: G3 = G3 {
    layers: 18,
    d: 640,
    ff: 2048,
    heads: 4,
    kv_heads: 1,
    head_dim: 256,
    window: 512,
    ctx: 32768,
    rope_scale: 1.0,
    vocab: 262_144,
    pattern: None,
};
const G3_1B: G3 = G3 {
    layers: 26,
    d: 1152,
    ff: 6912,
    window: 512,
    ..G3_270M
};
const G3_4B: G3 = G3 {
    layers: 34,
    d: 2560,
    ff: 10240,
    heads: 8,
    kv_heads: 4,
    window: 1024,
    ctx: 131_072,
    rope_scale: 8.0,
    ..G3_270M
};
const G3_12B: G3 = G3 {
    layers: 48,
    d: 3840,
    ff: 15360,
    heads: 16,
    kv_heads: 8,
    ..G3_4B
};
const G3_27B: G3 = G3 {
    layers: 62,
    d: 5376,
    ff: 21504,
    heads: 32,
    kv_heads: 16,
    head_dim: 128,
    ..G3_4B
};
const G3_TINY: G3 = G3 {
    layers: 6,
    d: 64,
    ff: 128,
    heads: 2,
    kv_heads: 1,
    head_dim: 256,
    window: 16,
    ctx: 4096,
    rope_scale: 1.0,
    vocab: 512,
    pattern: Some(3),
};

/// The writer of Gemma 3 preset `name`, or `None` for another name.
pub fn preset_writer(name: &str) -> Option<Result<GgufWriter, GgufError>> {
    Some(match name {
        "gemma3-270m-q8_0" => gemma3(&G3_270M, Recipe::Q8_0),
        "gemma3-1b-q4_k_m" => gemma3(&G3_1B, Recipe::Q4KM),
        "gemma3-4b-q4_k_m" => gemma3(&G3_4B, Recipe::Q4KM),
        "gemma3-12b-q4_k_m" => gemma3(&G3_12B, Recipe::Q4KM),
        "gemma3-27b-q4_k_m" => gemma3(&G3_27B, Recipe::Q4KM),
        "gemma3-tiny-f32" => gemma3(&G3_TINY, Recipe::F32),
        _ => return None,
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Recipe {
    F32,
    Q8_0,
    Q4KM,
}

/// llama.cpp's fallback for a k-quant whose rows are not whole 256-element super-blocks.
fn fit(ty: GgmlType, row_len: u32) -> GgmlType {
    if row_len.is_multiple_of(256) {
        return ty;
    }
    match ty {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q6_K => GgmlType::Q8_0,
        other => other,
    }
}

/// llama.cpp's Q4_K_M rule for the layers whose attn_v and ffn_down get Q6_K.
fn more_bits(i: u32, n: u32) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

fn gemma3(x: &G3, recipe: Recipe) -> Result<GgufWriter, GgufError> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("gemma3".into()));
    let k = |s: &str| format!("gemma3.{s}");
    for (key, v) in [
        ("context_length", x.ctx),
        ("embedding_length", x.d),
        ("block_count", x.layers),
        ("feed_forward_length", x.ff),
        ("attention.head_count", x.heads),
        ("attention.head_count_kv", x.kv_heads),
        ("attention.key_length", x.head_dim),
        ("attention.value_length", x.head_dim),
        ("attention.sliding_window", x.window),
        ("vocab_size", x.vocab),
    ] {
        w.set(&k(key), MetaValue::U32(v));
    }
    if let Some(p) = x.pattern {
        w.set(&k("attention.sliding_window_pattern"), MetaValue::U32(p));
    }
    w.set(&k("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6));
    w.set(&k("rope.freq_base"), MetaValue::F32(1e6));
    if x.rope_scale != 1.0 {
        w.set(&k("rope.scaling.type"), MetaValue::String("linear".into()));
        w.set(&k("rope.scaling.factor"), MetaValue::F32(x.rope_scale));
    }
    let (d, ff) = (u64::from(x.d), u64::from(x.ff));
    let q = u64::from(x.heads * x.head_dim);
    let kv = u64::from(x.kv_heads * x.head_dim);
    let hd = u64::from(x.head_dim);
    let f32 = GgmlType::F32;
    let [embd, base, hi] = match recipe {
        Recipe::F32 => [f32; 3],
        Recipe::Q8_0 => [GgmlType::Q8_0; 3],
        Recipe::Q4KM => [GgmlType::Q6_K, GgmlType::Q4_K, GgmlType::Q6_K],
    };
    w.add_tensor_shape(
        "token_embd.weight",
        &[d, u64::from(x.vocab)],
        fit(embd, x.d),
    )?;
    for i in 0..x.layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        let more = if more_bits(i, x.layers) { hi } else { base };
        w.add_tensor_shape(&p("attn_norm.weight"), &[d], f32)?;
        w.add_tensor_shape(&p("attn_q.weight"), &[d, q], fit(base, x.d))?;
        w.add_tensor_shape(&p("attn_k.weight"), &[d, kv], fit(base, x.d))?;
        w.add_tensor_shape(&p("attn_v.weight"), &[d, kv], fit(more, x.d))?;
        let q32 = x.heads * x.head_dim;
        w.add_tensor_shape(&p("attn_output.weight"), &[q, d], fit(base, q32))?;
        w.add_tensor_shape(&p("attn_q_norm.weight"), &[hd], f32)?;
        w.add_tensor_shape(&p("attn_k_norm.weight"), &[hd], f32)?;
        w.add_tensor_shape(&p("post_attention_norm.weight"), &[d], f32)?;
        w.add_tensor_shape(&p("ffn_norm.weight"), &[d], f32)?;
        w.add_tensor_shape(&p("ffn_gate.weight"), &[d, ff], fit(base, x.d))?;
        w.add_tensor_shape(&p("ffn_up.weight"), &[d, ff], fit(base, x.d))?;
        w.add_tensor_shape(&p("ffn_down.weight"), &[ff, d], fit(more, x.ff))?;
        w.add_tensor_shape(&p("post_ffw_norm.weight"), &[d], f32)?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], f32)?;
    Ok(w)
}
