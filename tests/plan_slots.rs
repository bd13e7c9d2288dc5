//! `flint plan -np N` plans exactly what `flint serve -np N` allocates (N = 1 and 4): one set
//! of activations for every slot's rows, the target's weights once, and per slot its K/V caches
//! and (with `-md`) its drafter (`Engine::load`). The plan's JSON is held buffer by buffer
//! (names and bytes) to the loader's allocation record, with and without a drafter.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use flint::engine::Engine;
use flint::engine::{DraftOptions, EngineOptions};
use flint::gguf::GgufFile;
use flint::model::drafter_init::{random_drafter, InitOptions};
use serde_json::Value;

const CTX: u32 = 1024;

/// `flint plan … --json`'s buffers, name → bytes.
fn planned(model: &Path, drafter: Option<&Path>, slots: u32) -> BTreeMap<String, u64> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flint"));
    cmd.arg("plan").arg("-m").arg(model);
    if let Some(d) = drafter {
        cmd.arg("-md").arg(d);
    }
    let out = cmd
        // `-c` is the total over the slots, as `flint serve` takes it.
        .args([
            "-c",
            &(CTX * slots).to_string(),
            "-np",
            &slots.to_string(),
            "--json",
        ])
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let name = b["name"].as_str().unwrap().to_string();
            (name, b["bytes"].as_u64().unwrap())
        })
        .collect()
}

/// What the server's loader allocates, name → bytes: the shared weights once, every slot's own
/// buffers (slots after the first prefixed `slot{i}.`). A stacked weight recorded as `a+b+c`
/// is held to the sum of its parts' plans.
fn allocated(model: &Path, drafter: Option<&Path>, slots: u32) -> Vec<(String, u64)> {
    let eng = Engine::load(
        &EngineOptions {
            model: model.to_path_buf(),
            n_ctx: CTX,
            draft: drafter.map(|d| DraftOptions::new(d.to_path_buf())),
            ..EngineOptions::default()
        },
        slots,
    )
    .unwrap();
    let drafters = if drafter.is_some() { slots } else { 0 };
    assert_eq!(eng.drafters.len(), drafters as usize);
    let mut out = eng.fwd.weights().allocations.clone();
    out.extend(eng.allocated.iter().cloned());
    out
}

fn check(model: &Path, drafter: Option<&Path>, slots: u32) {
    let plan = planned(model, drafter, slots);
    let mut seen = std::collections::HashSet::new();
    for (name, bytes) in allocated(model, drafter, slots) {
        let (prefix, rest) = match name.split_once('.') {
            Some((p, r)) if p.starts_with("slot") => (format!("{p}."), r.to_string()),
            _ => (String::new(), name.clone()),
        };
        let parts: Vec<String> = rest.split('+').map(|p| format!("{prefix}{p}")).collect();
        let want: u64 = parts
            .iter()
            .map(|p| {
                *plan
                    .get(p)
                    .unwrap_or_else(|| panic!("{p} allocated, not planned"))
            })
            .sum();
        assert_eq!(bytes, want, "{name}: allocated vs planned");
        seen.extend(parts);
    }
    for (name, bytes) in &plan {
        assert!(
            seen.contains(name) || *bytes == 0,
            "{name} planned, not allocated"
        );
    }
    eprintln!("{} buffers planned and allocated alike", plan.len());
}

#[test]
fn plan_np_4_is_what_four_server_slots_allocate() {
    check(&common::model_path(), None, 4);
}

/// `flint plan` without `-np` is what `generate`, `chat`, `bench` and `serve -np 1` allocate:
/// the engine's one-sequence batch, not a plan of its own.
#[test]
fn plan_np_1_is_what_one_sequence_allocates() {
    check(&common::model_path(), None, 1);
}

#[test]
fn with_a_drafter_too() {
    let tmp = common::temp_dir("plan-slots");
    let target = GgufFile::open(&common::model_path()).unwrap();
    let d = tmp.path().join("drafter.gguf");
    random_drafter(&target, &InitOptions::default())
        .unwrap()
        .write_file(&d)
        .unwrap();
    check(&common::model_path(), Some(&d), 4);
    check(&common::model_path(), Some(&d), 1);
}
