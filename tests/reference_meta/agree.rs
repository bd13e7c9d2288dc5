//! The oracle's reader against the GPU path's (`flint::model::{Hparams, DrafterMeta}`): the
//! same values from the real model, the shipped drafter, tiny backbones in every key variant
//! and random drafters in both formats; the shipped models also against their model cards.

use super::files::{backbone, tokens};
use crate::common;
use crate::common::dspark::{init, tiny_target};
use flint::gguf::{GgmlType, Gguf, GgufFile, MetaValue};
use flint::model::drafter_init::InitOptions;
use flint::model::{DrafterMeta, Hparams};
use flint::reference::meta::{RefArch, RefDrafterMeta, RefHparams};

/// Both readers give the same backbone.
fn same_hp(a: &Hparams, b: &RefHparams, what: &str) {
    assert_eq!(a.arch.name(), b.arch.name(), "{what}");
    assert_eq!(
        (
            a.n_layer,
            a.n_embd,
            a.n_head,
            a.n_head_kv,
            a.n_ff,
            a.n_vocab
        ),
        (
            b.n_layer,
            b.n_embd,
            b.n_head,
            b.n_head_kv,
            b.n_ff,
            b.n_vocab
        ),
        "{what}"
    );
    assert_eq!(
        (a.head_dim, a.head_dim_v, a.n_rot, a.rope_neox),
        (b.head_dim, b.head_dim_v, b.n_rot, b.rope_neox),
        "{what}"
    );
    let bits = |x: f32| x.to_bits();
    assert_eq!(
        (bits(a.rope_base), bits(a.rope_freq_scale), bits(a.rms_eps)),
        (bits(b.rope_base), bits(b.rope_freq_scale), bits(b.rms_eps)),
        "{what}"
    );
    assert_eq!(
        (a.q_dim(), a.k_dim(), a.v_dim()),
        (b.q_dim(), b.k_dim(), b.v_dim()),
        "{what}"
    );
}

/// Both readers give the same drafter.
fn same_drafter(a: &DrafterMeta, b: &RefDrafterMeta, what: &str) {
    same_hp(&a.hp, &b.hp, what);
    assert_eq!(
        (
            a.block_size,
            &a.target_layers,
            a.target_hidden,
            a.markov_rank
        ),
        (
            b.block_size,
            &b.target_layers,
            b.target_hidden,
            b.markov_rank
        ),
        "{what}"
    );
    assert_eq!(
        (a.has_confidence, a.mask_token_id, a.sample_from_anchor),
        (b.has_confidence, b.mask_token_id, b.sample_from_anchor),
        "{what}"
    );
    assert_eq!(
        (a.own_embd, a.own_output, a.tap_width()),
        (b.own_embd, b.own_output, b.tap_width()),
        "{what}"
    );
}

fn both_hp(bytes: &[u8], what: &str) -> RefHparams {
    let g = Gguf::parse(bytes).unwrap();
    let ours = RefHparams::from_gguf(&g).unwrap();
    same_hp(&Hparams::from_gguf(&g).unwrap(), &ours, what);
    ours
}

fn both_drafter(bytes: &[u8], what: &str) -> RefDrafterMeta {
    let g = Gguf::parse(bytes).unwrap();
    let ours = RefDrafterMeta::from_gguf(&g).unwrap();
    same_drafter(&DrafterMeta::from_gguf(&g).unwrap(), &ours, what);
    ours
}

#[test]
fn both_readers_agree_on_tiny_backbones() {
    let u = MetaValue::U32;
    for arch in ["llama", "qwen2", "qwen3"] {
        let variants: [(&str, Vec<u8>); 4] = [
            (
                "defaults",
                backbone(arch, &[("vocab_size", u(40))], &[], &[]),
            ),
            (
                "every key",
                backbone(
                    arch,
                    &[
                        ("attention.head_count_kv", u(2)),
                        ("attention.key_length", u(32)),
                        ("attention.value_length", u(24)),
                        ("rope.dimension_count", u(16)),
                        ("rope.freq_base", MetaValue::F32(1e6)),
                        ("rope.scaling.factor", MetaValue::F32(8.0)),
                        ("context_length", u(64)),
                    ],
                    &[("tokenizer.ggml.tokens", tokens(11))],
                    &[],
                ),
            ),
            (
                "embedding rows, f64 eps, no scaling",
                backbone(
                    arch,
                    &[
                        ("attention.layer_norm_rms_epsilon", MetaValue::F64(1e-5)),
                        ("rope.scaling.factor", MetaValue::F32(0.0)),
                    ],
                    &[],
                    &[("token_embd.weight", &[64, 33])],
                ),
            ),
            (
                "LM-head rows",
                backbone(
                    arch,
                    &[("attention.head_count_kv", MetaValue::U64(1))],
                    &[],
                    &[("output.weight", &[64, 21])],
                ),
            ),
        ];
        for (what, bytes) in variants {
            both_hp(&bytes, &format!("{arch} {what}"));
        }
    }
    let target = tiny_target(128, 1);
    assert_eq!(both_hp(&target, "tiny target").n_vocab, 128);
}

#[test]
fn both_readers_agree_on_random_drafters() {
    let target = tiny_target(128, 1);
    let cases = [
        InitOptions::default(),
        InitOptions {
            taps: Some(vec![0, 2, 4]),
            rank: 0,
            block: 3,
            confidence: false,
            ..InitOptions::default()
        },
        InitOptions {
            layers: 2,
            rank: 16,
            ty: GgmlType::F32,
            ..InitOptions::default()
        },
    ];
    for opts in cases {
        for legacy in [false, true] {
            let o = InitOptions {
                legacy,
                ..opts.clone()
            };
            let m = both_drafter(&init(&target, &o), &format!("{o:?}"));
            assert_eq!((m.block_size, m.markov_rank), (o.block, o.rank), "{o:?}");
        }
    }
}

#[test]
fn both_readers_agree_on_the_shipped_models() {
    // SmolLM2-135M-Instruct: 30 layers, d 576, 9 / 3 heads of 64, FFN 1536, 49152 tokens,
    // RoPE base 100000 (llama: adjacent pairs), eps 1e-5.
    let target = GgufFile::open(&common::model_path()).unwrap();
    let hp = RefHparams::from_gguf(&target.gguf).unwrap();
    same_hp(&Hparams::from_gguf(&target.gguf).unwrap(), &hp, "SmolLM2");
    assert_eq!(hp.arch, RefArch::Llama);
    assert_eq!(
        (hp.n_layer, hp.n_embd, hp.n_ff, hp.n_vocab),
        (30, 576, 1536, 49152)
    );
    assert_eq!(
        (hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_rot),
        (9, 3, 64, 64)
    );
    assert_eq!(
        (hp.rope_base, hp.rope_freq_scale, hp.rms_eps),
        (100000.0, 1.0, 1e-5)
    );
    assert!(!hp.rope_neox);

    // The shipped drafter, as its model card (models/SmolLM2-135M-Instruct.dspark-Q8_0.md)
    // describes it.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models/SmolLM2-135M-Instruct.dspark-Q8_0.gguf");
    assert!(
        path.exists(),
        "{} is missing: run `bash models/fetch.sh` first",
        path.display()
    );
    let drafter = GgufFile::open(&path).unwrap();
    let m = RefDrafterMeta::from_gguf(&drafter.gguf).unwrap();
    same_drafter(
        &DrafterMeta::from_gguf(&drafter.gguf).unwrap(),
        &m,
        "shipped drafter",
    );
    assert_eq!(m.hp.arch, RefArch::Dflash);
    assert_eq!((m.hp.n_layer, m.hp.n_embd, m.hp.n_ff), (2, 576, 1536));
    assert_eq!((m.hp.n_head, m.hp.n_head_kv, m.hp.head_dim), (9, 3, 64));
    assert_eq!((m.hp.rope_base, m.hp.rope_neox), (100000.0, true));
    assert_eq!(m.target_layers, [1, 10, 20, 29]);
    assert_eq!(
        (m.block_size, m.mask_token_id, m.markov_rank),
        (6, Some(2), 64)
    );
    assert_eq!((m.target_hidden, m.tap_width()), (576, 2304));
    assert!(m.has_confidence && m.sample_from_anchor && !m.own_embd && !m.own_output);
}
