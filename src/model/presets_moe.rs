//! Mixture-of-experts presets: shape-only (or random-weight) files at the published dimensions
//! of Qwen3-30B-A3B (`qwen3moe`; Hugging Face `Qwen/Qwen3-30B-A3B` config.json: 48 layers,
//! hidden 2048, 32 q / 4 KV heads of 128, 128 experts, 8 used, expert width 768, vocabulary
//! 151936) and Qwen3.5-35B-A3B (`qwen35moe`; `Qwen/Qwen3.5-35B-A3B` config.json: 40 layers, 3
//! Gated DeltaNet then 1 gated attention, hidden 2048, 16 q / 2 KV heads of 256 with 64 rotated
//! dims, DeltaNet 16 k heads / 32 v heads of 128, 256 experts, 8 used, expert and shared-expert
//! width 512, vocabulary 248320), in Q4_K_M and Q2_K, each tensor with the type llama.cpp's
//! recipe gives it (approximately: attention v and every down projection one step up in the
//! layers `more_bits` picks; routers and norms F32), and `qwen3moe-tiny-q8_0`, a small random
//! MoE (4 layers, hidden 256, 16 experts, 4 used) that runs on a CPU driver, also in MXFP4
//! (`qwen3moe-tiny-mxfp4`, every matrix and the experts MXFP4, as `MXFP4_MOE --pure` files
//! are) and IQ4_NL (`qwen3moe-tiny-iq4_nl`); their 128-wide expert rows are 4 blocks of 32;
//! `qwen35moe-tiny-q8_0`, its hybrid counterpart with a shared expert and, as the published
//! Qwen3.5/3.6 MoE files, no dense `feed_forward_length`.

use super::{more_bits, set_backbone, Dims};
use crate::gguf::{GgmlType, GgufError, GgufWriter, MetaArray, MetaValue};

/// The MoE presets `flint gguf preset` knows.
pub const MOE_PRESETS: [&str; 8] = [
    "qwen3-30b-a3b-q4_k_m",
    "qwen3-30b-a3b-q2_k",
    "qwen35-35b-a3b-q4_k_m",
    "qwen35-35b-a3b-q2_k",
    "qwen3moe-tiny-q8_0",
    "qwen3moe-tiny-mxfp4",
    "qwen3moe-tiny-iq4_nl",
    "qwen35moe-tiny-q8_0",
];

/// The writer of MoE preset `name`, if it is one.
pub fn moe_preset_writer(name: &str) -> Option<Result<GgufWriter, GgufError>> {
    use GgmlType::{IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q6_K, Q8_0};
    Some(match name {
        "qwen3-30b-a3b-q4_k_m" => qwen3moe(&QWEN3_30B_A3B, Quant::new(Q4_K, Q6_K, Q6_K)),
        "qwen3-30b-a3b-q2_k" => qwen3moe(&QWEN3_30B_A3B, Quant::new(Q2_K, Q3_K, Q6_K)),
        "qwen35-35b-a3b-q4_k_m" => qwen35moe(&QWEN35_35B_A3B, Quant::new(Q4_K, Q6_K, Q6_K)),
        "qwen35-35b-a3b-q2_k" => qwen35moe(&QWEN35_35B_A3B, Quant::new(Q2_K, Q3_K, Q6_K)),
        "qwen35moe-tiny-q8_0" => qwen35moe(&QWEN35MOE_TINY, Quant::new(Q8_0, Q8_0, Q8_0)),
        "qwen3moe-tiny-q8_0" => qwen3moe(&QWEN3MOE_TINY, Quant::new(Q8_0, Q8_0, Q8_0)),
        "qwen3moe-tiny-mxfp4" => qwen3moe(&QWEN3MOE_TINY, Quant::new(MXFP4, MXFP4, MXFP4)),
        "qwen3moe-tiny-iq4_nl" => qwen3moe(&QWEN3MOE_TINY, Quant::new(IQ4_NL, IQ4_NL, IQ4_NL)),
        _ => return None,
    })
}

/// Types of one recipe: most matrices, the "more bits" ones (attn_v, down projections in the
/// layers `more_bits` picks), and the LM head.
#[derive(Clone, Copy)]
struct Quant {
    base: GgmlType,
    hi: GgmlType,
    head: GgmlType,
}

impl Quant {
    const fn new(base: GgmlType, hi: GgmlType, head: GgmlType) -> Quant {
        Quant { base, hi, head }
    }
    fn hi_if(&self, i: u32, n: u32) -> GgmlType {
        if self.base == GgmlType::Q8_0 || !more_bits(i, n) {
            self.base
        } else {
            self.hi
        }
    }
}

/// Expert shape: experts, used, expert width.
struct Experts {
    n: u64,
    used: u32,
    ff: u64,
}

struct MoeDims {
    dims: Dims,
    experts: Experts,
}

const QWEN3_30B_A3B: MoeDims = MoeDims {
    dims: Dims {
        layers: 48,
        d: 2048,
        ff: 6144,
        heads: 32,
        kv_heads: 4,
        head_dim: 128,
        vocab: 151936,
        rope_base: 1e6,
    },
    experts: Experts {
        n: 128,
        used: 8,
        ff: 768,
    },
};

const QWEN3MOE_TINY: MoeDims = MoeDims {
    dims: Dims {
        layers: 4,
        d: 256,
        ff: 512,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        vocab: 512,
        rope_base: 1e6,
    },
    experts: Experts {
        n: 16,
        used: 4,
        ff: 128,
    },
};

fn set_experts(w: &mut GgufWriter, arch: &str, e: &Experts) {
    let k = |s: &str| format!("{arch}.{s}");
    w.set(&k("expert_count"), MetaValue::U32(e.n as u32));
    w.set(&k("expert_used_count"), MetaValue::U32(e.used));
    w.set(
        &k("expert_feed_forward_length"),
        MetaValue::U32(e.ff as u32),
    );
}

/// Router and routed experts of layer `i` (`[d, E]` F32; gate/up `[d, f, E]`, down
/// `[f, d, E]`).
fn add_experts(
    w: &mut GgufWriter,
    i: u32,
    d: u64,
    e: &Experts,
    ty: [GgmlType; 2],
) -> Result<(), GgufError> {
    let p = |s: &str| format!("blk.{i}.{s}");
    w.add_tensor_shape(&p("ffn_gate_inp.weight"), &[d, e.n], GgmlType::F32)?;
    w.add_tensor_shape(&p("ffn_gate_exps.weight"), &[d, e.ff, e.n], ty[0])?;
    w.add_tensor_shape(&p("ffn_up_exps.weight"), &[d, e.ff, e.n], ty[0])?;
    w.add_tensor_shape(&p("ffn_down_exps.weight"), &[e.ff, d, e.n], ty[1])?;
    Ok(())
}

fn qwen3moe(x: &MoeDims, q: Quant) -> Result<GgufWriter, GgufError> {
    let (dims, e) = (&x.dims, &x.experts);
    let mut w = GgufWriter::new();
    set_backbone(&mut w, "qwen3moe", dims);
    set_experts(&mut w, "qwen3moe", e);
    let (d, v) = (u64::from(dims.d), u64::from(dims.vocab));
    let q_dim = u64::from(dims.heads * dims.head_dim);
    let kv = u64::from(dims.kv_heads * dims.head_dim);
    let hd = u64::from(dims.head_dim);
    let f32 = GgmlType::F32;
    w.add_tensor_shape("token_embd.weight", &[d, v], q.base)?;
    for i in 0..dims.layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        let hi = q.hi_if(i, dims.layers);
        w.add_tensor_shape(&p("attn_norm.weight"), &[d], f32)?;
        w.add_tensor_shape(&p("attn_q.weight"), &[d, q_dim], q.base)?;
        w.add_tensor_shape(&p("attn_k.weight"), &[d, kv], q.base)?;
        w.add_tensor_shape(&p("attn_v.weight"), &[d, kv], hi)?;
        w.add_tensor_shape(&p("attn_output.weight"), &[q_dim, d], q.base)?;
        w.add_tensor_shape(&p("attn_q_norm.weight"), &[hd], f32)?;
        w.add_tensor_shape(&p("attn_k_norm.weight"), &[hd], f32)?;
        w.add_tensor_shape(&p("ffn_norm.weight"), &[d], f32)?;
        add_experts(&mut w, i, d, e, [q.base, hi])?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], f32)?;
    w.add_tensor_shape("output.weight", &[d, v], q.head)?;
    Ok(w)
}

/// A qwen35moe shape: hidden, vocabulary, layers (every 4th attention), attention heads / KV
/// heads / head size / rotated dims / rope sections, DeltaNet k heads / v heads / head size,
/// experts, shared-expert width, and the dense `feed_forward_length` written (0 as in the
/// published GGUF conversions, which have no dense FFN).
struct Qwen35Moe {
    d: u64,
    vocab: u64,
    layers: u32,
    attn: [u64; 4],
    sections: [i32; 4],
    delta: [u64; 3],
    experts: Experts,
    shexp: u64,
    dense_ff: u64,
}

const QWEN35_35B_A3B: Qwen35Moe = Qwen35Moe {
    d: 2048,
    vocab: 248320,
    layers: 40,
    attn: [16, 2, 256, 64],
    sections: [11, 11, 10, 0],
    delta: [16, 32, 128],
    experts: Experts {
        n: 256,
        used: 8,
        ff: 512,
    },
    shexp: 512,
    dense_ff: 512,
};

/// `qwen35moe-tiny-q8_0`: 4 layers (3 DeltaNet, 1 attention), hidden 256, 16 experts of 128
/// (4 used) and a 128-wide shared expert, vocabulary 512, no dense `feed_forward_length`.
const QWEN35MOE_TINY: Qwen35Moe = Qwen35Moe {
    d: 256,
    vocab: 512,
    layers: 4,
    attn: [4, 2, 64, 32],
    sections: [6, 5, 5, 0],
    delta: [2, 4, 32],
    experts: Experts {
        n: 16,
        used: 4,
        ff: 128,
    },
    shexp: 128,
    dense_ff: 0,
};

fn qwen35moe(x: &Qwen35Moe, q: Quant) -> Result<GgufWriter, GgufError> {
    let (d, vocab, layers) = (x.d, x.vocab, x.layers);
    let [heads, kv_heads, head_dim, rope_dims] = x.attn;
    let [k_heads, v_heads, head_k] = x.delta;
    let (head_v, d_conv) = (head_k, 4u64);
    let (key_dim, value_dim) = (k_heads * head_k, v_heads * head_v);
    let conv_dim = 2 * key_dim + value_dim;
    let (e, sf) = (&x.experts, x.shexp);
    let f32 = GgmlType::F32;
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("qwen35moe.{s}");
    let u = |v: u64| MetaValue::U32(v as u32);
    w.set(
        "general.architecture",
        MetaValue::String("qwen35moe".into()),
    );
    for (key, v) in [
        ("context_length", 262144),
        ("embedding_length", d),
        ("block_count", u64::from(layers)),
        ("feed_forward_length", x.dense_ff),
        ("expert_shared_feed_forward_length", sf),
        ("attention.head_count", heads),
        ("attention.head_count_kv", kv_heads),
        ("attention.key_length", head_dim),
        ("attention.value_length", head_dim),
        ("rope.dimension_count", rope_dims),
        ("ssm.conv_kernel", d_conv),
        ("ssm.state_size", head_k),
        ("ssm.group_count", k_heads),
        ("ssm.time_step_rank", v_heads),
        ("ssm.inner_size", value_dim),
        ("full_attention_interval", 4),
        ("vocab_size", vocab),
    ] {
        w.set(&k(key), u(v));
    }
    set_experts(&mut w, "qwen35moe", e);
    w.set(&k("attention.layer_norm_rms_epsilon"), MetaValue::F32(1e-6));
    w.set(&k("rope.freq_base"), MetaValue::F32(1e7));
    w.set(
        &k("rope.dimension_sections"),
        MetaValue::Array(MetaArray::I32(x.sections.to_vec())),
    );
    w.add_tensor_shape("token_embd.weight", &[d, vocab], q.base)?;
    for i in 0..layers {
        let p = |s: &str| format!("blk.{i}.{s}");
        let hi = q.hi_if(i, layers);
        w.add_tensor_shape(&p("attn_norm.weight"), &[d], f32)?;
        w.add_tensor_shape(&p("post_attention_norm.weight"), &[d], f32)?;
        if (i + 1) % 4 == 0 {
            w.add_tensor_shape(&p("attn_q.weight"), &[d, 2 * heads * head_dim], q.base)?;
            w.add_tensor_shape(&p("attn_k.weight"), &[d, kv_heads * head_dim], q.base)?;
            w.add_tensor_shape(&p("attn_v.weight"), &[d, kv_heads * head_dim], hi)?;
            w.add_tensor_shape(&p("attn_output.weight"), &[heads * head_dim, d], q.base)?;
            w.add_tensor_shape(&p("attn_q_norm.weight"), &[head_dim], f32)?;
            w.add_tensor_shape(&p("attn_k_norm.weight"), &[head_dim], f32)?;
        } else {
            w.add_tensor_shape(&p("attn_qkv.weight"), &[d, conv_dim], q.base)?;
            w.add_tensor_shape(&p("attn_gate.weight"), &[d, value_dim], q.base)?;
            w.add_tensor_shape(&p("ssm_beta.weight"), &[d, v_heads], f32)?;
            w.add_tensor_shape(&p("ssm_alpha.weight"), &[d, v_heads], f32)?;
            w.add_tensor_shape(&p("ssm_conv1d.weight"), &[d_conv, conv_dim], f32)?;
            w.add_tensor_shape(&p("ssm_dt.bias"), &[v_heads], f32)?;
            w.add_tensor_shape(&p("ssm_a"), &[v_heads], f32)?;
            w.add_tensor_shape(&p("ssm_norm.weight"), &[head_v], f32)?;
            w.add_tensor_shape(&p("ssm_out.weight"), &[value_dim, d], q.base)?;
        }
        add_experts(&mut w, i, d, e, [q.base, hi])?;
        w.add_tensor_shape(&p("ffn_gate_shexp.weight"), &[d, sf], q.base)?;
        w.add_tensor_shape(&p("ffn_up_shexp.weight"), &[d, sf], q.base)?;
        w.add_tensor_shape(&p("ffn_down_shexp.weight"), &[sf, d], hi)?;
        w.add_tensor_shape(&p("ffn_gate_inp_shexp.weight"), &[d], f32)?;
    }
    w.add_tensor_shape("output_norm.weight", &[d], f32)?;
    w.add_tensor_shape("output.weight", &[d, vocab], q.head)?;
    Ok(w)
}
