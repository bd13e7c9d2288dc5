//! Speculative decoding on a mixture-of-experts target (`qwen3moe-tiny-q8_0` with random
//! weights, as `flint gguf preset … --weights random` writes it): greedy output with a random
//! `flint dspark init` drafter, and with an adversary whose drafts are partly right (accepted
//! and rejected drafts in one verify batch), is exactly plain decoding. A verify batch's rows
//! route to different experts; the MoE block computes each row alone, so the batch cannot
//! change a row (tests/moe_forward.rs checks the bits).

use crate::common;

use std::path::Path;

use flint::engine::{DraftOptions, Engine};
use flint::gguf::{Gguf, GgufFile};
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::speculative::adversarial::{Adversary, AdversaryKind};

fn engine(model: &Path, draft: Option<DraftOptions>) -> Engine {
    common::engine(model, 256, draft)
}

#[test]
fn greedy_output_is_plain_decoding_on_a_moe_target() {
    let tmp = common::temp_dir("spec-moe");
    let model = common::random_preset(tmp.path(), "qwen3moe-tiny-q8_0", 21);
    let n = 20;
    let mut eng = engine(&model, None);
    let prompt = eng
        .tok
        .encode("The experts of the mixture", true, true)
        .unwrap();
    let want = common::generate(&mut eng, &prompt, n, None, false);
    let want = want.generated_token_ids;
    let n_vocab = eng.fwd.hp().n_vocab;
    let target = GgufFile::open(&model).unwrap();
    let gamma = 4;
    let opts = InitOptions {
        block: gamma,
        seed: 5,
        ..InitOptions::default()
    };
    let dpath = tmp.path().join("drafter.gguf");
    random_drafter(&target, &opts)
        .unwrap()
        .write_file(&dpath)
        .unwrap();
    let mut deng = engine(&model, Some(DraftOptions::new(dpath)));
    let mut dspark = common::drive::take(&mut deng);
    let seq: Vec<u32> = prompt.iter().chain(&want).copied().collect();
    let mut adv: common::drive::Slot =
        Box::new(Adversary::new(AdversaryKind::Partial, seq, gamma, n_vocab));
    let (out, s) = common::drive::speculate(&mut deng, &mut adv, gamma, &prompt, n);
    assert_eq!(out, want, "partly right drafts: output differs from plain");
    assert!(s.accepted > 0 && s.accepted < s.drafted, "{s:?}");
    let (out, s) = common::drive::speculate(&mut deng, &mut dspark, gamma, &prompt, n);
    assert_eq!(out, want, "random DSpark: output differs from plain");
    assert!(s.cycles > 0, "the DSpark drafter never drafted: {s:?}");
}

/// A qwen35moe target whose file leaves the dense `feed_forward_length` at 0, as the published
/// Qwen3.5/3.6 MoE files do (`qwen35moe-tiny-q8_0`, random weights): `flint dspark init` makes
/// a drafter whose FFN has the shared expert's width (128, as the routed experts here), and
/// greedy speculation with it on the GPU is exactly plain decoding.
#[test]
fn dspark_init_takes_the_shared_expert_width_on_a_qwen35moe_target() {
    let tmp = common::temp_dir("spec-moe35");
    let model = common::random_preset(tmp.path(), "qwen35moe-tiny-q8_0", 4);
    let target = Gguf::parse(&std::fs::read(&model).unwrap()).unwrap();
    let ff = target
        .metadata
        .u32("qwen35moe.feed_forward_length")
        .unwrap();
    assert_eq!(ff, 0, "the preset has no dense FFN width");
    let dpath = tmp.path().join("drafter.gguf");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["dspark", "init", "-m"])
        .arg(&model)
        .arg("-o")
        .arg(&dpath)
        .args(["--seed", "3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "flint dspark init: {err}");
    let dbytes = std::fs::read(&dpath).unwrap();
    let drafter = Gguf::parse(&dbytes).unwrap();
    let gate = drafter.tensor("blk.0.ffn_gate.weight").unwrap();
    assert_eq!(
        gate.shape,
        [256, 128],
        "drafter FFN = the shared expert's width"
    );

    let n = 12;
    let mut eng = engine(&model, None);
    let prompt = eng.tok.encode("The shared expert", true, true).unwrap();
    let want = common::generate(&mut eng, &prompt, n, None, false).generated_token_ids;
    let mut deng = engine(&model, Some(DraftOptions::new(dpath)));
    let mut dspark = common::drive::take(&mut deng);
    let (out, s) = common::drive::speculate(&mut deng, &mut dspark, 4, &prompt, n);
    assert_eq!(
        out, want,
        "random DSpark on qwen35moe: output differs from plain"
    );
    assert!(s.cycles > 0, "the DSpark drafter never drafted: {s:?}");
}
