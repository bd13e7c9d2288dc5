//! `flint bench` as a process on the default model with tiny settings, in every output format,
//! each read back with a standard reader: serde_json (json, jsonl), Python's csv module and
//! sqlite3 (csv, sql; a missing python3 or module fails them, naming what to install). Never
//! asserts on speed.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

const REPS: usize = 2;

/// Runs `flint bench` with the tiny test set plus `extra`; returns stdout.
fn bench(format: &str, extra: &[&str]) -> String {
    let model = common::model_path();
    let reps = REPS.to_string();
    let mut args = vec![
        "bench",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "4",
        "-n",
        "2",
        "-r",
        &reps,
        "-d",
        "0,4",
        "-o",
        format,
    ];
    args.extend_from_slice(extra);
    flint_ok(&args)
}

/// Runs flint with `args`; returns its stdout, or panics with its stderr when it fails.
fn flint_ok(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .output()
        .expect("run flint");
    assert!(
        out.status.success(),
        "flint {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// The (n_prompt, n_gen, n_depth) of the tiny set, in llama-bench's order.
const EXPECTED: [(u64, u64, u64); 4] = [(4, 0, 0), (0, 2, 0), (4, 0, 4), (0, 2, 4)];

fn check_row(row: &Value, want: (u64, u64, u64)) {
    let u = |k: &str| row[k].as_u64().unwrap_or_else(|| panic!("{k} in {row}"));
    assert_eq!((u("n_prompt"), u("n_gen"), u("n_depth")), want, "{row}");
    assert_eq!(row["samples_ns"].as_array().unwrap().len(), REPS);
    assert_eq!(row["samples_ts"].as_array().unwrap().len(), REPS);
    assert!(row["avg_ts"].as_f64().unwrap() > 0.0, "{row}");
    assert!(u("avg_ns") > 0);
    assert!(u("model_size") > 90 << 20 && u("model_n_params") > 130_000_000);
    assert_eq!(row["model_type"], "llama 135M Q4_1");
    assert_eq!(row["type_k"], "f16");
    assert!(u("mem_target_bytes") >= u("model_size"));
    assert!(u("max_storage_binding") > 0);
    assert!(!row["adapter"].as_str().unwrap().is_empty());
    // The kernel choice for lavapipe (a CPU adapter with subgroups of 8 and 64-bit integers).
    let kernels = row["kernels"].as_str().unwrap();
    assert!(
        kernels.starts_with("matmul 1 lane, rows kernel"),
        "{kernels}"
    );
    assert!(kernels.contains("attention serial"), "{kernels}");
    // gbps only for pure generation; bandwidth_pct only with --bandwidth.
    assert_eq!(row["gbps"].is_number(), want.0 == 0, "{row}");
}

#[test]
fn json_with_pg_bandwidth_and_compare() {
    let dir = std::env::temp_dir().join(format!("flint-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let peer = dir.join("llama-bench.jsonl");
    std::fs::write(
        &peer,
        "{\"backends\":\"CPU\",\"n_prompt\":0,\"n_gen\":2,\"n_depth\":0,\"avg_ts\":100.0}\n",
    )
    .unwrap();
    let text = bench(
        "json",
        &[
            "-pg",
            "4,2",
            "--bandwidth",
            "10",
            "--compare",
            peer.to_str().unwrap(),
        ],
    );
    let rows: Vec<Value> = serde_json::from_str(&text).expect("json array");
    let want = [
        (4, 0, 0),
        (0, 2, 0),
        (4, 2, 0),
        (4, 0, 4),
        (0, 2, 4),
        (4, 2, 4),
    ];
    assert_eq!(rows.len(), want.len());
    for (row, w) in rows.iter().zip(want) {
        check_row(row, w);
        assert_eq!(row["bandwidth_pct"].is_number(), w.0 == 0);
        let matched = w == (0, 2, 0);
        assert_eq!(row.get("compare_ratio").is_some(), matched, "{row}");
        if matched {
            let r = row["compare_ratio"].as_f64().unwrap();
            let ours = row["avg_ts"].as_f64().unwrap();
            assert!((r - ours / 100.0).abs() < 1e-9);
        }
    }
    // pg t/s counts prompt and generated tokens.
    let pg = &rows[2];
    let ns = pg["samples_ns"][0].as_f64().unwrap();
    let ts = pg["samples_ts"][0].as_f64().unwrap();
    assert!((ts - 6.0 * 1e9 / ns).abs() < 1e-6 * ts);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn jsonl_one_object_per_line() {
    let text = bench("jsonl", &[]);
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one json object per line"))
        .collect();
    assert_eq!(rows.len(), EXPECTED.len());
    for (row, w) in rows.iter().zip(EXPECTED) {
        check_row(row, w);
        assert!(row["bandwidth_pct"].is_null());
    }
}

#[test]
fn markdown_table() {
    let text = bench("md", &[]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 + EXPECTED.len(), "{text}");
    let head: Vec<&str> = lines[0].split('|').map(str::trim).collect();
    assert_eq!(
        head,
        ["", "model", "size", "params", "backend", "test", "t/s", ""]
    );
    for (line, name) in lines[2..]
        .iter()
        .zip(["pp4", "tg2", "pp4 @ d4", "tg2 @ d4"])
    {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(cells[5], name, "{line}");
        assert!(line.contains(" ± "), "{line}");
    }
}

/// Runs `python3 -c script` with `input` on stdin and returns its stdout. The check needs
/// python3 with `module`: without either it fails, naming what to install, and never skips.
fn python(module: &str, script: &str, input: &str) -> String {
    let need = format!(
        "python3 with its {module} module is needed for this check: \
         apt-get install python3 (or any python3 whose standard library has {module})"
    );
    let probe = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .unwrap_or_else(|e| panic!("{need} (running python3: {e})"));
    assert!(
        probe.status.success(),
        "{need} (import {module}: {})",
        String::from_utf8_lossy(&probe.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{need} (running python3: {e})"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn csv_reads_with_python_csv_module() {
    let text = bench("csv", &[]);
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    for field in [
        "model_filename",
        "model_type",
        "model_size",
        "model_n_params",
        "n_batch",
        "n_ubatch",
        "type_k",
        "type_v",
        "n_prompt",
        "n_gen",
        "n_depth",
        "test_time",
        "avg_ns",
        "stddev_ns",
        "avg_ts",
        "stddev_ts",
        "samples_ns",
        "samples_ts",
        "backend",
        "adapter",
        "mem_target_bytes",
        "gbps",
    ] {
        assert!(header.contains(&field), "{field} missing from {header:?}");
    }
    let script = r#"
import csv, json, sys
rows = list(csv.DictReader(sys.stdin))
print(json.dumps([[int(r["n_prompt"]), int(r["n_gen"]), int(r["n_depth"]),
                   len(r["samples_ns"].split()), float(r["avg_ts"])] for r in rows]))
"#;
    assert_eq!(text.lines().count(), 1 + EXPECTED.len(), "{text}");
    let out = python("csv", script, &text);
    let rows: Vec<(u64, u64, u64, usize, f64)> = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(rows.len(), EXPECTED.len());
    for (r, w) in rows.iter().zip(EXPECTED) {
        assert_eq!((r.0, r.1, r.2), w);
        assert_eq!(r.3, REPS);
        assert!(r.4 > 0.0);
    }
}

#[test]
fn sql_loads_into_sqlite() {
    let text = bench("sql", &[]);
    assert!(
        text.starts_with("CREATE TABLE IF NOT EXISTS test ("),
        "{text}"
    );
    assert_eq!(text.matches("INSERT INTO test (").count(), EXPECTED.len());
    let script = r#"
import sqlite3, sys, json
db = sqlite3.connect(":memory:")
db.executescript(sys.stdin.read())
rows = db.execute("SELECT n_prompt, n_gen, n_depth, avg_ts, samples_ns, model_type FROM test ORDER BY rowid").fetchall()
print(json.dumps(rows))
"#;
    let out = python("sqlite3", script, &text);
    let rows: Vec<(u64, u64, u64, f64, String, String)> = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(rows.len(), EXPECTED.len());
    for (r, w) in rows.iter().zip(EXPECTED) {
        assert_eq!((r.0, r.1, r.2), w);
        assert!(r.3 > 0.0);
        assert_eq!(r.4.split(' ').count(), REPS);
        assert_eq!(r.5, "llama 135M Q4_1");
    }
}

/// `--sps`: one JSON object per batch size, 1 first, each with a sample per round; the ratio of
/// B = 1 to itself is 1 and the curve is timed at the requested depth. Bad lists are refused.
#[test]
fn sps_curve_times_verify_steps_of_every_batch_size() {
    let model = common::model_path();
    let run = |extra: &[&str]| {
        let mut args = vec!["bench", "-m", model.to_str().unwrap(), "-r", "2"];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_flint"))
            .args(&args)
            .output()
            .expect("run flint bench --sps")
    };
    let out = run(&["--sps", "4,2", "-d", "3", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = rows.as_array().expect("array");
    let batches: Vec<u64> = rows.iter().map(|r| r["batch"].as_u64().unwrap()).collect();
    assert_eq!(batches, [1, 4, 2]);
    for r in rows {
        assert_eq!(r["n_depth"], 3, "{r}");
        assert_eq!(r["samples_s"].as_array().unwrap().len(), 2, "{r}");
        assert!(r["sps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["sps_ratio_to_b1"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(rows[0]["sps_ratio_to_b1"].as_f64(), Some(1.0));
    for (extra, want) in [
        (&["--sps", "0,2"][..], "batch sizes start at 1"),
        (&["--sps", "2", "-o", "csv"][..], "--sps writes md or json"),
    ] {
        let out = run(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(want),
            "{extra:?}: {err}"
        );
    }
}

/// The `| kernel | dispatches | workgroups | grid | … |` row of the kernel whose name starts
/// with `shader` in a profile table: (dispatches, workgroups, grid text).
fn profile_row<'a>(table: &'a str, shader: &str) -> Option<(u64, u64, &'a str)> {
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("| {shader} [")))?;
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    Some((cells[2].parse().ok()?, cells[3].parse().ok()?, cells[4]))
}

/// `x×y×z` and `x×y×z (×n)` cells: Σ n·x·y·z.
fn grid_workgroups(cell: &str) -> u64 {
    cell.split(", ")
        .map(|g| {
            let (dims, n) = match g.split_once(" (×") {
                Some((d, n)) => (d, n.trim_end_matches(')').parse::<u64>().unwrap()),
                None => (g, 1),
            };
            n * dims
                .split('×')
                .map(|x| x.parse::<u64>().unwrap())
                .product::<u64>()
        })
        .sum()
}

/// `--profile --sps B`: the decode step and a verify step of B rows with every row's logits (the
/// step SPS(B) times), each table's dispatch column summing to its step's dispatch count, each
/// kernel's workgroups the sum of its grids, and the attention kernels' workgroups those of
/// the grid formulas docs/shaders-attention.md states (a Q8_0 cache; the decode step takes
/// the two-pass split-KV path where the engine chooses it: split `n_splits · n_q · n_kv_heads ·
/// ceil(group / 8)`, reduce `n_q · n_head`, fused `n_q · n_kv_heads · ceil(group / 8)`, per
/// layer) at a depth spanning two 256-key splits; B = 0 is refused.
#[test]
fn profile_of_a_verify_step() {
    let model = common::model_path();
    let file = flint::gguf::GgufFile::open(&model).unwrap();
    let hp = flint::model::Hparams::from_gguf(&file.gguf).unwrap();
    let (layers, n_head, kv) = (
        u64::from(hp.n_layer),
        u64::from(hp.n_head),
        u64::from(hp.n_head_kv),
    );
    let chunks = (n_head / kv).div_ceil(8);
    let depth = 300u64;
    let args = [
        "bench",
        "-m",
        model.to_str().unwrap(),
        "--profile",
        "--sps",
        "3",
        "-d",
        "300",
        "-r",
        "1",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
    ];
    let text = flint_ok(&args);
    let heads = [
        "step of 1 row(s) (1 with logits) at depth 300: ",
        "step of 3 row(s) (3 with logits) at depth 300: ",
    ];
    let mut sections = Vec::new();
    for head in heads {
        let at = text
            .find(head)
            .unwrap_or_else(|| panic!("no '{head}' in:\n{text}"));
        sections.push(&text[at + head.len()..]);
    }
    for (i, s) in sections.iter().enumerate() {
        let stated: usize = s
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("dispatch count of step {i}: {s}"));
        // The table rows up to the next step line.
        let table = s.split("step of ").next().unwrap_or("");
        let counted: usize = table
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| kernel"))
            .map(|l| {
                l.split('|')
                    .nth(2)
                    .unwrap()
                    .trim()
                    .parse::<usize>()
                    .unwrap()
            })
            .sum();
        assert_eq!(counted, stated, "step {i}:\n{table}");
        for line in table
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| kernel"))
        {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let wg: u64 = cells[3].parse().unwrap();
            assert_eq!(wg, grid_workgroups(cells[4]), "{line}");
        }
        let n_q = [1u64, 3][i];
        // The step's last row sees depth + n_q keys.
        let n_splits = (depth + n_q).div_ceil(256);
        // The engine's decode row takes the split-KV pair where rows × KV heads are few
        // against the device (`FLINT_ATTN_PARALLELISM`), else the fused pass.
        if i == 0 && profile_row(table, "attn_split").is_some() {
            let (n, wg, _) = profile_row(table, "attn_split").expect("attn_split row");
            assert_eq!(
                (n, wg),
                (layers, layers * n_splits * n_q * kv * chunks),
                "{table}"
            );
            let (n, wg, _) = profile_row(table, "attn_reduce").expect("attn_reduce row");
            assert_eq!((n, wg), (layers, layers * n_q * n_head), "{table}");
        } else {
            let (n, wg, _) = profile_row(table, "attn_fused").expect("attn_fused row");
            assert_eq!((n, wg), (layers, layers * n_q * kv * chunks), "{table}");
        }
    }
    // A batch of 0 rows is refused as `--sps` alone refuses it.
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args([
            "bench",
            "-m",
            model.to_str().unwrap(),
            "--profile",
            "--sps",
            "0",
        ])
        .output()
        .expect("run flint bench --profile --sps 0");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("batch sizes start at 1"),
        "{err}"
    );
}
