//! GGUF files built from published dimensions: shape-only, so a model can be planned before it
//! is downloaded (`flint gguf preset NAME OUT`) and the seed scenario tested without 6 GB of
//! weights, or complete with random weights (`--weights random`, [`super::random_weights`]) so a
//! full-size model can be run where none can be downloaded. Each preset lists every tensor with
//! the type llama.cpp's quantization recipe gives it. Dimensions: the models' published
//! `config.json` files (Qwen/Qwen3-8B, Qwen/Qwen3-0.6B on Hugging Face).
//!
//! Gemma 3 (`gemma3-*`): `presets_gemma3.rs`. Gemma 4 (`gemma4-*`): `presets_gemma4.rs`. The `qwen35` hybrids (`qwen35-0.8b-q4_0`, the
//! tiny `qwen35-tiny-*` described next): `presets_qwen35.rs`.
//!
//! `qwen35-tiny-*` are not published models: tiny `qwen35` hybrids (8 layers, attention at 3
//! and 7, Gated DeltaNet elsewhere) for tests, meant to be written with random weights;
//! `qwen35-tiny-tools-f32` is the F32 one with a Qwen3.5-style tool-calling template.

use crate::gguf::{GgmlType, GgufError, GgufWriter, MetaArray, MetaValue};

#[path = "presets_bonsai.rs"]
mod bonsai;
#[path = "presets_gemma3.rs"]
mod gemma3;
#[path = "presets_gemma4.rs"]
mod gemma4;
#[path = "presets_moe.rs"]
mod moe;
#[path = "presets_qwen35.rs"]
mod qwen35;

/// Presets `flint gguf preset` knows.
pub const PRESETS: [&str; 37] = [
    "qwen3-8b-q4_k_m",
    "qwen3-8b-q4_0",
    "qwen3-8b-dspark-q8_0",
    "qwen3-0.6b-q4_0",
    "qwen3-0.6b-dspark-q8_0",
    "qwen3-0.6b-q4_k_m",
    "qwen3-0.6b-iq4_xs",
    "qwen3-0.6b-iq2_xxs",
    "qwen3-0.6b-mxfp4",
    "bonsai-27b-dspark-q4_1",
    "bonsai-8b-q1_0",
    "ternary-bonsai-8b-q2_0",
    "ternary-bonsai-27b-q2_0",
    "ternary-bonsai-27b-dspark-q4_1",
    "qwen35-tiny-f32",
    "qwen35-tiny-q8_0",
    "qwen35-tiny-q1_0",
    "qwen35-tiny-q2_0-g128",
    "qwen35-tiny-tools-f32",
    "qwen35-0.8b-q4_0",
    moe::MOE_PRESETS[0],
    moe::MOE_PRESETS[1],
    moe::MOE_PRESETS[2],
    moe::MOE_PRESETS[3],
    moe::MOE_PRESETS[4],
    moe::MOE_PRESETS[5],
    moe::MOE_PRESETS[6],
    moe::MOE_PRESETS[7],
    "gemma3-270m-q8_0",
    "gemma3-1b-q4_k_m",
    "gemma3-4b-q4_k_m",
    "gemma3-12b-q4_k_m",
    "gemma3-27b-q4_k_m",
    "gemma3-tiny-f32",
    "gemma4-e4b-q4_k_m",
    "gemma4-26b-a4b-q4_k_m",
    "gemma4-31b-q4_k_m",
];

/// The writer of preset `name` (shape-only tensors), or `None` for an unknown name.
pub fn preset_writer(name: &str) -> Option<Result<GgufWriter, GgufError>> {
    Some(match name {
        "qwen3-8b-q4_k_m" => qwen3_8b_q4_k_m(),
        "qwen3-8b-q4_0" => qwen3_q4_0(&QWEN3_8B),
        "qwen3-8b-dspark-q8_0" => qwen3_8b_dspark_q8_0(),
        "qwen3-0.6b-q4_0" => qwen3_q4_0(&QWEN3_06B),
        "qwen3-0.6b-dspark-q8_0" => qwen3_06b_dspark_q8_0(),
        "qwen3-0.6b-q4_k_m" => qwen3_06b_typed(GgmlType::Q4_K, true),
        "qwen3-0.6b-iq4_xs" => qwen3_06b_typed(GgmlType::IQ4_XS, false),
        "qwen3-0.6b-iq2_xxs" => qwen3_06b_typed(GgmlType::IQ2_XXS, false),
        "qwen3-0.6b-mxfp4" => qwen3_06b_typed(GgmlType::MXFP4, false),
        "bonsai-27b-dspark-q4_1" => bonsai_27b_dspark_q4_1(),
        "bonsai-8b-q1_0" => bonsai::bonsai_8b(GgmlType::Q1_0),
        "ternary-bonsai-8b-q2_0" => bonsai::bonsai_8b(GgmlType::Q2_0_G128),
        "ternary-bonsai-27b-q2_0" => bonsai::ternary_bonsai_27b_q2_0(),
        "ternary-bonsai-27b-dspark-q4_1" => bonsai::ternary_bonsai_27b_dspark_q4_1(),
        "qwen35-tiny-f32" => qwen35::qwen35_tiny(GgmlType::F32),
        "qwen35-tiny-q8_0" => qwen35::qwen35_tiny(GgmlType::Q8_0),
        "qwen35-tiny-q1_0" => qwen35::qwen35_tiny(GgmlType::Q1_0),
        "qwen35-tiny-q2_0-g128" => qwen35::qwen35_tiny(GgmlType::Q2_0_G128),
        "qwen35-0.8b-q4_0" => qwen35::qwen35_08b_q4_0(),
        g if g.starts_with("gemma3-") => return gemma3::preset_writer(g),
        g if g.starts_with("gemma4-") => return gemma4::preset_writer(g),
        "qwen35-tiny-tools-f32" => qwen35::qwen35_tiny(GgmlType::F32),
        _ => return moe::moe_preset_writer(name),
    })
}

/// The chat template a preset written with a vocabulary carries instead of plain ChatML:
/// `qwen35-tiny-tools-f32` has a Qwen3.5-style template (tools in the system turn, XML tool
/// calls, `enable_thinking`), so tool calling is tested on a random-weight model.
pub fn chat_template(name: &str) -> Option<&'static str> {
    match name {
        "qwen35-tiny-tools-f32" => Some(include_str!("templates/qwen35_tools.jinja")),
        _ => None,
    }
}

/// The bytes of preset `name`'s shape-only GGUF, or `None` for an unknown name.
pub fn preset(name: &str) -> Option<Result<Vec<u8>, GgufError>> {
    preset_writer(name).map(|w| w.and_then(|w| w.to_bytes()))
}

/// Backbone dimensions.
#[derive(Clone, Copy)]
pub(super) struct Dims {
    pub(super) layers: u32,
    pub(super) d: u32,
    pub(super) ff: u32,
    pub(super) heads: u32,
    pub(super) kv_heads: u32,
    pub(super) head_dim: u32,
    pub(super) vocab: u32,
    pub(super) rope_base: f32,
}

pub(super) fn set_backbone(w: &mut GgufWriter, arch: &str, x: &Dims) {
    w.set("general.architecture", MetaValue::String(arch.into()));
    let k = |s: &str| format!("{arch}.{s}");
    w.set(&k("block_count"), MetaValue::U32(x.layers));
    w.set(&k("embedding_length"), MetaValue::U32(x.d));
    w.set(&k("feed_forward_length"), MetaValue::U32(x.ff));
    w.set(&k("attention.head_count"), MetaValue::U32(x.heads));
    w.set(&k("attention.head_count_kv"), MetaValue::U32(x.kv_heads));
    w.set(&k("attention.key_length"), MetaValue::U32(x.head_dim));
    w.set(&k("attention.value_length"), MetaValue::U32(x.head_dim));
    w.set(&k("rope.freq_base"), MetaValue::F32(x.rope_base));
    w.set(&k("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6));
    w.set(&k("context_length"), MetaValue::U32(40960));
    w.set(&k("vocab_size"), MetaValue::U32(x.vocab));
}

/// One Qwen3-style block; `ty = [most matrices, attn_v, ffn_down]`.
pub(super) fn add_block(
    w: &mut GgufWriter,
    i: u32,
    x: &Dims,
    ty: [GgmlType; 3],
) -> Result<(), GgufError> {
    let [base, v_ty, down_ty] = ty;
    let (d, ff) = (u64::from(x.d), u64::from(x.ff));
    let q = u64::from(x.heads * x.head_dim);
    let kv = u64::from(x.kv_heads * x.head_dim);
    let hd = u64::from(x.head_dim);
    let p = |s: &str| format!("blk.{i}.{s}");
    let f32 = GgmlType::F32;
    w.add_tensor_shape(&p("attn_norm.weight"), &[d], f32)?;
    w.add_tensor_shape(&p("attn_q.weight"), &[d, q], base)?;
    w.add_tensor_shape(&p("attn_k.weight"), &[d, kv], base)?;
    w.add_tensor_shape(&p("attn_v.weight"), &[d, kv], v_ty)?;
    w.add_tensor_shape(&p("attn_output.weight"), &[q, d], base)?;
    w.add_tensor_shape(&p("attn_q_norm.weight"), &[hd], f32)?;
    w.add_tensor_shape(&p("attn_k_norm.weight"), &[hd], f32)?;
    w.add_tensor_shape(&p("ffn_norm.weight"), &[d], f32)?;
    w.add_tensor_shape(&p("ffn_gate.weight"), &[d, ff], base)?;
    w.add_tensor_shape(&p("ffn_up.weight"), &[d, ff], base)?;
    w.add_tensor_shape(&p("ffn_down.weight"), &[ff, d], down_ty)?;
    Ok(())
}

/// llama.cpp's Q4_K_M rule for the layers whose attn_v and ffn_down get Q6_K.
pub(super) fn more_bits(i: u32, n: u32) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

pub(super) const QWEN3_8B: Dims = Dims {
    layers: 36,
    d: 4096,
    ff: 12288,
    heads: 32,
    kv_heads: 8,
    head_dim: 128,
    vocab: 151936,
    rope_base: 1e6,
};

/// Qwen3-0.6B (tied embeddings).
const QWEN3_06B: Dims = Dims {
    layers: 28,
    d: 1024,
    ff: 3072,
    heads: 16,
    kv_heads: 8,
    head_dim: 128,
    vocab: 151936,
    rope_base: 1e6,
};

/// Qwen3-8B in Q4_K_M.
fn qwen3_8b_q4_k_m() -> Result<GgufWriter, GgufError> {
    let x = &QWEN3_8B;
    let mut w = GgufWriter::new();
    set_backbone(&mut w, "qwen3", x);
    let (d, v) = (u64::from(x.d), u64::from(x.vocab));
    w.add_tensor_shape("token_embd.weight", &[d, v], GgmlType::Q4_K)?;
    for i in 0..x.layers {
        let hi = if more_bits(i, x.layers) {
            GgmlType::Q6_K
        } else {
            GgmlType::Q4_K
        };
        add_block(&mut w, i, x, [GgmlType::Q4_K, hi, hi])?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], GgmlType::F32)?;
    w.add_tensor_shape("output.weight", &[d, v], GgmlType::Q6_K)?;
    Ok(w)
}

/// A Qwen3 model in llama.cpp's Q4_0 recipe: Q4_0 matrices, a Q6_K LM head (a Q6_K
/// `token_embd` when the LM head is tied to it, as in Qwen3-0.6B).
fn qwen3_q4_0(x: &Dims) -> Result<GgufWriter, GgufError> {
    let tied = x.d < 2048;
    let mut w = GgufWriter::new();
    set_backbone(&mut w, "qwen3", x);
    let (d, v) = (u64::from(x.d), u64::from(x.vocab));
    let embd = if tied { GgmlType::Q6_K } else { GgmlType::Q4_0 };
    w.add_tensor_shape("token_embd.weight", &[d, v], embd)?;
    for i in 0..x.layers {
        add_block(&mut w, i, x, [GgmlType::Q4_0; 3])?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], GgmlType::F32)?;
    if !tied {
        w.add_tensor_shape("output.weight", &[d, v], GgmlType::Q6_K)?;
    }
    Ok(w)
}

/// Qwen3-0.6B with every layer matrix in `ty` and the tied embeddings / LM head in Q6_K, for
/// benchmarking one weight type against another at the same shape (`q4_k_m`: llama.cpp's
/// Q4_K_M rule, Q6_K attn_v and ffn_down in the layers [`more_bits`] picks; the i-quant and
/// MXFP4 presets keep one type throughout, not llama.cpp's per-tensor mix for those ftypes).
fn qwen3_06b_typed(ty: GgmlType, k_m: bool) -> Result<GgufWriter, GgufError> {
    let x = &QWEN3_06B;
    let mut w = GgufWriter::new();
    set_backbone(&mut w, "qwen3", x);
    let (d, v) = (u64::from(x.d), u64::from(x.vocab));
    w.add_tensor_shape("token_embd.weight", &[d, v], GgmlType::Q6_K)?;
    for i in 0..x.layers {
        let hi = if k_m && more_bits(i, x.layers) {
            GgmlType::Q6_K
        } else {
            ty
        };
        add_block(&mut w, i, x, [ty, hi, hi])?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], GgmlType::F32)?;
    Ok(w)
}

/// The DSpark drafter heads (`dflash` names, or the legacy PrismML names).
/// `ty` = [Markov head a, Markov head b, confidence head].
pub(super) fn add_heads(
    w: &mut GgufWriter,
    x: &Dims,
    rank: u64,
    ty: [GgmlType; 3],
    legacy: bool,
) -> Result<(), GgufError> {
    let [ty_a, ty_b, ty_conf] = ty;
    let (d, v) = (u64::from(x.d), u64::from(x.vocab));
    let n = |dflash: &'static str, prism: &'static str| if legacy { prism } else { dflash };
    w.add_tensor_shape(
        n("markov_w1.weight", "dspark.markov_head_a.weight"),
        &[rank, v],
        ty_a,
    )?;
    w.add_tensor_shape(
        n("markov_w2.weight", "dspark.markov_head_b.weight"),
        &[rank, v],
        ty_b,
    )?;
    w.add_tensor_shape(
        n("conf_proj.weight", "dspark.confidence_head.weight"),
        &[d + rank, 1],
        ty_conf,
    )?;
    w.add_tensor_shape(
        n("conf_proj.bias", "dspark.confidence_head.bias"),
        &[1],
        GgmlType::F32,
    )?;
    Ok(())
}

/// The Qwen3-8B DSpark drafter (5 layers at the target's dims, block 7, taps [2, 10, 18, 26, 34]
/// in the layer-input convention, Markov rank 256, confidence head) in Q8_0, `dflash` format,
/// embeddings and LM head borrowed from the target.
fn qwen3_8b_dspark_q8_0() -> Result<GgufWriter, GgufError> {
    dspark_q8_0(&QWEN3_8B, 5, &[2, 10, 18, 26, 34])
}

/// A Qwen3-0.6B drafter in the same layout: 2 layers, block 7, taps [1, 14, 27].
fn qwen3_06b_dspark_q8_0() -> Result<GgufWriter, GgufError> {
    dspark_q8_0(&QWEN3_06B, 2, &[1, 14, 27])
}

/// A `dflash` drafter of `layers` layers at `target`'s dimensions tapping `taps`: block 7,
/// Markov rank 256, confidence head, Q8_0, embeddings and LM head borrowed from the target.
fn dspark_q8_0(target: &Dims, layers: u32, taps: &[i32]) -> Result<GgufWriter, GgufError> {
    let x = Dims { layers, ..*target };
    let mut w = GgufWriter::new();
    set_backbone(&mut w, "dflash", &x);
    w.set("dflash.block_size", MetaValue::U32(7));
    w.set(
        "dflash.target_layers",
        MetaValue::Array(MetaArray::I32(taps.to_vec())),
    );
    w.set("dflash.target_hidden_size", MetaValue::U32(x.d));
    w.set("tokenizer.ggml.mask_token_id", MetaValue::U32(151669));
    let q8 = GgmlType::Q8_0;
    let d = u64::from(x.d);
    w.add_tensor_shape("fc.weight", &[taps.len() as u64 * d, d], q8)?;
    w.add_tensor_shape("enc.output_norm.weight", &[d], GgmlType::F32)?;
    for i in 0..x.layers {
        add_block(&mut w, i, &x, [q8; 3])?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], GgmlType::F32)?;
    add_heads(&mut w, &x, 256, [q8; 3], false)?;
    Ok(w)
}

/// The drafter of the seed report (Ternary-Bonsai-27B-dspark, legacy PrismML format): 6 layers,
/// d 5120, FFN 5120, 40/4 heads of 128, vocab 248320, γ 4, taps [1, 16, 31, 46, 61] (HF output
/// ids), rank 256, confidence head; matrices Q4_1 (its embeddings are kept, as in the report).
fn bonsai_27b_dspark_q4_1() -> Result<GgufWriter, GgufError> {
    let x = Dims {
        layers: 6,
        d: 5120,
        ff: 5120,
        heads: 40,
        kv_heads: 4,
        head_dim: 128,
        vocab: 248320,
        rope_base: 1e7,
    };
    let mut w = GgufWriter::new();
    set_backbone(&mut w, "dspark", &x);
    w.set("dspark.dspark.block_size", MetaValue::U32(4));
    w.set(
        "dspark.dspark.target_layers",
        MetaValue::Array(MetaArray::I32(vec![1, 16, 31, 46, 61])),
    );
    w.set("dspark.dspark.markov_rank", MetaValue::U32(256));
    w.set("dspark.dspark.mask_token_id", MetaValue::U32(248319));
    let q = GgmlType::Q4_1;
    let (d, v) = (u64::from(x.d), u64::from(x.vocab));
    w.add_tensor_shape("token_embd.weight", &[d, v], q)?;
    w.add_tensor_shape("dspark.fc.weight", &[5 * d, d], q)?;
    w.add_tensor_shape("dspark.hidden_norm.weight", &[d], GgmlType::F32)?;
    for i in 0..x.layers {
        add_block(&mut w, i, &x, [q; 3])?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], GgmlType::F32)?;
    w.add_tensor_shape("output.weight", &[d, v], q)?;
    add_heads(&mut w, &x, 256, [q; 3], true)?;
    Ok(w)
}
