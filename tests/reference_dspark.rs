//! The DSpark drafter oracle (`flint::reference::dspark`) and random drafters
//! (`flint::model::drafter_init`): init round trips in both GGUF formats, drafting invariants
//! on a tiny synthetic target and on SmolLM2-135M (`bash models/fetch.sh` first), and the
//! loader's typed errors for drafters that do not fit their target.

use crate::common;

use common::dspark::{
    i32s, init, load, meta, rewrite, tensor_f32, tiny_target, zeros_f32, TINY_D, TINY_LAYERS,
};
use common::dspark_check::check_drafting;
use flint::gguf::{GgmlType, Gguf, GgufFile, MetaValue};
use flint::model::drafter_init::{default_taps, random_drafter, InitError, InitOptions};
use flint::model::{drafter_tensor_name, Arch, Hparams};
use flint::reference::dspark::DsparkRefError;
use flint::reference::forward::RefModel;

#[test]
fn init_round_trips_in_both_formats() {
    let target = tiny_target(128, 1);
    let cases = [
        InitOptions::default(),
        InitOptions {
            taps: Some(vec![0, 2, 4]),
            rank: 0,
            block: 3,
            seed: 5,
            ..InitOptions::default()
        },
        InitOptions {
            layers: 2,
            confidence: false,
            ty: GgmlType::F32,
            rank: 16,
            ..InitOptions::default()
        },
    ];
    for opts in cases {
        let taps = opts
            .taps
            .clone()
            .unwrap_or_else(|| default_taps(TINY_LAYERS));
        let a = init(&target, &opts);
        let b = init(
            &target,
            &InitOptions {
                legacy: true,
                ..opts.clone()
            },
        );
        let (ma, mb) = (meta(&a), meta(&b));
        assert_eq!((ma.hp.arch, mb.hp.arch), (Arch::Dflash, Arch::DsparkLegacy));
        for m in [&ma, &mb] {
            assert_eq!(m.block_size, opts.block);
            assert_eq!(m.target_layers, taps, "{opts:?}");
            assert_eq!(m.markov_rank, opts.rank);
            assert_eq!(m.has_confidence, opts.confidence);
            assert_eq!(m.mask_token_id, Some(127), "no padding token: the last id");
            assert_eq!(m.target_hidden, TINY_D as u32);
            assert!(m.sample_from_anchor && !m.own_embd && !m.own_output);
            let hp = &m.hp;
            assert_eq!((hp.n_layer, hp.n_embd, hp.n_ff), (opts.layers, 64, 96));
            assert_eq!((hp.n_head, hp.n_head_kv, hp.head_dim), (4, 2, 16));
            assert_eq!(
                (hp.n_vocab, hp.n_ctx_train, hp.rope_base),
                (128, 2048, 10000.0)
            );
            assert!(hp.qk_norm && hp.rope_neox);
        }
        // Legacy taps are stored one lower (HF layer-output ids).
        let raw = Gguf::parse(&b).unwrap();
        let stored = raw
            .metadata
            .i32_array("dspark.dspark.target_layers")
            .unwrap();
        let want: Vec<i32> = taps.iter().map(|&t| t as i32 - 1).collect();
        assert_eq!(stored, want.as_slice());
        // Same tensors, renamed, bit for bit.
        let ga = Gguf::parse(&a).unwrap();
        assert_eq!(ga.tensors.len(), raw.tensors.len());
        assert!(ga.tensor("token_embd.weight").is_none() && ga.tensor("output.weight").is_none());
        for t in &ga.tensors {
            let legacy = drafter_tensor_name(Arch::DsparkLegacy, &t.name);
            assert_eq!(
                raw.tensor(legacy).map(|l| &l.shape),
                Some(&t.shape),
                "{legacy}"
            );
            assert_eq!(
                tensor_f32(&a, &t.name),
                tensor_f32(&b, legacy),
                "{}",
                t.name
            );
        }
    }
}

#[test]
fn init_refuses_bad_options_naming_values() {
    let target = tiny_target(128, 1);
    let g = Gguf::parse(&target).unwrap();
    let err = |opts: InitOptions| random_drafter(&g, &opts).err().unwrap();
    let e = err(InitOptions {
        taps: Some(vec![1, 5]),
        ..InitOptions::default()
    });
    assert!(
        matches!(e, InitError::TapOutOfRange { tap: 5, n_layer: 4 }),
        "{e}"
    );
    assert!(e.to_string().contains('5') && e.to_string().contains('4'));
    let e = err(InitOptions {
        block: 0,
        ..InitOptions::default()
    });
    assert!(matches!(e, InitError::NoBlock { block: 0 }), "{e}");
    let e = err(InitOptions {
        ty: GgmlType::Q8_0,
        ..InitOptions::default()
    });
    assert!(matches!(e, InitError::MatrixType { .. }), "{e}");
    let drafter = init(&target, &InitOptions::default());
    let e = random_drafter(&Gguf::parse(&drafter).unwrap(), &InitOptions::default());
    assert!(matches!(
        e,
        Err(InitError::TargetIsDrafter { arch: "dflash" })
    ));
}

#[test]
fn drafting_invariants_on_a_tiny_target() {
    let target = tiny_target(128, 3);
    let g = Gguf::parse(&target).unwrap();
    let model = RefModel::from_gguf(&g, &target).unwrap();
    let opts = InitOptions {
        layers: 2,
        block: 4,
        rank: 16,
        seed: 11,
        ..InitOptions::default()
    };
    check_drafting(&target, &model, &[3, 17, 99, 42, 5, 64, 0, 127, 8], &opts);
    let taps = InitOptions {
        taps: Some(vec![0, TINY_LAYERS]),
        block: 3,
        ..opts
    };
    check_drafting(&target, &model, &[1, 2, 3, 4, 5], &taps);
}

#[test]
fn drafting_invariants_on_smollm2() {
    let file = GgufFile::open(&common::model_path()).unwrap();
    let model = RefModel::load(&file).unwrap();
    let hp = Hparams::from_gguf(&file).unwrap();
    let opts = InitOptions {
        layers: 2,
        seed: 7,
        ..InitOptions::default()
    };
    let dm = meta(&init(file.bytes(), &opts));
    assert_eq!(dm.target_layers, [1, 10, 20, 29]);
    assert_eq!(dm.mask_token_id, Some(2), "SmolLM2's padding token");
    assert_eq!(
        (dm.hp.n_embd, dm.hp.n_vocab, dm.hp.rms_eps),
        (hp.n_embd, hp.n_vocab, hp.rms_eps)
    );
    let prompt = [1, 9690, 198, 2683, 359, 253, 5356, 11173, 30, 2];
    check_drafting(file.bytes(), &model, &prompt, &opts);
}

#[test]
fn loader_errors_name_the_values() {
    let target = tiny_target(128, 1);
    let opts = InitOptions {
        taps: Some(vec![1, 3]),
        rank: 8,
        ..InitOptions::default()
    };
    let d = init(&target, &opts);
    let legacy = init(
        &target,
        &InitOptions {
            legacy: true,
            ..opts.clone()
        },
    );
    let err = |drafter: &[u8], target: &[u8]| load(drafter, target).err().unwrap();
    let says = |e: &DsparkRefError, parts: &[&str]| {
        let s = e.to_string();
        assert!(
            parts.iter().all(|p| s.contains(p)),
            "{s:?} should name {parts:?}"
        );
    };

    let bad = rewrite(&d, &[("dflash.target_layers", i32s(&[1, 9]))], |_| None);
    let e = err(&bad, &target);
    assert!(
        matches!(e, DsparkRefError::TapOutOfRange { tap: 9, n_layer: 4 }),
        "{e}"
    );
    says(&e, &["9", "4"]);
    let bad = rewrite(
        &legacy,
        &[("dspark.dspark.target_layers", i32s(&[0, 8]))],
        |_| None,
    );
    let e = err(&bad, &target);
    assert!(
        matches!(e, DsparkRefError::TapOutOfRange { tap: 9, n_layer: 4 }),
        "legacy: {e}"
    );

    let wide = 2 * TINY_D + 16;
    let fc = |t: &flint::gguf::TensorInfo| {
        t.name
            .ends_with("fc.weight")
            .then(|| (vec![wide, TINY_D], GgmlType::F32, zeros_f32(wide * TINY_D)))
    };
    for (file, name) in [(&d, "fc.weight"), (&legacy, "dspark.fc.weight")] {
        let e = err(&rewrite(file, &[], fc), &target);
        assert!(
            matches!(&e, DsparkRefError::FcWidth { tensor, found: 144, taps: 2, target_hidden: 64, expected: 128 } if tensor == name),
            "{e}"
        );
        says(&e, &[name, "144", "128", "64"]);
    }

    let n = TINY_D + 8 + 1;
    let conf = |t: &flint::gguf::TensorInfo| {
        (t.name.contains("conf") && t.name.ends_with(".weight"))
            .then(|| (vec![n, 1], GgmlType::F32, zeros_f32(n)))
    };
    for file in [&d, &legacy] {
        let e = err(&rewrite(file, &[], conf), &target);
        assert!(
            matches!(
                e,
                DsparkRefError::ConfWidth {
                    found: 73,
                    d: 64,
                    rank: 8,
                    expected: 72,
                    ..
                }
            ),
            "{e}"
        );
        says(&e, &["73", "64", "8", "72"]);
    }

    let e = err(&d, &tiny_target(256, 1));
    assert!(
        matches!(
            &e,
            DsparkRefError::VocabRows {
                rows: 128,
                target_vocab: 256,
                ..
            }
        ),
        "{e}"
    );
    says(&e, &["128", "256"]);

    let snr = rewrite(
        &legacy,
        &[("dspark.dspark.log_snr_conditioning", MetaValue::Bool(true))],
        |_| None,
    );
    // Log-SNR conditioning is read now: a flag without its range is refused naming the key.
    let e = err(&snr, &target);
    assert!(matches!(e, DsparkRefError::Hparams(_)), "{e}");
    says(&e, &["dspark.dspark.min_log_snr"]);
    let e = err(
        &rewrite(
            &d,
            &[("dflash.log_snr_conditioning", MetaValue::Bool(true))],
            |_| None,
        ),
        &target,
    );
    says(&e, &["dflash.min_log_snr"]);

    let e = err(&d, &d);
    assert!(
        matches!(e, DsparkRefError::TargetIsDrafter { arch: "dflash" }),
        "{e}"
    );
}
