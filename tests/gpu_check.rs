//! The GPU proof kit's dry run (`scripts/gpu-check.sh OUT --dry-run`) on this machine's adapter
//! (lavapipe in CI), so the script and its report never rot before a GPU machine runs them:
//! every step succeeds, and the report carries the fields docs/GPU.md describes, with figures
//! that are numbers (their size is not checked: this is not a benchmark).

use crate::common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn num(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

#[test]
fn the_dry_run_passes_and_its_report_validates() {
    let out = common::temp_dir("gpu-check");
    let root = env!("CARGO_MANIFEST_DIR");
    // The test executables of this build sit beside this one.
    let exe = std::env::current_exe().expect("this test's path");
    let deps = exe.parent().expect("the deps directory");
    let run = Command::new("bash")
        .arg(Path::new(root).join("scripts/gpu-check.sh"))
        .arg(out.path())
        .arg("--dry-run")
        .env("FLINT_BIN", env!("CARGO_BIN_EXE_flint"))
        .env("FLINT_TEST_DIR", deps)
        .env("FLINT_KIT_DIR", out.path().join("no-kit"))
        .output()
        .expect("run bash");
    let report = std::fs::read_to_string(out.path().join("report.json"));
    let logs = std::fs::read_to_string(out.path().join("logs.txt")).unwrap_or_default();
    assert!(
        run.status.success(),
        "gpu-check.sh --dry-run failed ({}):\n{}\n{}\n--- logs ---\n{logs}",
        run.status,
        String::from_utf8_lossy(&run.stderr),
        report.as_deref().unwrap_or("no report")
    );
    let r: Value = serde_json::from_str(&report.expect("report.json")).expect("report is JSON");
    eprintln!("dry run: {} s, adapter {}", r["total_s"], r["adapter"]);
    assert_eq!(r["kit"], "flint gpu-check");
    assert_eq!(r["dry_run"], true);
    assert!(num(&r["total_s"], "total_s") <= num(&r["budget_s"], "budget_s") + 30.0);
    assert!(!r["adapter"].as_str().unwrap_or_default().is_empty());
    assert!(r["devices"].as_array().is_some_and(|d| !d.is_empty()));

    let steps = r["steps"].as_array().expect("steps");
    let names: Vec<&str> = steps.iter().filter_map(|s| s["name"].as_str()).collect();
    for want in [
        "devices",
        "suite-kernels_matmul",
        "suite-kernels_matmul_controls",
        "suite-kernels_attention",
        "suite-kernels_matmul_invariance",
        "suite-model_arch",
        "suite-model_forward",
        "model",
        "drafter",
        "bench",
        "sps",
        "profile",
        "spec",
    ] {
        assert!(names.contains(&want), "no step {want} in {names:?}");
    }
    for s in steps {
        assert_eq!(s["status"], "ok", "step {s}");
        num(&s["seconds"], "seconds");
    }
    let controls = steps
        .iter()
        .find(|s| s["name"] == "suite-kernels_matmul_controls")
        .expect("controls step");
    assert!(num(&controls["passed"], "passed") >= 1.0 && controls["failed"] == 0);

    let bench = r["bench"].as_array().expect("bench rows");
    assert_eq!(bench.len(), 2, "a pp and a tg row");
    for row in bench {
        assert!(num(&row["avg_ts"], "avg_ts") > 0.0, "{row}");
        assert!(row.get("bandwidth_pct").is_some(), "{row}");
    }
    let sps = r["sps"].as_array().expect("sps rows");
    assert_eq!(sps.len(), 2, "B = 1, 2");
    for row in sps {
        num(&row["sps"], "sps");
        num(&row["sps_ratio_to_b1"], "sps ratio");
    }
    let all = r["spec"]
        .as_array()
        .and_then(|rows| rows.iter().find(|row| row["row"] == "all"))
        .expect("the spec benchmark's overall row");
    for k in [
        "inject_ms",
        "draft_ms",
        "verify_ms",
        "plain_tps",
        "spec_tps",
        "tau",
    ] {
        num(&all[k], k);
    }
    assert_eq!(all["greedy_match"], true, "{all}");
    assert!(r["profile_md"]
        .as_str()
        .is_some_and(|p| p.contains("| kernel |")));
    let summary = std::fs::read_to_string(out.path().join("summary.md")).expect("summary.md");
    for n in &names {
        assert!(summary.contains(&format!("| {n} |")), "summary lacks {n}");
    }
}
