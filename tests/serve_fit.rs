//! `flint serve` without `-c` at the edge of a `--gpu-mem` budget: the context it fits is the
//! largest whose plan fits (the plan `flint plan` prints, which is the plan the load allocates),
//! and the load then takes it without refusing. The budget is set half way between the plans of
//! two neighbouring contexts (5120 and 5376 rows, below the model's trained 8192), so a fit
//! that planned anything other than what the load allocates lands on the wrong side of it.

use crate::common;
use crate::harness;

use std::process::Command;

use harness::{serial, Server};
use serde_json::Value;

/// `flint plan -c n --json`'s total bytes (the device's own limits, as `serve` plans with).
fn planned_total(n: u32) -> u64 {
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .arg("plan")
        .arg("-m")
        .arg(common::model_path())
        .args(["-c", &n.to_string(), "--json"])
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .expect("run flint plan");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    v["total_bytes"].as_u64().expect("total_bytes")
}

#[test]
fn serve_fits_the_largest_context_its_load_takes() {
    let _guard = serial();
    let (lo, hi) = (planned_total(5120), planned_total(5376));
    assert!(hi > lo, "a larger context plans more: {lo} vs {hi}");
    // The default headroom of a budget under 5 GiB is 256 MiB.
    let budget = (256u64 << 20) + (lo + hi) / 2;
    let mut server = Server::start(&["--gpu-mem", &budget.to_string()]);
    let (status, body) = server.get("/props", &[]).expect("GET /props");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("props JSON");
    assert_eq!(
        v["default_generation_settings"]["n_ctx"].as_u64(),
        Some(5120),
        "budget {budget}: plans {lo} (5120) and {hi} (5376); log:\n{}",
        server.log()
    );
    assert!(
        server.log().contains("-c 5120: the largest that fits"),
        "{}",
        server.log()
    );
    server.signal("TERM");
    assert!(server.wait_exit().success(), "{}", server.log());
}
