//! The load-time measurements speculation needs (verify step times, a cycle's costs) are kept
//! between runs in the model directory's `profiles/`: the first load measures and stores them,
//! the next load with the same device, model, drafter and draft length reads them; a changed
//! drafter file, a damaged entry or `FLINT_REMEASURE=1` means measuring again. One test (it
//! sets process-wide environment variables).

mod common;

use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::gguf::GgufFile;
use flint::model::drafter_init::{random_drafter, InitOptions};

fn load(drafter: &std::path::Path) -> Engine {
    Engine::load(&EngineOptions {
        model: common::model_path(),
        n_ctx: 512,
        draft: Some(DraftOptions::new(drafter.to_path_buf())),
        ..EngineOptions::default()
    })
    .unwrap()
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
