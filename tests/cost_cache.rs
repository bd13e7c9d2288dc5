//! The load-time measurements speculation needs (verify step times, a cycle's costs) are kept
//! between runs in the model directory's `profiles/`: the first load measures and stores them,
//! the next load with the same device, model, drafter, draft length, cache types and ubatches
//! reads them; a changed drafter file, a damaged entry or `FLINT_REMEASURE=1` means measuring
//! again (and storing what was measured). Before a load, `unpaying_drafter` judges the stored
//! costs and the decaying observed acceptance: a drafter that cannot pay is left out, and every
//! 8th run that would leave it out probes it instead. One test (it sets process-wide
//! environment variables).
mod common;

use flint::engine::cost_cache::{unpaying_drafter, CostCache};
use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::gguf::{GgmlType, GgufFile};
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
    Engine::load(&options(drafter), 1).unwrap()
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

/// Replaces the acceptance earlier runs stored in `entry`: drafting cycles, tokens committed
/// (a full block verified each cycle), generations.
fn set_observed(entry: &std::path::Path, cycles: u64, committed: u64, runs: u32) {
    let mut v = read_entry(entry);
    let rows = v["costs"]["verify_rows"].as_u64().unwrap();
    v["observed"] = serde_json::json!({"cycles": cycles, "committed": committed,
                                       "verify_rows": cycles * rows, "runs": runs});
    std::fs::write(entry, v.to_string()).unwrap();
}

fn read_entry(entry: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(entry).unwrap()).unwrap()
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
    // A step and a verify timed again deeper in the cache, for charging at depth.
    let v = read_entry(&files[0]);
    assert!(v["deep"]["pos"].as_u64().is_some_and(|p| p >= 16), "{v}");
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
    let opened = flint::engine::open(&options(&d)).unwrap();
    drop(engine);
    set_costs(&files[0], 0.0586, 0.0639, 0.1131);
    let why = unpaying_drafter(&options(&d), &opened).expect("lavapipe's costs: left out");
    let text = why.to_string();
    assert!(
        text.contains("cannot pay") && text.contains(" rows "),
        "{text}"
    );
    let mut forced = options(&d);
    forced.draft.as_mut().unwrap().bypass = false;
    assert_eq!(unpaying_drafter(&forced, &opened), None);
    std::env::set_var("FLINT_REMEASURE", "1");
    assert_eq!(unpaying_drafter(&options(&d), &opened), None);
    std::env::remove_var("FLINT_REMEASURE");
    set_costs(&files[0], 0.010, 0.002, 0.011);
    assert_eq!(unpaying_drafter(&options(&d), &opened), None);
    // Costs where accepting every draft would pay, judged on the acceptance earlier runs saw:
    // 44 tokens in 40 cycles over 3 runs (τ 1.18 with the prior; 1.88 breaks even) leave the
    // drafter out, 200 in 40 (τ 4.5) keep it; one run, or under 32 cycles, does not decide.
    set_costs(&files[0], 0.0586, 0.030, 0.080);
    assert_eq!(unpaying_drafter(&options(&d), &opened), None);
    set_observed(&files[0], 40, 44, 3);
    let why = unpaying_drafter(&options(&d), &opened).expect("poor acceptance: left out");
    assert_eq!(why.observed.map(|o| (o.cycles, o.runs)), Some((40.0, 3)));
    assert!(why.to_string().contains("the last 3 runs"), "{why}");
    set_observed(&files[0], 40, 200, 3);
    assert_eq!(unpaying_drafter(&options(&d), &opened), None);
    set_observed(&files[0], 40, 44, 1);
    assert_eq!(
        unpaying_drafter(&options(&d), &opened),
        None,
        "one run decides nothing"
    );
    set_observed(&files[0], 20, 22, 3);
    assert_eq!(unpaying_drafter(&options(&d), &opened), None);
    // Each run left out is counted; the 8th loads the drafter as a probe, its costs dropped
    // (measured again by that load).
    set_observed(&files[0], 40, 44, 3);
    let left_out = read_entry(&files[0])["left_out"].as_u64().unwrap();
    assert_eq!(left_out, 2, "the runs left out so far");
    for _ in left_out..7 {
        assert!(unpaying_drafter(&options(&d), &opened).is_some());
    }
    assert_eq!(unpaying_drafter(&options(&d), &opened), None, "a probe");
    let v = read_entry(&files[0]);
    assert_eq!(v["probe"], true, "{v}");
    assert_eq!(v["left_out"], 0, "{v}");
    assert!(v["costs"].is_null(), "{v}");
    // The probe's load measures the costs again, its generation records what it saw.
    let mut engine = load(&d);
    assert!(!engine.costs_cached, "a probe measures its costs");
    let prompt = engine
        .tok
        .encode("The capital of France is", true, false)
        .unwrap();
    let stats = common::generate(&mut engine, &prompt, 24, None, true);
    let spec = stats.spec.expect("speculated");
    drop(engine);
    let v = read_entry(&files[0]);
    assert_eq!(v["probe"], false, "{v}");
    assert!(v["costs"]["verify_rows"].is_u64(), "{v}");
    // Paid (the history replaced by the probe's run) or added to the decaying sums.
    let runs = v["observed"]["runs"].as_u64().unwrap();
    assert!(runs == 1 || runs == 4, "{v}");
    // A generation adds what its drafting achieved to the decaying sums.
    set_observed(&files[0], 4, 4, 1);
    let mut engine = load(&d);
    let stats = common::generate(&mut engine, &prompt, 24, None, true);
    let spec2 = stats.spec.expect("speculated");
    drop(engine);
    let v = read_entry(&files[0]);
    let (c, t) = (spec2.cycles as f64, (spec2.accepted + spec2.cycles) as f64);
    let k = 0.5f64.powf(c / 256.0);
    let near = |x: &serde_json::Value, want: f64| (x.as_f64().unwrap() - want).abs() < 1e-9;
    assert!(near(&v["observed"]["cycles"], 4.0 * k + c), "{v}");
    assert!(near(&v["observed"]["committed"], 4.0 * k + t), "{v}");
    assert_eq!(v["observed"]["runs"], 2, "{v}");
    // ... and the mean position its cycles drafted at (after the prompt, within the context;
    // the entry's earlier cycles had none).
    let mean = v["observed"]["position"].as_f64().unwrap() / c;
    assert!(mean >= prompt.len() as f64 && mean < 512.0, "{v}");
    assert!(spec.cycles > 0);
    // The key holds what changes the costs: the cache types, the ubatch, the drafter's cache
    // types and injection chunk.
    let path = |o: &EngineOptions| {
        let c = CostCache::for_adapter(opened.ctx.info(), &common::model_path(), o, 7).unwrap();
        c.path().to_path_buf()
    };
    let base = path(&options(&d));
    let variants: [fn(&mut EngineOptions); 5] = [
        |o| o.type_k = GgmlType::Q8_0,
        |o| o.type_v = GgmlType::Q8_0,
        |o| o.n_ubatch = 64,
        |o| o.draft.as_mut().unwrap().type_k = GgmlType::Q8_0,
        |o| o.draft.as_mut().unwrap().inject_chunk = 64,
    ];
    for (i, change) in variants.iter().enumerate() {
        let mut o = options(&d);
        change(&mut o);
        assert_ne!(path(&o), base, "variant {i}");
    }
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
