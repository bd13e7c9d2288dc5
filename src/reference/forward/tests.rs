//! Unit tests on tiny synthetic models written with [`GgufWriter`]: every architecture runs and
//! agrees between prefill and decode, and each option (qwen2 biases, qwen3 q/k norms, llama-3
//! rope frequency factors, a separate LM head) changes exactly what it should. The real model
//! against the fixtures: `tests/reference_forward.rs`.

use super::{Capture, ForwardError, RefModel};
use crate::gguf::{GgmlType, Gguf, GgufWriter, MetaValue};

/// SplitMix64 → uniform in [-1, 1).
struct Rng(u64);

impl Rng {
    fn f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// A 2-layer model: d 64, 4 query / 2 KV heads of 16, FFN 96, vocab 40, f32 weights from a
/// fixed seed (the same base weights whatever the options).
#[derive(Clone, Copy, Default)]
struct Tiny {
    arch: &'static str,
    /// q/k/v biases, every value this one.
    bias: Option<f32>,
    /// qwen3 q/k norm weights, every value this one.
    qk_norm: Option<f32>,
    /// `rope_freqs.weight` of `n` values, every value `f`.
    rope_freqs: Option<(u64, f32)>,
    /// A separate `output.weight` equal to `token_embd.weight`.
    untied: bool,
    /// A tensor left out.
    omit: &'static str,
}

fn tiny(t: Tiny) -> RefModel {
    try_tiny(t).unwrap()
}

fn try_tiny(t: Tiny) -> Result<RefModel, ForwardError> {
    let (d, n_head, n_kv, hd, n_ff, n_vocab) = (64u64, 4u64, 2u64, 16u64, 96u64, 40u64);
    let mut w = GgufWriter::new();
    let a = t.arch;
    w.set("general.architecture", MetaValue::String(a.into()));
    for (k, v) in [
        ("block_count", 2),
        ("embedding_length", d),
        ("attention.head_count", n_head),
    ]
    .into_iter()
    .chain([
        ("attention.head_count_kv", n_kv),
        ("feed_forward_length", n_ff),
    ])
    .chain([("vocab_size", n_vocab), ("context_length", 64)])
    {
        w.set(&format!("{a}.{k}"), MetaValue::U32(v as u32));
    }
    w.set(
        &format!("{a}.attention.layer_norm_rms_epsilon"),
        MetaValue::F32(1e-6),
    );
    w.set(&format!("{a}.rope.freq_base"), MetaValue::F32(10000.0));
    let mut rng = Rng(42);
    let mut put = |name: &str, shape: &[u64], f: &mut dyn FnMut() -> f32| {
        let vals: Vec<u8> = (0..shape.iter().product::<u64>())
            .flat_map(|_| f().to_le_bytes())
            .collect();
        if name != t.omit {
            w.add_tensor(name, shape, GgmlType::F32, vals).unwrap();
        }
    };
    let mut embd = Vec::new();
    let mut random = || rng.f32() * 0.5;
    put("token_embd.weight", &[d, n_vocab], &mut || {
        let v = random();
        embd.push(v);
        v
    });
    put("output_norm.weight", &[d], &mut || 1.0 + 0.1 * random());
    for il in 0..2 {
        let n = |s: &str| format!("blk.{il}.{s}");
        put(&n("attn_norm.weight"), &[d], &mut || 1.0 + 0.1 * random());
        put(&n("attn_q.weight"), &[d, n_head * hd], &mut random);
        put(&n("attn_k.weight"), &[d, n_kv * hd], &mut random);
        put(&n("attn_v.weight"), &[d, n_kv * hd], &mut random);
        put(&n("attn_output.weight"), &[n_head * hd, d], &mut random);
        put(&n("ffn_norm.weight"), &[d], &mut || 1.0 + 0.1 * random());
        put(&n("ffn_gate.weight"), &[d, n_ff], &mut random);
        put(&n("ffn_up.weight"), &[d, n_ff], &mut random);
        put(&n("ffn_down.weight"), &[n_ff, d], &mut random);
        if let Some(b) = t.bias {
            for (s, len) in [
                ("attn_q.bias", n_head * hd),
                ("attn_k.bias", n_kv * hd),
                ("attn_v.bias", n_kv * hd),
            ] {
                put(&n(s), &[len], &mut || b);
            }
        }
        if let Some(c) = t.qk_norm {
            put(&n("attn_q_norm.weight"), &[hd], &mut || c);
            put(&n("attn_k_norm.weight"), &[hd], &mut || c);
        }
    }
    if let Some((len, f)) = t.rope_freqs {
        put("rope_freqs.weight", &[len], &mut || f);
    }
    if t.untied {
        let mut it = embd.clone().into_iter();
        put("output.weight", &[d, n_vocab], &mut || it.next().unwrap());
    }
    let bytes = w.to_bytes().unwrap();
    RefModel::from_gguf(&Gguf::parse(&bytes).unwrap(), &bytes)
}

const TINY_IDS: [u32; 6] = [3, 17, 39, 0, 22, 5];

fn tiny_logits(m: &RefModel) -> Vec<f32> {
    m.forward_last(&mut m.new_cache(GgmlType::F32).unwrap(), &TINY_IDS, 0)
        .unwrap()
}

#[test]
fn tiny_architectures_agree_between_prefill_and_decode() {
    let llama = Tiny {
        arch: "llama",
        rope_freqs: Some((8, 2.0)),
        untied: true,
        ..Tiny::default()
    };
    let qwen2 = Tiny {
        arch: "qwen2",
        bias: Some(0.3),
        ..Tiny::default()
    };
    let qwen3 = Tiny {
        arch: "qwen3",
        qk_norm: Some(1.5),
        ..Tiny::default()
    };
    for cfg in [llama, qwen2, qwen3] {
        let m = tiny(cfg);
        let hp = &m.hp;
        assert_eq!(hp.arch.name(), cfg.arch);
        let l0 = &m.weights.layers[0];
        assert_eq!(
            (l0.bq.is_some(), l0.q_norm.is_some()),
            (cfg.bias.is_some(), cfg.qk_norm.is_some())
        );
        assert_eq!(
            (hp.rope_neox, m.weights.output.is_none()),
            (cfg.arch != "llama", !cfg.untied)
        );
        for ty in [GgmlType::F32, GgmlType::Q8_0] {
            let whole = m
                .forward_last(&mut m.new_cache(ty).unwrap(), &TINY_IDS, 0)
                .unwrap();
            let mut cache = m.new_cache(ty).unwrap();
            m.forward_last(&mut cache, &TINY_IDS[..5], 0).unwrap();
            let step = m.forward_last(&mut cache, &TINY_IDS[5..], 5).unwrap();
            assert_eq!(whole, step, "{} {ty:?}", cfg.arch);
        }
    }
}

#[test]
fn tiny_model_options_change_exactly_what_they_should() {
    let base = Tiny {
        arch: "llama",
        ..Tiny::default()
    };
    let plain = tiny_logits(&tiny(base));
    // Frequency factors of 1 are no factors; an untied head equal to token_embd is the tied one.
    let ones = Tiny {
        rope_freqs: Some((8, 1.0)),
        untied: true,
        ..base
    };
    assert_eq!(tiny_logits(&tiny(ones)), plain);
    assert_ne!(
        tiny_logits(&tiny(Tiny {
            rope_freqs: Some((8, 4.0)),
            ..base
        })),
        plain
    );
    // qwen2: zero biases change nothing, others do.
    let q2 = Tiny {
        arch: "qwen2",
        ..Tiny::default()
    };
    let q2_plain = tiny_logits(&tiny(q2));
    assert_ne!(q2_plain, plain, "NEOX rotation");
    assert_eq!(
        tiny_logits(&tiny(Tiny {
            bias: Some(0.0),
            ..q2
        })),
        q2_plain
    );
    assert_ne!(
        tiny_logits(&tiny(Tiny {
            bias: Some(0.3),
            ..q2
        })),
        q2_plain
    );
    // qwen3: q is RMS-normed per head before RoPE (which keeps each head's norm): every head of
    // q-0 has RMS = the norm weight.
    let m = tiny(Tiny {
        arch: "qwen3",
        qk_norm: Some(1.5),
        ..Tiny::default()
    });
    let cap = Capture {
        named: true,
        ..Capture::default()
    };
    let out = m
        .forward(&mut m.new_cache(GgmlType::F32).unwrap(), &TINY_IDS, 0, &cap)
        .unwrap();
    let q = &out.get("q-0").unwrap().data;
    for head in q.chunks_exact(16) {
        let rms = (head.iter().map(|v| v * v).sum::<f32>() / 16.0).sqrt();
        assert!((rms - 1.5).abs() < 1e-4, "{rms}");
    }
    // Bad files are typed errors.
    let missing = try_tiny(Tiny {
        omit: "blk.1.ffn_down.weight",
        ..base
    })
    .unwrap_err();
    assert!(
        matches!(&missing, ForwardError::MissingTensor { name } if name == "blk.1.ffn_down.weight"),
        "{missing}"
    );
    let shape = try_tiny(Tiny {
        rope_freqs: Some((3, 1.0)),
        ..base
    })
    .unwrap_err();
    assert!(
        matches!(&shape, ForwardError::Shape { found, expected, .. } if found == &[3] && expected == &[8]),
        "{shape}"
    );
}
