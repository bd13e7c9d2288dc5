//! The oracle's own metadata reader (`flint::reference::meta`) held two ways: to the values
//! written into the file (tiny files built here, and the two shipped models against their
//! model cards), and to the GPU path's reader (`flint::model::{Hparams, DrafterMeta}`) on the
//! real model, the shipped drafter, tiny llama / qwen2 / qwen3 backbones in every key variant
//! and random drafters in both formats. Agreement alone could hide a key both misread; the
//! pinned values cannot.

#[path = "reference_meta/agree.rs"]
mod agree;
use crate::common;
#[path = "reference_meta/files.rs"]
mod files;

use common::dspark::{i32s, init, rewrite, tiny_target};
use files::{backbone, tokens};
use flint::gguf::{Gguf, GgufWriter, MetaValue};
use flint::model::drafter_init::InitOptions;
use flint::reference::forward::{ForwardError, RefModel};
use flint::reference::meta::{drafter_tensor, MetaError, RefArch, RefDrafterMeta, RefHparams};

/// The fully specified qwen3 file of the pinned test.
fn full_qwen3() -> Vec<u8> {
    let u = MetaValue::U32;
    backbone(
        "qwen3",
        &[
            ("attention.head_count_kv", u(2)),
            ("attention.key_length", u(32)),
            ("attention.value_length", u(32)),
            ("rope.dimension_count", u(16)),
            ("rope.freq_base", MetaValue::F32(500000.0)),
            ("rope.scaling.factor", MetaValue::F32(4.0)),
            ("attention.layer_norm_rms_epsilon", MetaValue::F32(1e-5)),
        ],
        &[("tokenizer.ggml.tokens", tokens(7))],
        &[],
    )
}

#[test]
fn the_reader_returns_what_the_file_says() {
    let hp = RefHparams::from_gguf(&Gguf::parse(&full_qwen3()).unwrap()).unwrap();
    assert_eq!(hp.arch, RefArch::Qwen3);
    assert_eq!((hp.n_layer, hp.n_embd, hp.n_ff), (2, 64, 96));
    // key_length 32, not d / n_head = 16; the vocabulary is the tokenizer's 7 tokens.
    assert_eq!(
        (hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v),
        (4, 2, 32, 32)
    );
    assert_eq!((hp.n_rot, hp.n_vocab), (16, 7));
    assert_eq!((hp.q_dim(), hp.k_dim(), hp.v_dim()), (128, 64, 64));
    assert_eq!(
        (hp.rms_eps, hp.rope_base, hp.rope_freq_scale),
        (1e-5, 500000.0, 0.25)
    );
    assert!(hp.rope_neox);

    // Defaults: KV heads = heads, head dim = d / heads, n_rot = head dim, base 10000, scale 1;
    // llama rotates adjacent pairs; the vocabulary from vocab_size, then the embedding rows.
    let llama = backbone("llama", &[("vocab_size", MetaValue::U32(40))], &[], &[]);
    let hp = RefHparams::from_gguf(&Gguf::parse(&llama).unwrap()).unwrap();
    assert_eq!(
        (hp.n_head_kv, hp.head_dim, hp.head_dim_v, hp.n_rot),
        (4, 16, 16, 16)
    );
    assert_eq!((hp.n_vocab, hp.rms_eps), (40, 1e-6));
    assert_eq!(
        (hp.rope_base, hp.rope_freq_scale, hp.rope_neox),
        (10000.0, 1.0, false)
    );
    let rows = backbone("qwen2", &[], &[], &[("token_embd.weight", &[64, 33])]);
    assert_eq!(
        RefHparams::from_gguf(&Gguf::parse(&rows).unwrap())
            .unwrap()
            .n_vocab,
        33
    );

    // A dflash drafter: taps [1, 3] as written, block 5, mask 6, confidence head switched off
    // by its key although conf_proj is present, eps and head dim from its own keys.
    let target = tiny_target(128, 1);
    let opts = InitOptions {
        taps: Some(vec![2, 4]),
        rank: 8,
        ..InitOptions::default()
    };
    let d = rewrite(
        &init(&target, &opts),
        &[
            ("dflash.target_layers", i32s(&[1, 3])),
            ("dflash.block_size", MetaValue::U32(5)),
            ("dflash.target_hidden_size", MetaValue::U32(48)),
            ("tokenizer.ggml.mask_token_id", MetaValue::U32(6)),
            ("dflash.has_confidence_head", MetaValue::Bool(false)),
            (
                "dflash.attention.layer_norm_rms_epsilon",
                MetaValue::F32(1e-5),
            ),
            ("dflash.attention.key_length", MetaValue::U32(32)),
        ],
        |_| None,
    );
    let m = RefDrafterMeta::from_gguf(&Gguf::parse(&d).unwrap()).unwrap();
    assert_eq!(m.hp.arch, RefArch::Dflash);
    assert_eq!(
        (m.target_layers.as_slice(), m.block_size),
        ([1, 3].as_slice(), 5)
    );
    assert_eq!((m.target_hidden, m.tap_width(), m.markov_rank), (48, 96, 8));
    assert_eq!((m.mask_token_id, m.has_confidence), (Some(6), false));
    assert_eq!((m.hp.rms_eps, m.hp.head_dim, m.hp.n_rot), (1e-5, 32, 16));
    assert!(m.sample_from_anchor && !m.own_embd && !m.own_output && m.hp.rope_neox);

    // The legacy format: taps stored one lower (−1 = the embeddings), the mask under its own
    // key, the tap width from `dspark.fc.weight` (2 taps × 64), the rank from the Markov head.
    let legacy = InitOptions {
        legacy: true,
        ..opts
    };
    let l = rewrite(
        &init(&target, &legacy),
        &[
            ("dspark.dspark.target_layers", i32s(&[-1, 2])),
            ("dspark.dspark.mask_token_id", MetaValue::U32(9)),
        ],
        |_| None,
    );
    let m = RefDrafterMeta::from_gguf(&Gguf::parse(&l).unwrap()).unwrap();
    assert_eq!(m.hp.arch, RefArch::DsparkLegacy);
    assert_eq!(m.target_layers, [0, 3]);
    assert_eq!(
        (m.target_hidden, m.markov_rank, m.mask_token_id),
        (64, 8, Some(9))
    );
    assert!(m.has_confidence && m.sample_from_anchor);

    let names = [
        ("fc.weight", "dspark.fc.weight"),
        ("enc.output_norm.weight", "dspark.hidden_norm.weight"),
        ("markov_w1.weight", "dspark.markov_head_a.weight"),
        ("markov_w2.weight", "dspark.markov_head_b.weight"),
        ("conf_proj.weight", "dspark.confidence_head.weight"),
        ("conf_proj.bias", "dspark.confidence_head.bias"),
        ("blk.0.attn_q.weight", "blk.0.attn_q.weight"),
        ("output_norm.weight", "output_norm.weight"),
    ];
    for (dflash, legacy) in names {
        assert_eq!(drafter_tensor(RefArch::DsparkLegacy, dflash), legacy);
        assert_eq!(drafter_tensor(RefArch::Dflash, dflash), dflash);
    }
}

#[test]
fn errors_name_the_key_and_value() {
    let read = |b: &[u8]| {
        RefHparams::from_gguf(&Gguf::parse(b).unwrap())
            .err()
            .unwrap()
    };
    let says = |e: &MetaError, parts: &[&str]| {
        let s = e.to_string();
        assert!(
            parts.iter().all(|p| s.contains(p)),
            "{s:?} should name {parts:?}"
        );
    };
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("qwen2".into()));
    for (k, v) in [("block_count", 2), ("embedding_length", 64)] {
        w.set(&format!("qwen2.{k}"), MetaValue::U32(v));
    }
    w.set("qwen2.attention.head_count", MetaValue::U32(4));
    w.set("qwen2.feed_forward_length", MetaValue::U32(96));
    w.set("qwen2.vocab_size", MetaValue::U32(40));
    let no_eps = w.to_bytes().unwrap();
    let e = read(&no_eps);
    assert!(
        matches!(&e, MetaError::Missing { key } if key == "qwen2.attention.layer_norm_rms_epsilon"),
        "{e}"
    );
    let g = Gguf::parse(&no_eps).unwrap();
    let e = RefModel::from_gguf(&g, &no_eps).err().unwrap();
    assert!(
        matches!(e, ForwardError::Hparams(MetaError::Missing { .. })),
        "{e}"
    );

    let eps = "attention.layer_norm_rms_epsilon";
    let e = read(&backbone(
        "qwen2",
        &[(eps, MetaValue::String("tiny".into()))],
        &[],
        &[],
    ));
    assert!(matches!(e, MetaError::Type { .. }), "{e}");
    says(
        &e,
        &["qwen2.attention.layer_norm_rms_epsilon", "tiny", "float"],
    );
    let e = read(&backbone(
        "qwen3",
        &[("attention.head_count_kv", MetaValue::U32(3))],
        &[],
        &[],
    ));
    says(&e, &["qwen3.attention.head_count_kv", "3"]);
    let e = read(&backbone(
        "llama",
        &[("rope.dimension_count", MetaValue::U32(40))],
        &[],
        &[],
    ));
    says(&e, &["llama.rope.dimension_count", "40"]);
    let e = read(&backbone(
        "llama",
        &[("block_count", MetaValue::I32(-2))],
        &[],
        &[],
    ));
    says(&e, &["llama.block_count", "-2"]);
    let e = read(&backbone("gpt2", &[], &[], &[]));
    assert!(
        matches!(&e, MetaError::Arch { arch } if arch == "gpt2"),
        "{e}"
    );
    let e = read(&backbone("qwen3", &[], &[], &[]));
    says(&e, &["qwen3.vocab_size", "missing"]);

    let target = tiny_target(128, 1);
    let g = Gguf::parse(&target).unwrap();
    let e = RefDrafterMeta::from_gguf(&g).err().unwrap();
    assert!(
        matches!(&e, MetaError::NotDrafter { arch } if arch == "llama"),
        "{e}"
    );
    let d = init(&target, &InitOptions::default());
    let bad = rewrite(&d, &[("dflash.target_layers", i32s(&[2, -4]))], |_| None);
    let e = RefDrafterMeta::from_gguf(&Gguf::parse(&bad).unwrap())
        .err()
        .unwrap();
    says(&e, &["dflash.target_layers", "-4"]);
    let bad = rewrite(&d, &[("dflash.block_size", MetaValue::U32(0))], |_| None);
    let e = RefDrafterMeta::from_gguf(&Gguf::parse(&bad).unwrap())
        .err()
        .unwrap();
    says(&e, &["dflash.block_size", "0"]);
}
