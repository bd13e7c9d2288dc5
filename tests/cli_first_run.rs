//! First run to daily use: the device line of the run commands (and the GL note), the typed
//! refusals of a `-m` that is not a runnable model (a directory, a DSpark drafter, a shape-only
//! file, a file without a vocabulary), `-n -1`, the plan refusal's wording, `chat --stats` and
//! `gguf preset --help` pointing to `--list`.

use std::process::{Command, Output};

use flint::gguf::{GgmlType, GgufWriter, MetaValue};
use flint::gpu::adapters::{device_line, gl_note, AdapterSummary};
use flint::gpu::KeyLimits;

const MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
const DRAFTER: &str = "models/SmolLM2-135M-Instruct.dspark-Q8_0.gguf";

fn flint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .output()
        .expect("run flint")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("flint-first-run-")
        .tempdir()
        .expect("temp dir")
}

#[test]
fn generate_prints_the_device_line_and_n_minus_one_runs_to_the_end() {
    let dir = tmp();
    let stats = dir.path().join("stats.json");
    let o = flint(&[
        "generate",
        "-m",
        MODEL,
        "-p",
        "Count from one to one hundred: one, two, three,",
        "-n",
        "-1",
        "-c",
        "48",
        "--temp",
        "0",
        "--no-spec",
        "--stats-json",
        stats.to_str().expect("utf-8"),
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    // The device line: `flint: ADAPTER, BACKEND, DRIVER`, once.
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("flint: ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    let backends = [", vulkan, ", ", metal, ", ", dx12, ", ", gl, "];
    assert!(backends.iter().any(|b| lines[0].contains(b)), "{err}");
    // -n -1: until an end-of-generation token or the end of the 48-row context.
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).expect("stats")).expect("json");
    let prompt = v["prompt_tokens"].as_u64().expect("prompt_tokens");
    let generated = v["generated_tokens"].as_u64().expect("generated_tokens");
    assert!(generated >= 1, "{v}");
    assert!(prompt + generated <= 49, "{v}");
    assert!(
        err.contains("context full") || prompt + generated < 48,
        "stopped at neither the context's end nor an end-of-generation token: {err}"
    );
}

#[test]
fn negative_n_other_than_minus_one_is_refused() {
    let o = flint(&["generate", "-m", MODEL, "-p", "hi", "-n", "-2"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("-1 for no limit"), "{}", stderr(&o));
}

#[test]
fn a_directory_as_model_says_so() {
    let dir = tmp();
    let d = dir.path().to_str().expect("utf-8");
    for cmd in ["generate", "chat", "bench", "serve"] {
        let mut args = vec![cmd, "-m", d];
        if cmd == "generate" {
            args.extend(["-p", "hi"]);
        }
        let o = flint(&args);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains(d) && err.contains("is a directory"),
            "{cmd}: {err}"
        );
    }
}

#[test]
fn a_drafter_as_model_says_to_pass_it_with_md() {
    let o = flint(&["generate", "-m", DRAFTER, "-p", "hi"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(DRAFTER) && err.contains("drafter") && err.contains("-md"),
        "{err}"
    );
}

#[test]
fn a_shape_only_model_says_it_has_no_weights() {
    let dir = tmp();
    let path = dir.path().join("shape.gguf");
    let p = path.to_str().expect("utf-8");
    let o = flint(&["gguf", "preset", "qwen3-0.6b-q4_0", p]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = flint(&["generate", "-m", p, "-p", "hi"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains(p) && err.contains("no weights") && err.contains("plan"),
        "{err}"
    );
}

#[test]
fn a_model_without_vocabulary_says_so() {
    let dir = tmp();
    let path = dir.path().join("novocab.gguf");
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("llama".into()));
    w.set("tokenizer.ggml.model", MetaValue::String("none".into()));
    w.add_tensor("token_embd.weight", &[4, 2], GgmlType::F32, vec![0; 32])
        .expect("tensor");
    w.write_file(&path).expect("write");
    let p = path.to_str().expect("utf-8");
    let o = flint(&["generate", "-m", p, "-p", "hi"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains(p) && err.contains("no vocabulary"), "{err}");
}

#[test]
fn a_plan_refusal_says_does_not_fit() {
    let o = flint(&["generate", "-m", MODEL, "-p", "hi", "--gpu-mem", "1MiB"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("does not fit: the plan needs"), "{err}");
    assert!(!err.contains("out of memory"), "{err}");
}

#[test]
fn chat_stats_are_behind_a_flag() {
    let o = flint(&["chat", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--stats"), "{help}");
    let run = |extra: &[&str]| {
        let mut args = vec!["chat", "-m", MODEL, "-n", "4", "--temp", "0", "--no-spec"];
        args.extend_from_slice(extra);
        let mut child = Command::new(env!("CARGO_BIN_EXE_flint"))
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn chat");
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"Hello\n").expect("write");
        drop(stdin);
        let o = child.wait_with_output().expect("chat");
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    assert!(!run(&[]).contains("tok/s"));
    assert!(run(&["--stats"]).contains("tok/s"));
}

#[test]
fn gguf_preset_help_points_to_list() {
    let o = flint(&["gguf", "preset", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--list"), "{help}");
    let o = flint(&["gguf", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--list"), "{help}");
}

fn summary(backend: &str) -> AdapterSummary {
    AdapterSummary {
        index: 0,
        name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
        backend: backend.into(),
        device_type: "Cpu".into(),
        driver: "llvmpipe".into(),
        driver_info: "Mesa 22.3.6 (LLVM 15.0.6)".into(),
        vendor: 0,
        device: 0,
        features: Vec::new(),
        limits: KeyLimits {
            max_storage_buffer_binding_size: 0,
            max_buffer_size: 0,
            max_compute_workgroup_storage_size: 0,
            max_compute_invocations_per_workgroup: 0,
            max_compute_workgroup_size_x: 0,
            max_compute_workgroups_per_dimension: 0,
            max_storage_buffers_per_shader_stage: 0,
            min_subgroup_size: 0,
            max_subgroup_size: 0,
        },
    }
}

#[test]
fn device_line_and_gl_note() {
    assert_eq!(
        device_line(&summary("vulkan")),
        "flint: llvmpipe (LLVM 15.0.6, 256 bits), vulkan, llvmpipe Mesa 22.3.6 (LLVM 15.0.6)"
    );
    assert!(gl_note(&summary("vulkan")).is_none());
    let note = gl_note(&summary("gl")).expect("a note on GL");
    assert!(
        note.contains("GL") && note.contains("much slower"),
        "{note}"
    );
    assert!(note.contains("minutes"), "{note}");
    if cfg!(target_os = "linux") {
        assert!(note.contains("mesa-vulkan-drivers"), "{note}");
    } else {
        assert!(note.contains("driver"), "{note}");
    }
}
