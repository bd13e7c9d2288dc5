//! The load-time measurements speculation needs (verify step times, a cycle's costs) are kept
//! between runs in the model directory's `profiles/`: the first load measures and stores them,
//! the next load with the same device, model, drafter and draft length reads them; a changed
//! drafter file, a damaged entry or `FLINT_REMEASURE=1` means measuring again (and storing
//! what was measured). Before a load, `unpaying_drafter` judges the stored costs: a drafter
//! that cannot pay even with every draft accepted is left out. One test (it sets process-wide
//! environment variables).

mod common;

use flint::engine::cost_cache::unpaying_drafter;
use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::gguf::GgufFile;
use flint::model::drafter_init::{random_drafter, InitOptions};

fn options(drafter: &std::path::Path) -> EngineOptions {
    EngineOptions {
        model: common::model_path(),
        n_ctx: 512,
        draft: Some(DraftOptions::new(drafter.to_path_buf())),
        ..EngineOptions::default()
    }
}

fn load(drafter: &std::path::Path) -> Engine {
    Engine::load(&options(drafter)).unwrap()
}

/// Replaces the stored costs in `entry` (descriptor and verify rows kept): a plain step, a
/// draft, a verify step.
fn set_costs(entry: &std::path::Path, step: f64, draft: f64, verify: f64) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(entry).unwrap()).unwrap();
    let rows = v["costs"]["verify_rows"].clone();
    assert!(rows.is_u64(), "{v}");
    v["costs"] = serde_json::json!({"step": step, "draft": draft, "inject": 0.0002,
                                    "verify": verify, "verify_rows": rows});
    std::fs::write(entry, v.to_string()).unwrap();
}

/// Replaces the acceptance earlier runs stored in `entry`: drafting cycles, tokens committed.
fn set_observed(entry: &std::path::Path, cycles: u64, committed: u64) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(entry).unwrap()).unwrap();
    v["observed"] = serde_json::json!({"cycles": cycles, "committed": committed});
    std::fs::write(entry, v.to_string()).unwrap();
}

fn entries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    match std::fs::read_dir(dir.join("profiles")) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn measurements_are_stored_reused_and_remeasured_when_stale() {
    let tmp = common::temp_dir("cost-cache");
    let store = tmp.path().join("models");
    std::env::set_var("FLINT_MODELS", &store);
    std::env::remove_var("FLINT_REMEASURE");
    let target = GgufFile::open(&common::model_path()).unwrap();
    let d = tmp.path().join("drafter.gguf");
    let write = |seed: u64| {
        let opts = InitOptions {
            seed,
            ..InitOptions::default()
        };
        random_drafter(&target, &opts)
            .unwrap()
            .write_file(&d)
            .unwrap();
    };
    write(1);
    assert!(!load(&d).costs_cached, "nothing stored yet: measured");
    let files = entries(&store);
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(
        text.contains("\"costs\"") && text.contains("\"verify_rows\""),
        "{text}"
    );
    assert!(load(&d).costs_cached, "the same files: read back");
    // FLINT_REMEASURE: measured (and nothing read).
    std::env::set_var("FLINT_REMEASURE", "1");
    assert!(!load(&d).costs_cached);
    std::env::remove_var("FLINT_REMEASURE");
    // ... and stored what it measured.
    let engine = load(&d);
    assert!(engine.costs_cached, "remeasured, stored again");
    // The verdict before a load, on costs written into the entry: lavapipe's (verify 1.93
    // steps, a draft 1.09: not even a probe cycle that accepts all of this drafter's few
    // drafts pays) leave the drafter out; GPU-like ones (verify 1.1 steps) keep it, and so do
    // --spec-no-bypass and FLINT_REMEASURE.
    let adapter = engine.ctx.info().clone();
    drop(engine);
    set_costs(&files[0], 0.0586, 0.0639, 0.1131);
    let why = unpaying_drafter(&options(&d), &adapter).expect("lavapipe's costs: left out");
    let text = why.to_string();
    assert!(
        text.contains("cannot pay") && text.contains(" rows "),
        "{text}"
    );
    let mut forced = options(&d);
    forced.draft.as_mut().unwrap().bypass = false;
    assert_eq!(unpaying_drafter(&forced, &adapter), None);
    std::env::set_var("FLINT_REMEASURE", "1");
    assert_eq!(unpaying_drafter(&options(&d), &adapter), None);
    std::env::remove_var("FLINT_REMEASURE");
    set_costs(&files[0], 0.010, 0.002, 0.011);
    assert_eq!(unpaying_drafter(&options(&d), &adapter), None);
    // Costs where accepting every draft would pay, judged on the acceptance earlier runs saw:
    // 22 tokens in 20 cycles (τ 1.25 with the prior; 1.88 breaks even) leave the drafter out,
    // 100 in 20 (τ 4.5) keep it; under 8 cycles observed do not decide.
    set_costs(&files[0], 0.0586, 0.030, 0.080);
    assert_eq!(unpaying_drafter(&options(&d), &adapter), None);
    set_observed(&files[0], 20, 22);
    let why = unpaying_drafter(&options(&d), &adapter).expect("poor acceptance: left out");
    assert_eq!(why.observed, Some((20, 22)));
    assert!(why.to_string().contains("20 cycles"), "{why}");
    set_observed(&files[0], 20, 100);
    assert_eq!(unpaying_drafter(&options(&d), &adapter), None);
    set_observed(&files[0], 4, 4);
    assert_eq!(unpaying_drafter(&options(&d), &adapter), None);
    // A generation adds what its drafting achieved.
    let mut engine = load(&d);
    let prompt = engine
        .tok
        .encode("The capital of France is", true, false)
        .unwrap();
    let stats = engine.generate(&prompt, 24, None, |_| Ok(true)).unwrap();
    let spec = stats.spec.expect("speculated");
    drop(engine);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    let (c, t) = (spec.cycles, spec.accepted + spec.cycles);
    assert_eq!(v["observed"]["cycles"], 4 + c, "{v}");
    assert_eq!(v["observed"]["committed"], 4 + t, "{v}");
    set_costs(&files[0], 0.010, 0.002, 0.011);
    assert!(load(&d).costs_cached, "an edited entry is still read");
    // A damaged entry is measured again and rewritten.
    std::fs::write(&files[0], "{ not json").unwrap();
    assert!(!load(&d).costs_cached);
    assert!(load(&d).costs_cached);
    // Another drafter file (new size or time): another key, measured.
    std::thread::sleep(std::time::Duration::from_millis(20));
    write(2);
    assert!(!load(&d).costs_cached);
    assert_eq!(entries(&store).len(), 2);
    // An entry whose drafter file is gone is dropped the next time one is stored.
    let d2 = tmp.path().join("other.gguf");
    std::fs::rename(&d, &d2).unwrap();
    assert!(!load(&d2).costs_cached);
    let left = entries(&store);
    assert_eq!(left.len(), 1, "{left:?}");
    let text = std::fs::read_to_string(&left[0]).unwrap();
    assert!(text.contains("other.gguf"), "{text}");
}
