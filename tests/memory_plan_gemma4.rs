//! `flint plan -c 32768` of the Gemma 4 presets with the published dimensions (E4B, 26B-A4B,
//! 31B at Q4_K_M, `src/model/presets_gemma4.rs`): every K/V buffer is held to sizes computed
//! here from the models' `config.json` numbers alone (rows × KV heads × head size × 2 bytes,
//! f16): a sliding layer is charged only its ring of `window + ubatch` rows, a global layer
//! `n_ctx` rows of its own head size (512) and KV heads, and a shared-KV layer (E4B's last 18)
//! nothing at all. E4B's `per_layer_token_embd` stays on the host (as llama.cpp keeps it):
//! only its per-token rows are uploaded (`io.per_layer`).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const N_CTX: u64 = 32768;
const UBATCH: u64 = 512;
const F16: u64 = 2;

/// A model's attention shape from its config.json: (layers, shared-KV layers, sliding window,
/// KV heads sliding / global; head sizes are 256 / 512 in every Gemma 4).
struct Published {
    preset: &'static str,
    layers: u64,
    shared: u64,
    window: u64,
    kv_swa: u64,
    kv_full: u64,
}

const MODELS: [Published; 3] = [
    Published {
        preset: "gemma4-e4b-q4_k_m",
        layers: 42,
        shared: 18,
        window: 512,
        kv_swa: 2,
        kv_full: 2,
    },
    Published {
        preset: "gemma4-26b-a4b-q4_k_m",
        layers: 30,
        shared: 0,
        window: 1024,
        kv_swa: 8,
        kv_full: 2,
    },
    Published {
        preset: "gemma4-31b-q4_k_m",
        layers: 60,
        shared: 0,
        window: 1024,
        kv_swa: 16,
        kv_full: 4,
    },
];

fn flint(args: &[&str]) -> (Option<i32>, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .env("FLINT_BACKEND", "vulkan")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), json, stderr)
}

fn preset(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flint-g4plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.gguf"));
    let (code, _, err) = flint(&["gguf", "preset", name, path.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    path
}

/// The plan's bytes for buffer `name` (`None` where it plans none).
fn planned(plan: &Value, name: &str) -> Option<u64> {
    plan["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .map(|b| b["bytes"].as_u64().unwrap())
}

fn check(m: &Published) {
    let path = preset(m.preset);
    let args = [
        "plan",
        "-m",
        path.to_str().unwrap(),
        "-c",
        "32768",
        "--json",
    ];
    let (_, plan, err) = flint(&[&args[..], &["--gpu-mem", "64GiB"]].concat());
    assert!(plan.is_object(), "{}: no plan: {err}", m.preset);
    assert_eq!(plan["n_ctx"], N_CTX, "{}", m.preset);
    let (mut sliding, mut global) = (0u64, 0u64);
    for il in 0..m.layers {
        let is_sliding = il % 6 != 5; // the published 5 sliding : 1 global layer_types
        let (k, v) = (format!("kv.k.{il}"), format!("kv.v.{il}"));
        if il >= m.layers - m.shared {
            assert_eq!(planned(&plan, &k), None, "{}: shared layer {il}", m.preset);
            assert_eq!(planned(&plan, &v), None, "{}: shared layer {il}", m.preset);
            continue;
        }
        let want = if is_sliding {
            (m.window + UBATCH) * m.kv_swa * 256 * F16
        } else {
            N_CTX * m.kv_full * 512 * F16
        };
        assert_eq!(planned(&plan, &k), Some(want), "{}: {k}", m.preset);
        assert_eq!(planned(&plan, &v), Some(want), "{}: {v}", m.preset);
        *(if is_sliding {
            &mut sliding
        } else {
            &mut global
        }) += 2 * want;
    }
    let s = &plan["kv_sliding_window"];
    assert_eq!(s["sliding_bytes"], sliding, "{}", m.preset);
    assert_eq!(s["global_bytes"], global, "{}", m.preset);
    assert_eq!(s["shared_layers"], m.shared, "{}", m.preset);
    eprintln!(
        "{}: K/V {} MiB (sliding {} MiB, global {} MiB)",
        m.preset,
        (sliding + global) >> 20,
        sliding >> 20,
        global >> 20
    );
}

#[test]
fn e4b_charges_rings_globals_and_nothing_for_shared_kv_layers() {
    check(&MODELS[0]);
    let path = preset(MODELS[0].preset);
    let args = [
        "plan",
        "-m",
        path.to_str().unwrap(),
        "-c",
        "32768",
        "--json",
    ];
    let (_, plan, _) = flint(&[&args[..], &["--gpu-mem", "64GiB"]].concat());
    // per_layer_token_embd stays in the mapped file; [512 rows, 42·256] f32 come up per step.
    assert_eq!(planned(&plan, "per_layer_token_embd.weight"), None);
    assert_eq!(planned(&plan, "io.per_layer"), Some(UBATCH * 42 * 256 * 4));
}

#[test]
fn moe_26b_a4b_charges_rings_and_its_two_head_global_layers() {
    check(&MODELS[1]);
}

#[test]
fn dense_31b_charges_rings_and_its_four_head_global_layers() {
    check(&MODELS[2]);
}
