//! The seed's scenario end to end, at small scale: a `qwen35` hybrid target in PrismML's legacy
//! 128-element ternary Q2_0 (as Ternary-Bonsai-27B), and a legacy `dspark` drafter as the seed
//! ships it — log-SNR conditioned, no vocabulary of its own, its `fc` in the same legacy Q2_0 —
//! both written by flint (`flint gguf preset qwen35-tiny-q2_0-g128 --weights random`, `flint
//! dspark init --legacy --log-snr --no-vocab --fc-type q2_0-g128`). `flint generate -md …
//! --spec-draft-n-max 4` at a context past the drafter's window (`-cd 48` < `-c 512`: the
//! window rebases) with a prompt longer than the injection chunk (`--spec-draft-ubatch 16`:
//! chunked injection) prints exactly what `--no-spec` prints. The engine-level run counts the
//! rebases and the drafts.
//!
//! A random drafter on a random target has its drafts rejected (none of 242 accepted here, 8 rebases);
//! accepting and rejecting within one run on a hybrid target is `tests/spec_qwen35.rs`'s.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::speculative::{SpecOptions, VerifyPolicy};

const PROMPT: &str = "The seed scenario, at small scale: a hybrid target in ternary weights and \
                      a legacy log-SNR drafter whose fc is in the legacy layout.";

fn flint(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .expect("run flint");
    assert!(
        out.status.success(),
        "flint {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn files(dir: &Path) -> (PathBuf, PathBuf) {
    let (t, d) = (dir.join("target.gguf"), dir.join("drafter.gguf"));
    let (ts, ds) = (t.to_string_lossy(), d.to_string_lossy());
    flint(&[
        "gguf",
        "preset",
        "qwen35-tiny-q2_0-g128",
        &ts,
        "--weights",
        "random",
        "--seed",
        "12",
    ]);
    flint(&[
        "dspark",
        "init",
        "-m",
        &ts,
        "-o",
        &ds,
        "--legacy",
        "--log-snr",
        "--no-vocab",
        "--fc-type",
        "q2_0-g128",
        "--block",
        "4",
        "--seed",
        "7",
    ]);
    let info = String::from_utf8_lossy(&flint(&["info", &ds]).stdout).to_string();
    for want in ["log_snr_conditioning", "\"none\"", "g128 (PrismML legacy)"] {
        assert!(info.contains(want), "the drafter lacks {want}:\n{info}");
    }
    (t, d)
}

#[test]
fn generate_with_the_seeds_kind_of_pair_prints_what_plain_decoding_prints() {
    let tmp = common::temp_dir("seed-scenario");
    let (t, d) = files(tmp.path());
    let (ts, ds) = (t.to_string_lossy(), d.to_string_lossy());
    let common_args = ["-c", "512", "-p", PROMPT, "-n", "64", "--temp", "0"];
    let mut spec = vec!["generate", "-m", &ts, "-md", &ds, "--spec-draft-n-max", "4"];
    spec.extend(["--spec-no-bypass", "-cd", "48", "--spec-draft-ubatch", "16"]);
    spec.extend(common_args);
    let mut plain = vec!["generate", "-m", &ts, "--no-spec"];
    plain.extend(common_args);
    let (a, b) = (flint(&spec), flint(&plain));
    assert!(!b.stdout.is_empty());
    assert_eq!(a.stdout, b.stdout, "speculative and plain output differ");
    let err = String::from_utf8_lossy(&a.stderr);
    assert!(err.contains("spec:") && err.contains("drafted"), "{err}");
}

#[test]
fn the_engine_rebases_the_window_and_drafts_throughout() {
    let tmp = common::temp_dir("seed-scenario-engine");
    let (t, d) = files(tmp.path());
    let load = |draft: Option<DraftOptions>| {
        Engine::load(
            &EngineOptions {
                model: t.clone(),
                n_ctx: 512,
                draft,
                ..EngineOptions::default()
            },
            1,
        )
        .unwrap()
    };
    let mut plain = load(None);
    let prompt = plain.tok.encode(PROMPT, true, true).unwrap();
    assert!(
        prompt.len() > 16 * 4,
        "the prompt spans several injection chunks"
    );
    let want = common::generate(&mut plain, &prompt, 64, None, false).generated_token_ids;
    let mut opts = DraftOptions::new(d.clone());
    opts.inject_chunk = 16;
    opts.ctx = Some(48);
    let mut eng = load(Some(opts));
    let mut slot = common::drive::take(&mut eng);
    let spec = SpecOptions {
        n_max: 4,
        policy: VerifyPolicy::Fixed,
        bypass: None,
    };
    let s = common::drive::run_spec(&mut eng, &mut slot, spec, &prompt, 64, None);
    assert_eq!(s.generated_token_ids, want);
    let st = s.spec.unwrap();
    let ds = slot.as_dspark().unwrap();
    eprintln!("{st:?}, rebases {}", ds.rebases);
    assert!(st.drafted >= 100, "{st:?}");
    assert!(ds.rebases >= 3, "the window rebased {} times", ds.rebases);
}
