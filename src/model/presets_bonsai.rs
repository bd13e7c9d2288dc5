//! The Bonsai presets: PrismML's 1-bit and ternary models and the seed report's drafter, from
//! their published dimensions (the Hugging Face model cards `prism-ml/Bonsai-8B-gguf` and
//! `prism-ml/Ternary-Bonsai-8B-gguf`; Bonsai-27B is Qwen3.6-27B, a `qwen35` hybrid, whose
//! dimensions are Qwen3.6-27B's `config.json`; the drafter's are the seed report's log).
//!
//! - Bonsai-8B (Q1_0) and Ternary-Bonsai-8B (Q2_0, PrismML's 128-element layout under id 42):
//!   Qwen3-8B, 36 layers, d 4096, 32 / 8 heads of 128, FFN 12288, vocabulary 151669, YaRN ×4
//!   from 16384 (context 65536); every matrix, embeddings and LM head included, in the 1-bit /
//!   ternary type, norms F32.
//! - Ternary-Bonsai-27B (Q2_0, 128-element layout): `qwen35`, 64 layers of which every fourth is
//!   gated full attention (24 / 4 heads of 256, 64 rotary dims in sections [11, 11, 10, 0]) and
//!   the other 48 Gated DeltaNet (16 key heads, 48 value heads of 128, conv kernel 4), FFN
//!   17408, vocabulary 248320. The multi-token-prediction block is left out.
//! - The seed's drafter (legacy PrismML `dspark`): 6 layers, d 5120, FFN 5120, 40 / 4 heads of
//!   128, vocabulary 248320 without a tokenizer, γ 4, mask 248319, taps [1, 16, 31, 46, 61],
//!   Markov rank 256, confidence head, log-SNR conditioning (range −9..9), `token_embd` and `fc`
//!   in the 128-element Q2_0, a BF16 `markov_head_a`, Q4_1 elsewhere.

use super::{add_block, add_heads, set_backbone, Dims, QWEN3_8B};
use crate::gguf::{GgmlType, GgufError, GgufWriter, MetaArray, MetaValue};

/// Bonsai-8B with every matrix in `ty`.
pub(super) fn bonsai_8b(ty: GgmlType) -> Result<GgufWriter, GgufError> {
    let x = Dims {
        vocab: 151669,
        ..QWEN3_8B
    };
    let mut w = GgufWriter::new();
    set_backbone(&mut w, "qwen3", &x);
    w.set("qwen3.context_length", MetaValue::U32(65536));
    w.set("qwen3.rope.scaling.type", MetaValue::String("yarn".into()));
    w.set("qwen3.rope.scaling.factor", MetaValue::F32(4.0));
    w.set(
        "qwen3.rope.scaling.original_context_length",
        MetaValue::U32(16384),
    );
    let (d, v) = (u64::from(x.d), u64::from(x.vocab));
    w.add_tensor_shape("token_embd.weight", &[d, v], ty)?;
    for i in 0..x.layers {
        add_block(&mut w, i, &x, [ty; 3])?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], GgmlType::F32)?;
    w.add_tensor_shape("output.weight", &[d, v], ty)?;
    Ok(w)
}

/// Ternary-Bonsai-27B: `qwen35`, matrices in PrismML's 128-element Q2_0.
pub(super) fn ternary_bonsai_27b_q2_0() -> Result<GgufWriter, GgufError> {
    let (d, ff, vocab, layers) = (5120u64, 17408u64, 248320u64, 64u32);
    let (heads, kv_heads, head_dim) = (24u64, 4u64, 256u64);
    let (k_heads, v_heads, state) = (16u64, 48u64, 128u64);
    let (key_dim, value_dim) = (k_heads * state, v_heads * state);
    let conv_dim = 2 * key_dim + value_dim;
    let q2 = GgmlType::Q2_0_G128;
    let f32 = GgmlType::F32;
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("qwen35.{s}");
    w.set("general.architecture", MetaValue::String("qwen35".into()));
    w.set(&k("context_length"), MetaValue::U32(262144));
    w.set(&k("embedding_length"), MetaValue::U32(d as u32));
    w.set(&k("block_count"), MetaValue::U32(layers));
    w.set(&k("feed_forward_length"), MetaValue::U32(ff as u32));
    w.set(&k("attention.head_count"), MetaValue::U32(heads as u32));
    w.set(
        &k("attention.head_count_kv"),
        MetaValue::U32(kv_heads as u32),
    );
    w.set(&k("attention.key_length"), MetaValue::U32(head_dim as u32));
    w.set(
        &k("attention.value_length"),
        MetaValue::U32(head_dim as u32),
    );
    w.set(&k("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6));
    w.set(&k("rope.dimension_count"), MetaValue::U32(64));
    w.set(
        &k("rope.dimension_sections"),
        MetaValue::Array(MetaArray::I32(vec![11, 11, 10, 0])),
    );
    w.set(&k("rope.freq_base"), MetaValue::F32(1e7));
    w.set(&k("ssm.conv_kernel"), MetaValue::U32(4));
    w.set(&k("ssm.state_size"), MetaValue::U32(state as u32));
    w.set(&k("ssm.group_count"), MetaValue::U32(k_heads as u32));
    w.set(&k("ssm.time_step_rank"), MetaValue::U32(v_heads as u32));
    w.set(&k("ssm.inner_size"), MetaValue::U32(value_dim as u32));
    w.set(&k("full_attention_interval"), MetaValue::U32(4));
    w.set(&k("vocab_size"), MetaValue::U32(vocab as u32));
    w.add_tensor_shape("token_embd.weight", &[d, vocab], q2)?;
    for i in 0..layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        w.add_tensor_shape(&p("attn_norm.weight"), &[d], f32)?;
        w.add_tensor_shape(&p("post_attention_norm.weight"), &[d], f32)?;
        if (i + 1) % 4 == 0 {
            // Gated full attention: q and its output gate interleaved per head.
            w.add_tensor_shape(&p("attn_q.weight"), &[d, 2 * heads * head_dim], q2)?;
            w.add_tensor_shape(&p("attn_k.weight"), &[d, kv_heads * head_dim], q2)?;
            w.add_tensor_shape(&p("attn_v.weight"), &[d, kv_heads * head_dim], q2)?;
            w.add_tensor_shape(&p("attn_output.weight"), &[heads * head_dim, d], q2)?;
            w.add_tensor_shape(&p("attn_q_norm.weight"), &[head_dim], f32)?;
            w.add_tensor_shape(&p("attn_k_norm.weight"), &[head_dim], f32)?;
        } else {
            // Gated DeltaNet.
            w.add_tensor_shape(&p("attn_qkv.weight"), &[d, conv_dim], q2)?;
            w.add_tensor_shape(&p("attn_gate.weight"), &[d, value_dim], q2)?;
            w.add_tensor_shape(&p("ssm_beta.weight"), &[d, v_heads], q2)?;
            w.add_tensor_shape(&p("ssm_alpha.weight"), &[d, v_heads], q2)?;
            w.add_tensor_shape(&p("ssm_conv1d.weight"), &[4, conv_dim], f32)?;
            w.add_tensor_shape(&p("ssm_dt.bias"), &[v_heads], f32)?;
            w.add_tensor_shape(&p("ssm_a"), &[v_heads], f32)?;
            w.add_tensor_shape(&p("ssm_norm.weight"), &[state], f32)?;
            w.add_tensor_shape(&p("ssm_out.weight"), &[value_dim, d], q2)?;
        }
        w.add_tensor_shape(&p("ffn_gate.weight"), &[d, ff], q2)?;
        w.add_tensor_shape(&p("ffn_up.weight"), &[d, ff], q2)?;
        w.add_tensor_shape(&p("ffn_down.weight"), &[ff, d], q2)?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], f32)?;
    w.add_tensor_shape("output.weight", &[d, vocab], q2)?;
    Ok(w)
}

/// The seed's drafter, `Ternary-Bonsai-27B-dspark-Q4_1.gguf`, as its log describes it.
pub(super) fn ternary_bonsai_27b_dspark_q4_1() -> Result<GgufWriter, GgufError> {
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
    w.set("tokenizer.ggml.model", MetaValue::String("none".into()));
    let k = |s: &str| format!("dspark.dspark.{s}");
    w.set(&k("block_size"), MetaValue::U32(4));
    w.set(
        &k("target_layers"),
        MetaValue::Array(MetaArray::I32(vec![1, 16, 31, 46, 61])),
    );
    w.set(&k("markov_rank"), MetaValue::U32(256));
    w.set(&k("mask_token_id"), MetaValue::U32(248319));
    w.set(&k("log_snr_conditioning"), MetaValue::Bool(true));
    w.set(&k("min_log_snr"), MetaValue::F32(-9.0));
    w.set(&k("max_log_snr"), MetaValue::F32(9.0));
    let (q4, q2, f32) = (GgmlType::Q4_1, GgmlType::Q2_0_G128, GgmlType::F32);
    let (d, v, rank) = (u64::from(x.d), u64::from(x.vocab), 256u64);
    w.add_tensor_shape("token_embd.weight", &[d, v], q2)?;
    w.add_tensor_shape("dspark.fc.weight", &[5 * d, d], q2)?;
    w.add_tensor_shape("dspark.hidden_norm.weight", &[d], f32)?;
    w.add_tensor_shape("dspark.log_snr_fc1.weight", &[128, d], f32)?;
    w.add_tensor_shape("dspark.log_snr_fc1.bias", &[d], f32)?;
    w.add_tensor_shape("dspark.log_snr_fc2.weight", &[d, d], q4)?;
    w.add_tensor_shape("dspark.log_snr_fc2.bias", &[d], f32)?;
    for i in 0..x.layers {
        add_block(&mut w, i, &x, [q4; 3])?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], f32)?;
    w.add_tensor_shape("output.weight", &[d, v], q4)?;
    add_heads(&mut w, &x, rank, [GgmlType::BF16, q4, f32], true)?;
    Ok(w)
}
