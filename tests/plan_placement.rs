//! Weight placement in `flint plan` (`memory::placement`) on the shape-only Qwen3.5-35B-A3B
//! Q4_K_M preset (40 layers of 256 routed experts; 20.5 GiB) with a 16 GiB budget and a 32768
//! context, as a 16 GB laptop runs it: automatic placement moves the routed experts of whole
//! layers, last first, to host memory until the device part fits; `--n-cpu-moe 20` moves
//! exactly layers 0..20; `--cpu-moe` and `-ot exps=CPU` (llama.cpp's spellings) all 40; no
//! other tensor moves. The expectations are llama.cpp's flag semantics (`common/arg.cpp`:
//! `--cpu-moe` = `\.ffn_(up|down|gate)_exps=CPU`, `--n-cpu-moe N` = that for `blk.0..N-1`).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const LAYERS: u64 = 40;

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

fn preset() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flint-placeplan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("qwen35-35b-a3b-q4_k_m.gguf");
    if !path.exists() {
        let (code, _, err) = flint(&[
            "gguf",
            "preset",
            "qwen35-35b-a3b-q4_k_m",
            path.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "{err}");
    }
    path
}

/// The plan with `extra` flags, its stderr, and the layers whose experts are on the host
/// (checked: a layer's three expert tensors move together; nothing else moves).
fn plan(extra: &[&str]) -> (Value, String, Vec<u64>) {
    let path = preset();
    let base = [
        "plan",
        "-m",
        path.to_str().unwrap(),
        "--gpu-mem",
        "16GiB",
        "-c",
        "32768",
        "--json",
    ];
    let (code, plan, err) = flint(&[&base[..], extra].concat());
    assert!(plan.is_object(), "{extra:?}: no plan: {err}");
    let mut host = Vec::new();
    for b in plan["buffers"].as_array().unwrap() {
        let name = b["name"].as_str().unwrap();
        let placement = b["placement"].as_str().unwrap();
        let exps = ["ffn_gate_exps.", "ffn_up_exps.", "ffn_down_exps."]
            .iter()
            .any(|s| name.contains(s));
        if !exps {
            assert_eq!(placement, "device", "{extra:?}: {name} moved");
            continue;
        }
        let layer: u64 = name.split('.').nth(1).unwrap().parse().unwrap();
        if placement == "host" {
            host.push(layer);
        }
    }
    host.sort_unstable();
    let layers: Vec<u64> = host.chunks(3).map(|c| c[0]).collect();
    for c in host.chunks(3) {
        assert!(
            c.len() == 3 && c.iter().all(|&l| l == c[0]),
            "{extra:?}: {host:?}"
        );
    }
    assert_eq!(code, Some(0), "{extra:?}: the plan does not fit: {err}");
    assert_eq!(plan["fits"], true, "{extra:?}");
    let device = plan["device_bytes"].as_u64().unwrap();
    assert!(
        device <= plan["budget_bytes"].as_u64().unwrap(),
        "{extra:?}"
    );
    assert_eq!(
        plan["host_expert_layers"].as_array().unwrap().len(),
        layers.len()
    );
    (plan, err, layers)
}

#[test]
fn experts_go_to_the_host_as_llama_cpp_places_them() {
    // No flag: the last layers' experts, as few as make the device part fit.
    let (p, err, auto) = plan(&[]);
    assert!(!auto.is_empty() && auto.len() < LAYERS as usize, "{auto:?}");
    let first = LAYERS - auto.len() as u64;
    assert_eq!(auto, (first..LAYERS).collect::<Vec<_>>());
    assert_eq!(err.matches("go to host memory").count(), 1, "{err}");
    assert!(p["host_bytes"].as_u64().unwrap() > 0);
    let (_, err, n20) = plan(&["--n-cpu-moe", "20"]);
    assert_eq!(n20, (0..20).collect::<Vec<_>>());
    assert!(!err.contains("go to host memory"), "{err}");
    let all: Vec<u64> = (0..LAYERS).collect();
    assert_eq!(plan(&["--cpu-moe"]).2, all);
    assert_eq!(plan(&["-ot", "exps=CPU"]).2, all);
    assert_eq!(plan(&["-cmoe"]).2, all);
    // -ot comes first: it keeps layer 0's experts on the device over --cpu-moe.
    let (_, _, ot) = plan(&["-ot", r"blk\.0\.=GPU", "--cpu-moe"]);
    assert_eq!(ot, (1..LAYERS).collect::<Vec<_>>());
}

#[test]
fn placement_totals_in_the_text_plan() {
    let path = preset();
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["plan", "-m", path.to_str().unwrap()])
        .args(["--gpu-mem", "16GiB", "-c", "32768", "--n-cpu-moe", "20"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("device   total"), "{text}");
    assert!(text.contains("host     total"), "{text}");
    assert!(
        text.contains("routed experts of 20 layers (0-19)"),
        "{text}"
    );
}

#[test]
fn flags_become_llama_cpp_patterns() {
    use flint::memory::placement::{expert_layer, rules};
    use flint::memory::Placement;
    let r = rules(&[], false, Some(2)).unwrap();
    assert!(!r.auto);
    assert_eq!(r.overrides.len(), 2);
    assert_eq!(r.overrides[1].0, r"blk\.1\.ffn_(up|down|gate)_exps");
    let r = rules(&["exps=CPU,attn=GPU0".into()], false, None).unwrap();
    assert_eq!(
        r.overrides,
        vec![
            ("exps".into(), Placement::Host),
            ("attn".into(), Placement::Device)
        ]
    );
    assert!(rules(&["exps".into()], false, None).is_err());
    assert!(rules(&["(=CPU".into()], false, None).is_err());
    assert!(rules(&[], false, None).unwrap().auto);
    assert_eq!(expert_layer("blk.12.ffn_up_exps.weight"), Some(12));
    assert_eq!(expert_layer("blk.12.ffn_up_shexp.weight"), None);
    assert_eq!(expert_layer("blk.3.ffn_gate_inp.weight"), None);
    assert_eq!(expert_layer("token_embd.weight"), None);
}
