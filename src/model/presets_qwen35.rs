//! `qwen35-0.8b-q4_0`: a `qwen35` hybrid at the published dimensions of Qwen3.5-0.8B (Hugging
//! Face `Qwen/Qwen3.5-0.8B`, `config.json` `text_config`,
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

/// Qwen3.5-0.8B in llama.cpp's Q4_0 recipe.
pub(super) fn qwen35_08b_q4_0() -> Result<GgufWriter, GgufError> {
    let (d, ff, vocab, layers) = (1024u64, 3584u64, 248320u64, 24u32);
    let (heads, kv_heads, head_dim) = (8u64, 2u64, 256u64);
    let (k_heads, v_heads, state, d_conv) = (16u64, 16u64, 128u64, 4u64);
    // key_dim 2048, value_dim 2048, conv_dim 2·2048 + 2048 = 6144.
    let (key_dim, value_dim) = (k_heads * state, v_heads * state);
    let conv_dim = 2 * key_dim + value_dim;
    let (q4, f32) = (GgmlType::Q4_0, GgmlType::F32);
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("qwen35.{s}");
    let u = |v: u64| MetaValue::U32(v as u32);
    w.set("general.architecture", MetaValue::String("qwen35".into()));
    for (key, v) in [
        ("context_length", 262144),
        ("embedding_length", d),
        ("block_count", u64::from(layers)),
        ("feed_forward_length", ff),
        ("attention.head_count", heads),
        ("attention.head_count_kv", kv_heads),
        ("attention.key_length", head_dim),
        ("attention.value_length", head_dim),
        ("rope.dimension_count", head_dim / 4),
        ("ssm.conv_kernel", d_conv),
        ("ssm.state_size", state),
        ("ssm.group_count", k_heads),
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
        MetaValue::Array(MetaArray::I32(vec![11, 11, 10, 0])),
    );
    // Tied: the embedding is the LM head, so it takes the output tensor's Q6_K.
    w.add_tensor_shape("token_embd.weight", &[d, vocab], GgmlType::Q6_K)?;
    for i in 0..layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        w.add_tensor_shape(&p("attn_norm.weight"), &[d], f32)?;
        w.add_tensor_shape(&p("post_attention_norm.weight"), &[d], f32)?;
        if (i + 1) % 4 == 0 {
            // Gated full attention: q and its output gate interleaved per head.
            w.add_tensor_shape(&p("attn_q.weight"), &[d, 2 * heads * head_dim], q4)?;
            w.add_tensor_shape(&p("attn_k.weight"), &[d, kv_heads * head_dim], q4)?;
            w.add_tensor_shape(&p("attn_v.weight"), &[d, kv_heads * head_dim], q4)?;
            w.add_tensor_shape(&p("attn_output.weight"), &[heads * head_dim, d], q4)?;
            w.add_tensor_shape(&p("attn_q_norm.weight"), &[head_dim], f32)?;
            w.add_tensor_shape(&p("attn_k_norm.weight"), &[head_dim], f32)?;
        } else {
            // Gated DeltaNet.
            w.add_tensor_shape(&p("attn_qkv.weight"), &[d, conv_dim], q4)?;
            w.add_tensor_shape(&p("attn_gate.weight"), &[d, value_dim], q4)?;
            w.add_tensor_shape(&p("ssm_beta.weight"), &[d, v_heads], q4)?;
            w.add_tensor_shape(&p("ssm_alpha.weight"), &[d, v_heads], q4)?;
            w.add_tensor_shape(&p("ssm_conv1d.weight"), &[d_conv, conv_dim], f32)?;
            w.add_tensor_shape(&p("ssm_dt.bias"), &[v_heads], f32)?;
            w.add_tensor_shape(&p("ssm_a"), &[v_heads], f32)?;
            w.add_tensor_shape(&p("ssm_norm.weight"), &[state], f32)?;
            w.add_tensor_shape(&p("ssm_out.weight"), &[value_dim, d], q4)?;
        }
        w.add_tensor_shape(&p("ffn_gate.weight"), &[d, ff], q4)?;
        w.add_tensor_shape(&p("ffn_up.weight"), &[d, ff], q4)?;
        w.add_tensor_shape(&p("ffn_down.weight"), &[ff, d], q4)?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], f32)?;
    Ok(w)
}
