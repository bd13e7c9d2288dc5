//! The seed's drafter (the `ternary-bonsai-27b-dspark-q4_1` preset: legacy PrismML `dspark`,
//! no vocabulary, log-SNR conditioning, `token_embd` and `fc` in the 128-element Q2_0, a BF16
//! Markov `W1`) next to its target (`ternary-bonsai-27b-q2_0`): `flint info` and `flint plan`
//! read it, and everything the drafter needs besides its weights and K/V cache is the same at
//! 4k, 32k and 128k and stays under 128 MiB (the seed's implementation reserved a 5888 MiB
//! compute buffer for it at 32k).

use std::process::Command;

use flint::gguf::{GgmlType, Gguf};
use flint::memory::budget::BudgetSource;
use flint::memory::{
    plan, Budget, DeviceLimits, DraftParams, DrafterShape, Kind, Owner, RunParams, TargetShape,
};
use flint::model::{presets, DrafterMeta, Hparams};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn parse(name: &str) -> Gguf {
    Gguf::parse(&presets::preset(name).unwrap().unwrap()).unwrap()
}

#[test]
fn seed_drafter_meta_reads_log_snr_and_no_vocabulary() {
    let d = parse("ternary-bonsai-27b-dspark-q4_1");
    let meta = DrafterMeta::from_gguf(&d).unwrap();
    let snr = meta
        .log_snr
        .expect("the seed's drafter is log-SNR conditioned");
    assert_eq!((snr.min, snr.max), (-9.0, 9.0));
    assert_eq!(meta.hp.n_vocab, 248320);
    assert_eq!(meta.target_layers, [2, 17, 32, 47, 62]);
    assert_eq!(meta.block_size, 4);
}

#[test]
fn seed_drafter_non_kv_bytes_do_not_grow_with_the_context() {
    let (t, d) = (
        parse("ternary-bonsai-27b-q2_0"),
        parse("ternary-bonsai-27b-dspark-q4_1"),
    );
    let hp = Hparams::from_gguf(&t).unwrap();
    let meta = DrafterMeta::from_gguf(&d).unwrap();
    let mut non_kv = Vec::new();
    for n_ctx in [4096u32, 32768, 131072] {
        let kv = GgmlType::Q8_0;
        let p = RunParams {
            n_ctx,
            type_k: kv,
            type_v: kv,
            draft: Some(DraftParams {
                n_draft: 4,
                inject_chunk: 512,
                type_k: kv,
                type_v: kv,
                window: None,
            }),
            ..RunParams::default()
        };
        let plan = plan(
            TargetShape {
                hp: &hp,
                tensors: &t.tensors,
            },
            Some(DrafterShape {
                meta: &meta,
                tensors: &d.tensors,
            }),
            &p,
            Budget::new(16 * GIB, BudgetSource::Flag),
            DeviceLimits::GENERIC,
        );
        let all = plan.sum(Some(Owner::Drafter), None);
        let weights = plan.sum(Some(Owner::Drafter), Some(Kind::Weights));
        let kv_bytes = plan.sum(Some(Owner::Drafter), Some(Kind::Kv));
        let rest = all - weights - kv_bytes;
        eprintln!(
            "-c {n_ctx}: drafter weights {:.1} MiB, KV {:.1} MiB, everything else {:.2} MiB",
            weights as f64 / MIB as f64,
            kv_bytes as f64 / MIB as f64,
            rest as f64 / MIB as f64
        );
        non_kv.push(rest);
    }
    assert!(
        non_kv.windows(2).all(|w| w[0] == w[1]),
        "non-KV drafter bytes change with -c: {non_kv:?}"
    );
    assert!(non_kv[0] <= 128 * MIB, "{} bytes", non_kv[0]);
}

fn flint(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "flint {args:?}:\n{text}");
    text
}

#[test]
fn flint_info_and_plan_read_the_seed_drafter() {
    let tmp = tempfile::tempdir().unwrap();
    let (t, d) = (tmp.path().join("t.gguf"), tmp.path().join("d.gguf"));
    for (name, out) in [
        ("ternary-bonsai-27b-q2_0", &t),
        ("ternary-bonsai-27b-dspark-q4_1", &d),
    ] {
        flint(&[
            "gguf".as_ref(),
            "preset".as_ref(),
            name.as_ref(),
            out.as_ref(),
        ]);
    }
    let info = flint(&["info".as_ref(), d.as_ref()]);
    assert!(info.contains("dspark"), "{info}");
    let plan = flint(&[
        "plan".as_ref(),
        "-m".as_ref(),
        t.as_ref(),
        "-md".as_ref(),
        d.as_ref(),
        "-c".as_ref(),
        "32768".as_ref(),
        "--gpu-mem".as_ref(),
        "16GiB".as_ref(),
    ]);
    assert!(plan.contains("drafter") && plan.contains("fits"), "{plan}");
}
