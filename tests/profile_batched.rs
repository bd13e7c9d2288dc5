//! `flint bench --profile -npl B -d D`: a batched decode step of B hybrid sequences at depth D
//! each, its workgroup counts held to the grid formulas of the kernels' documentation:
//! - the delta rule, per DeltaNet layer and sequence, `n_v · ceil(head_v / 32)` workgroups
//!   (a v head spread over several workgroups, docs/shaders-ops.md);
//! - with split-KV chosen for decode rows (`FLINT_ATTN_PARALLELISM` large), per attention layer
//!   and sequence `n_splits · n_kv_heads · ceil(group / 8)` split workgroups and `n_head`
//!   reduce workgroups; on a CPU driver's own estimate, the fused kernel alone,
//!   `n_kv_heads · ceil(group / 8)` (its serial variant there: `ceil(n_head / 8)`).

use crate::common;

use std::process::Command;

use flint::model::hybrid::LayerKind;

/// `flint bench` with `env`, its stdout.
fn profile(model: &std::path::Path, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flint"));
    cmd.args(["bench", "-m"]).arg(model);
    cmd.args([
        "--profile",
        "-npl",
        "2",
        "-d",
        "600",
        "-r",
        "1",
        "-npp",
        "1",
        "-ntg",
        "1",
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run flint");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// (dispatches, workgroups) of `shader`'s row.
fn row(text: &str, shader: &str) -> Option<(u64, u64)> {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("| {shader} [")))?;
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    Some((cells[2].parse().ok()?, cells[3].parse().ok()?))
}

#[test]
fn a_batched_hybrid_step_launches_the_documented_workgroups() {
    let tmp = common::temp_dir("profile-batched");
    let model = common::random_preset(tmp.path(), "qwen35-tiny-f32", 3);
    let file = flint::gguf::GgufFile::open(&model).unwrap();
    let hp = flint::model::Hparams::from_gguf(&file.gguf).unwrap();
    let h = hp.hybrid.clone().expect("a hybrid");
    let delta_layers = (0..hp.n_layer)
        .filter(|&il| hp.layer_kind(il) == LayerKind::DeltaNet)
        .count() as u64;
    let attn_layers = u64::from(hp.n_layer) - delta_layers;
    let b = 2u64;
    let (kv, n_head) = (u64::from(hp.n_head_kv), u64::from(hp.n_head));
    let chunks = (n_head / kv).div_ceil(8);
    let per_head = u64::from(h.head_v_dim).div_ceil(32);

    let split = profile(&model, &[("FLINT_ATTN_PARALLELISM", "1000000")]);
    assert!(
        split.contains("batched decode step, 2 sequence(s):"),
        "{split}"
    );
    let want = (
        b * delta_layers,
        b * delta_layers * u64::from(h.n_v_heads) * per_head,
    );
    assert_eq!(row(&split, "delta_rule"), Some(want), "{split}");
    // The decode row at depth 600 sees 601 keys: 3 splits.
    let n_splits = 601u64.div_ceil(256);
    let want = (b * attn_layers, b * attn_layers * n_splits * kv * chunks);
    assert_eq!(row(&split, "attn_split"), Some(want), "{split}");
    let want = (b * attn_layers, b * attn_layers * n_head);
    assert_eq!(row(&split, "attn_reduce"), Some(want), "{split}");

    let fused = profile(&model, &[("FLINT_ATTN_PARALLELISM", "0")]);
    assert_eq!(row(&fused, "attn_split"), None, "{fused}");
    // The fused pass, or on CPU drivers its serial variant: one invocation per (row, query
    // head) in workgroups of 8.
    let (got, per_layer) = match row(&fused, "attn_fused") {
        Some(r) => (r, kv * chunks),
        None => (
            row(&fused, "attn_serial").expect("a fused row"),
            n_head.div_ceil(8),
        ),
    };
    assert_eq!(
        got,
        (b * attn_layers, b * attn_layers * per_layer),
        "{fused}"
    );
}
