//! The `qwen35` presets, one builder for all: `qwen35-tiny-*` (below) and `qwen35-0.8b-q4_0`,
//! a hybrid at the published dimensions of Qwen3.5-0.8B (Hugging Face `Qwen/Qwen3.5-0.8B`,
//! `config.json` `text_config`,
//! <https://huggingface.co/Qwen/Qwen3.5-0.8B/blob/main/config.json>): 24 layers, every fourth
//! gated full attention (8 q / 2 KV heads of 256, `partial_rotary_factor` 0.25 so 64 rotated
//! dims in M-RoPE sections [11, 11, 10], `rope_theta` 1e7) and the other 18 Gated DeltaNet
//! (16 key heads and 16 value heads of 128, conv kernel 4), hidden 1024, FFN 3584, vocabulary
//! 248320, tied embeddings (`tie_word_embeddings`: no `output.weight`).
//!
//! Types as llama.cpp's quantizer gives them for `Q4_0` (`src/llama-quant.cpp`,
//! <https://github.com/ggml-org/llama.cpp/blob/master/src/llama-quant.cpp>): every 2-D `weight`
//! matrix Q4_0 (`ssm_alpha` / `ssm_beta` included; every row length here is a multiple of the
//! 32-element block, so no fallback type is needed); the tied `token_embd`, which is also the
//! LM head, takes the output tensor's type, Q6_K (1024 is a multiple of its 256-element block);
//! norms, `ssm_conv1d` (never quantized), `ssm_a` and `ssm_dt.bias` (1-D) stay F32. The
//! multi-token-prediction block is left out, as llama.cpp's main pass skips it.

use crate::gguf::{GgmlType, GgufError, GgufWriter, MetaArray, MetaValue};

/// A `qwen35` hybrid's dimensions and tensor types: every fourth layer gated full attention, the
/// others Gated DeltaNet.
struct Shape {
    ctx: u64,
    d: u64,
    ff: u64,
    vocab: u64,
    layers: u32,
    /// Attention: q heads, KV heads, head size, rotated dims and their M-RoPE sections.
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    rope_dims: u64,
    sections: [i32; 4],
    /// DeltaNet: q/k heads, v heads, their sizes, the conv kernel.
    k_heads: u64,
    v_heads: u64,
    head_k: u64,
    head_v: u64,
    d_conv: u64,
    /// Every matrix but the embedding; the embedding; the LM head (`None`: tied).
    matrix: GgmlType,
    embd: GgmlType,
    output: Option<GgmlType>,
}

/// The GGUF of `s` (norms, conv taps, `ssm_a` and `ssm_dt` F32).
fn qwen35(s: &Shape) -> Result<GgufWriter, GgufError> {
    let (d, ff, vocab, layers) = (s.d, s.ff, s.vocab, s.layers);
    let (heads, kv_heads, head_dim) = (s.heads, s.kv_heads, s.head_dim);
    let (v_heads, d_conv) = (s.v_heads, s.d_conv);
    let (key_dim, value_dim) = (s.k_heads * s.head_k, v_heads * s.head_v);
    let conv_dim = 2 * key_dim + value_dim;
    let (ty, f32) = (s.matrix, GgmlType::F32);
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("qwen35.{s}");
    let u = |v: u64| MetaValue::U32(v as u32);
    w.set("general.architecture", MetaValue::String("qwen35".into()));
    for (key, v) in [
        ("context_length", s.ctx),
        ("embedding_length", d),
        ("block_count", u64::from(layers)),
        ("feed_forward_length", ff),
        ("attention.head_count", heads),
        ("attention.head_count_kv", kv_heads),
        ("attention.key_length", head_dim),
        ("attention.value_length", head_dim),
        ("rope.dimension_count", s.rope_dims),
        ("ssm.conv_kernel", d_conv),
        ("ssm.state_size", s.head_k),
        ("ssm.group_count", s.k_heads),
        ("ssm.time_step_rank", v_heads),
        ("ssm.inner_size", value_dim),
        ("full_attention_interval", 4),
        ("vocab_size", vocab),
    ] {
        w.set(&k(key), u(v));
    }
    w.set(&k("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6));
    w.set(&k("rope.freq_base"), MetaValue::F32(1e7));
    w.set(
        &k("rope.dimension_sections"),
        MetaValue::Array(MetaArray::I32(s.sections.to_vec())),
    );
    w.add_tensor_shape("token_embd.weight", &[d, vocab], s.embd)?;
    for i in 0..layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        w.add_tensor_shape(&p("attn_norm.weight"), &[d], f32)?;
        w.add_tensor_shape(&p("post_attention_norm.weight"), &[d], f32)?;
        if (i + 1) % 4 == 0 {
            // Gated full attention: q and its output gate interleaved per head.
            w.add_tensor_shape(&p("attn_q.weight"), &[d, 2 * heads * head_dim], ty)?;
            w.add_tensor_shape(&p("attn_k.weight"), &[d, kv_heads * head_dim], ty)?;
            w.add_tensor_shape(&p("attn_v.weight"), &[d, kv_heads * head_dim], ty)?;
            w.add_tensor_shape(&p("attn_output.weight"), &[heads * head_dim, d], ty)?;
            w.add_tensor_shape(&p("attn_q_norm.weight"), &[head_dim], f32)?;
            w.add_tensor_shape(&p("attn_k_norm.weight"), &[head_dim], f32)?;
        } else {
            // Gated DeltaNet.
            w.add_tensor_shape(&p("attn_qkv.weight"), &[d, conv_dim], ty)?;
            w.add_tensor_shape(&p("attn_gate.weight"), &[d, value_dim], ty)?;
            w.add_tensor_shape(&p("ssm_beta.weight"), &[d, v_heads], ty)?;
            w.add_tensor_shape(&p("ssm_alpha.weight"), &[d, v_heads], ty)?;
            w.add_tensor_shape(&p("ssm_conv1d.weight"), &[d_conv, conv_dim], f32)?;
            w.add_tensor_shape(&p("ssm_dt.bias"), &[v_heads], f32)?;
            w.add_tensor_shape(&p("ssm_a"), &[v_heads], f32)?;
            w.add_tensor_shape(&p("ssm_norm.weight"), &[s.head_v], f32)?;
            w.add_tensor_shape(&p("ssm_out.weight"), &[value_dim, d], ty)?;
        }
        w.add_tensor_shape(&p("ffn_gate.weight"), &[d, ff], ty)?;
        w.add_tensor_shape(&p("ffn_up.weight"), &[d, ff], ty)?;
        w.add_tensor_shape(&p("ffn_down.weight"), &[ff, d], ty)?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], f32)?;
    if let Some(out) = s.output {
        w.add_tensor_shape("output.weight", &[d, vocab], out)?;
    }
    Ok(w)
}

/// Qwen3.5-0.8B in llama.cpp's Q4_0 recipe (key_dim 2048, value_dim 2048, conv_dim 6144).
pub(super) fn qwen35_08b_q4_0() -> Result<GgufWriter, GgufError> {
    qwen35(&Shape {
        ctx: 262144,
        d: 1024,
        ff: 3584,
        vocab: 248320,
        layers: 24,
        heads: 8,
        kv_heads: 2,
        head_dim: 256,
        rope_dims: 64,
        sections: [11, 11, 10, 0],
        k_heads: 16,
        v_heads: 16,
        head_k: 128,
        head_v: 128,
        d_conv: 4,
        matrix: GgmlType::Q4_0,
        // Tied: the embedding is the LM head, so it takes the output tensor's Q6_K.
        embd: GgmlType::Q6_K,
        output: None,
    })
}

/// A tiny `qwen35` hybrid with every matrix in `ty` (norms, conv taps, `ssm_a` and `ssm_dt`
/// F32): d 64, 8 layers of which 3 and 7 are gated attention (4 / 2 heads of 32, 16 rotary
/// dims in sections [3, 3, 2, 0], base 1e7) and the others Gated DeltaNet (2 q/k heads of 16,
/// 4 v heads of 32, conv kernel 4), FFN 128, vocabulary 512, separate LM head.
///
/// The 1-bit / ternary variants (Q1_0, PrismML's legacy 128-element Q2_0: the seed's Bonsai
/// types) take d 128 and FFN 256, every quantized row a whole number of 128-element blocks.
pub(super) fn qwen35_tiny(ty: GgmlType) -> Result<GgufWriter, GgufError> {
    let d = if matches!(ty, GgmlType::F32 | GgmlType::Q8_0) {
        64
    } else {
        128
    };
    qwen35(&Shape {
        ctx: 4096,
        d,
        ff: 2 * d,
        vocab: 512,
        layers: 8,
        heads: 4,
        kv_heads: 2,
        head_dim: 32,
        rope_dims: 16,
        sections: [3, 3, 2, 0],
        k_heads: 2,
        v_heads: 4,
        head_k: 16,
        head_v: 32,
        d_conv: 4,
        matrix: ty,
        embd: ty,
        output: Some(ty),
    })
}
