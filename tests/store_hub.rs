//! Models from the Hugging Face Hub by name (docs/MODELS.md), against a Hub served on loopback
//! by the test: the tree listing (`GET /api/models/{repo}/tree/main?recursive=true`, JSON shaped
//! as the Hub documents it: `type`, `oid`, `size`, `path`, and `lfs {oid, size, pointerSize}`
//! for LFS files, <https://huggingface.co/docs/huggingface.js/hub/interfaces/ListFileEntry>) and
//! the bytes (`GET /{repo}/resolve/main/{file}`, with `Range`). The binary runs with a temporary
//! store and `HF_ENDPOINT` pointing at the server.
//!
//! - a good repository with several quants: `flint generate -hf USER/REPO:Q4_1` downloads the
//!   real test model, and a second run with the server stopped gives the same output offline;
//!   `-m` by store name, `flint models`, `flint rm`; llama.cpp's default pick (Q4_K_M, else
//!   Q8_0); the token sent as `Authorization: Bearer`;
//! - a wrong sha256 (refused, nothing installed), a truncated body (an error, never installed;
//!   the next run resumes with `Range`), a 404 repository (named), a missing quant (the quants
//!   there listed);
//! - a split model written by gguf-py's `GGUFWriter(split_max_tensors=…)` (pip-installed into
//!   target/tmp once; no pip or PyPI FAILS the test): fetched shard by shard, and the joined
//!   load's logits equal the unsplit file's bit for bit.

use crate::common;
#[path = "hub/server.rs"]
mod server;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};

use server::{lfs, File, Hub, Server};

const GOOD: &str = "test-org/SmolLM2-135M-Instruct-GGUF";
const Q4_1: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn fake(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = common::Rng::new(seed);
    let mut v = b"GGUF".to_vec();
    v.extend((0..n).map(|_| rng.next_u64() as u8));
    v
}

/// A scratch world: a store and a working directory outside the repository.
struct World {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl World {
    fn new() -> World {
        let tmp = common::temp_dir("hub");
        let root = tmp.path().to_path_buf();
        std::fs::create_dir_all(root.join("work")).unwrap();
        World { _tmp: tmp, root }
    }

    fn store(&self) -> PathBuf {
        self.root.join("store")
    }

    fn flint_env(&self, server: &Server, env: &[(&str, &str)], args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flint"));
        // HOME and the cache directory stay the user's (the driver's shader cache warm); the store
        // is the test's own.
        cmd.current_dir(self.root.join("work"))
            .env("XDG_RUNTIME_DIR", std::env::temp_dir())
            .env("FLINT_MODELS", self.store())
            .env("HF_ENDPOINT", server.endpoint())
            .env_remove("HF_TOKEN")
            .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run flint");
        assert_ne!(out.status.code(), Some(101), "flint panicked: {out:?}");
        out
    }

    fn flint(&self, server: &Server, args: &[&str]) -> Output {
        self.flint_env(server, &[], args)
    }

    /// Every file under the store's hf/ folder, relative, sorted.
    fn hub_files(&self) -> Vec<String> {
        fn walk(root: &Path, d: &Path, out: &mut Vec<String>) {
            let Ok(rd) = std::fs::read_dir(d) else { return };
            for e in rd.flatten() {
                if e.path().is_dir() {
                    walk(root, &e.path(), out);
                } else {
                    out.push(e.path().strip_prefix(root).unwrap().display().to_string());
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.store().join("hf"), &self.store().join("hf"), &mut out);
        out.sort();
        out
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The good repository: the real test model as Q4_1, stand-ins for other quants (never
/// loaded), a projector and a README (not LFS).
fn good_repo() -> Vec<File> {
    let model = std::fs::read(common::model_path()).expect("models/ holds the test model");
    vec![
        File {
            path: "README.md".into(),
            bytes: Arc::new(b"# test\n".to_vec()),
            lfs: false,
            listed_sha: None,
        },
        lfs("SmolLM2-135M-Instruct.F16.gguf", fake(1, 20_000)),
        lfs(Q4_1, model),
        lfs("SmolLM2-135M-Instruct.Q8_0.gguf", fake(2, 30_000)),
        lfs("mmproj-SmolLM2-135M-Instruct.Q8_0.gguf", fake(3, 10_000)),
    ]
}

#[test]
fn generate_by_hub_name_then_offline_from_the_store() {
    let mut repos = HashMap::new();
    repos.insert(GOOD.to_string(), good_repo());
    let server = Server::start(Hub {
        repos,
        ..Hub::default()
    });
    let w = World::new();
    let run = |args: &[&str]| {
        let mut a = vec!["generate"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-p", "The capital of France is", "-n", "8", "--temp", "0"]);
        w.flint(&server, &a)
    };
    let spec = format!("{GOOD}:q4_1");
    let first = run(&["-hf", &spec]);
    assert!(first.status.success(), "{}", stderr(&first));
    let stored = w.store().join("hf").join(GOOD).join(Q4_1);
    assert_eq!(
        std::fs::read(&stored).unwrap(),
        std::fs::read(common::model_path()).unwrap()
    );
    assert_eq!(w.hub_files(), vec![format!("{GOOD}/{Q4_1}")]);
    let reqs = server.requests();
    assert!(
        reqs.iter()
            .any(|r| r.contains(&format!("/{GOOD}/resolve/main/{Q4_1}"))),
        "{reqs:?}"
    );

    server.stop();
    let second = run(&["-hf", &spec]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(stdout(&second), stdout(&first), "offline output differs");
    assert!(
        stderr(&second).contains("using the store's copy"),
        "{}",
        stderr(&second)
    );

    // The store's name for it, as `flint models` lists it.
    let models = w.flint(&server, &["models"]);
    let name = format!("{GOOD}/{Q4_1}");
    assert!(stdout(&models).contains(&name), "{}", stdout(&models));
    let by_name = run(&["-m", &name]);
    assert!(by_name.status.success(), "{}", stderr(&by_name));
    assert_eq!(stdout(&by_name), stdout(&first));

    let rm = w.flint(&server, &["rm", &name]);
    assert!(rm.status.success(), "{}", stderr(&rm));
    assert!(
        !w.hub_files()
            .iter()
            .any(|f| f.contains("x.Q4_1") || f.contains("CON")),
        "{:?}",
        w.hub_files()
    );
    let gone = w.flint(&server, &["rm", &name]);
    assert_eq!(gone.status.code(), Some(2), "{}", stderr(&gone));
}

#[test]
fn pull_picks_as_llama_cpp_and_refuses_bad_repositories() {
    let mut repos = HashMap::new();
    // Q8_0 and F16 stand-ins only: llama.cpp's default tries Q4_K_M, then Q8_0.
    repos.insert(
        "test-org/quants".to_string(),
        vec![
            lfs("m-F16.gguf", fake(4, 5_000)),
            lfs("m-Q8_0.gguf", fake(5, 6_000)),
            lfs("mmproj-m-Q8_0.gguf", fake(6, 1_000)),
        ],
    );
    let mut bad = lfs("m.Q4_1.gguf", fake(7, 50_000));
    bad.listed_sha = Some("ab".repeat(32));
    repos.insert("test-org/bad-sha".to_string(), vec![bad]);
    let cut = fake(8, 400_000);
    repos.insert(
        "test-org/cut".to_string(),
        vec![lfs("m.Q4_1.gguf", cut.clone())],
    );
    let server = Server::start(Hub {
        repos,
        ..Hub::default()
    });
    let w = World::new();

    let out = w.flint_env(
        &server,
        &[("HF_TOKEN", "hf_test_token")],
        &["pull", "test-org/quants"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("m-Q8_0.gguf: fetched, sha256 ok"),
        "{}",
        stdout(&out)
    );
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.ends_with("Authorization: Bearer hf_test_token")),
        "{:?}",
        server.requests()
    );
    let again = w.flint(&server, &["pull", "test-org/quants:Q8_0"]);
    assert!(
        stdout(&again).contains("present, sha256 ok"),
        "{}",
        stdout(&again)
    );

    // A missing quant lists the quants there (not the projector's).
    let out = w.flint(&server, &["pull", "test-org/quants:Q5_K_M"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("quant 'Q5_K_M' (quants there: F16, Q8_0)"),
        "{}",
        stderr(&out)
    );

    // A 404 repository is named.
    let out = w.flint(&server, &["pull", "test-org/nothing-here:Q4_1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("repository test-org/nothing-here not found"),
        "{}",
        stderr(&out)
    );

    // A wrong sha256: refused, nothing installed, no partial file kept.
    let out = w.flint(&server, &["pull", "test-org/bad-sha:Q4_1"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("sha256 mismatch"), "{}", stderr(&out));
    assert!(
        !w.hub_files().iter().any(|f| f.contains("bad-sha")),
        "{:?}",
        w.hub_files()
    );
    assert_eq!(
        std::fs::read_dir(w.store().join(".partial/hf"))
            .unwrap()
            .count(),
        0
    );

    // A truncated body: an error, never installed; the next run resumes where it stopped.
    server.hub.lock().unwrap().cut_next = Some(100_000);
    let out = w.flint(&server, &["pull", "test-org/cut"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        !w.hub_files().iter().any(|f| f.contains("cut")),
        "{:?}",
        w.hub_files()
    );
    let out = w.flint(&server, &["pull", "test-org/cut"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.contains("/test-org/cut/resolve/main/m.Q4_1.gguf Range: bytes=100000-")),
        "{:?}",
        server.requests()
    );
    assert_eq!(
        std::fs::read(w.store().join("hf/test-org/cut/m.Q4_1.gguf")).unwrap(),
        cut
    );
}

/// Downloads that cannot hang, overrun or escape: a body that stalls mid-way fails within
/// `FLINT_HTTP_TIMEOUT` (the fake Hub would send the rest a minute later, so a client without a
/// read timeout succeeds late instead) and the next run resumes with `Range`; a body longer than
/// the listed size is cut at that size (the file installs, hash-checked); listing paths that
/// leave the repository's folder or name a drive (`../x`, `C:x`, `/abs/x`, `CON`) are never
/// fetched; a `Link` to another origin is not followed (that host sees no request).
#[test]
fn downloads_cannot_hang_overrun_or_escape() {
    let mut repos = HashMap::new();
    let stall = fake(11, 300_000);
    repos.insert(
        "test-org/stall".to_string(),
        vec![lfs("m.Q4_1.gguf", stall.clone())],
    );
    let long = fake(12, 50_000);
    repos.insert(
        "test-org/long".to_string(),
        vec![lfs("m.Q4_1.gguf", long.clone())],
    );
    repos.insert(
        "test-org/escape".to_string(),
        vec![
            lfs("../x.Q4_1.gguf", fake(13, 1_000)),
            lfs("C:x.Q4_1.gguf", fake(14, 1_000)),
            lfs("/abs/x.Q4_1.gguf", fake(15, 1_000)),
            lfs("sub/CON.Q4_1.gguf", fake(16, 1_000)),
        ],
    );
    let server = Server::start(Hub {
        repos,
        ..Hub::default()
    });
    let w = World::new();
    let timeout = [("FLINT_HTTP_TIMEOUT", "2")];

    server.hub.lock().unwrap().stall_next = Some(120_000);
    let out = w.flint_env(&server, &timeout, &["pull", "test-org/stall"]);
    assert!(
        !out.status.success(),
        "a stalled body succeeded: {}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("run again to resume"),
        "{}",
        stderr(&out)
    );
    let out = w.flint_env(&server, &timeout, &["pull", "test-org/stall"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.contains("/test-org/stall/resolve/main/m.Q4_1.gguf Range: bytes=120000-")),
        "{:?}",
        server.requests()
    );
    assert_eq!(
        std::fs::read(w.store().join("hf/test-org/stall/m.Q4_1.gguf")).unwrap(),
        stall
    );

    server.hub.lock().unwrap().extra_next = Some(1 << 20);
    let out = w.flint_env(&server, &timeout, &["pull", "test-org/long"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(w.store().join("hf/test-org/long/m.Q4_1.gguf")).unwrap(),
        long
    );

    let out = w.flint_env(&server, &timeout, &["pull", "test-org/escape"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.contains("/test-org/escape/resolve")),
        "{:?}",
        server.requests()
    );
    assert!(
        !w.hub_files()
            .iter()
            .any(|f| f.contains("x.Q4_1") || f.contains("CON")),
        "{:?}",
        w.hub_files()
    );
    assert!(!w.store().join("hf/test-org/x.Q4_1.gguf").exists());

    let foreign = Server::start(Hub::default());
    server.hub.lock().unwrap().next_link = Some(format!(
        "{}/api/models/test-org/long/tree/main?recursive=true",
        foreign.endpoint()
    ));
    let out = w.flint_env(
        &server,
        &[("HF_TOKEN", "hf_secret")],
        &["pull", "test-org/long"],
    );
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(stderr(&out).contains("not followed"), "{}", stderr(&out));
    assert!(foreign.requests().is_empty(), "{:?}", foreign.requests());
}

/// gguf-py, pip-installed into target/tmp once.
fn gguf_py() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hub-py");
        if !dir.join("gguf").is_dir() {
            let st = Command::new("python3")
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .arg("--target")
                .arg(&dir)
                .arg("gguf==0.17.1")
                .status()
                .expect("python3 -m pip (python3 with pip is needed to install gguf-py)");
            assert!(st.success(), "pip could not install gguf==0.17.1 from PyPI");
        }
        dir
    })
}

/// The logits of the first 4 tokens' last row of `path` on the GPU.
fn logits(ctx: &flint::gpu::GpuContext, path: &Path) -> Vec<f32> {
    let file = flint::gguf::GgufFile::open(path).unwrap();
    let mut fwd = common::forward::gpu_forward(ctx, &file, &common::forward::params(64, 16));
    fwd.step(ctx, &[1, 504, 3575, 282], 1).unwrap();
    fwd.logits(ctx).unwrap()
}

#[test]
fn split_model_is_fetched_and_joined_by_the_loader() {
    let tmp = common::temp_dir("hub-split");
    let out = tmp.path().join("SmolLM2-135M-Instruct-Q4_1.gguf");
    let st = Command::new("python3")
        .env("PYTHONPATH", gguf_py())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/hub/split_gguf.py"
        ))
        .arg(common::model_path())
        .arg(&out)
        .arg("100")
        .status()
        .unwrap();
    assert!(st.success());
    let names: Vec<String> = (1..=3)
        .map(|i| format!("SmolLM2-135M-Instruct-Q4_1-{i:05}-of-00003.gguf"))
        .collect();
    let mut files: Vec<File> = names
        .iter()
        .map(|n| {
            lfs(
                n,
                std::fs::read(tmp.path().join(n)).expect("gguf-py wrote 3 shards"),
            )
        })
        .collect();
    files.push(lfs("SmolLM2-135M-Instruct-Q8_0.gguf", fake(9, 1_000)));
    let mut repos = HashMap::new();
    repos.insert("test-org/split".to_string(), files);
    let server = Server::start(Hub {
        repos,
        ..Hub::default()
    });
    let w = World::new();
    let pulled = w.flint(&server, &["pull", "test-org/split:Q4_1"]);
    assert!(pulled.status.success(), "{}", stderr(&pulled));
    let want: Vec<String> = names
        .iter()
        .map(|n| format!("test-org/split/{n}"))
        .collect();
    assert_eq!(w.hub_files(), want);
    let models = w.flint(&server, &["models"]);
    assert!(
        stdout(&models).contains("(3 shards)"),
        "{}",
        stdout(&models)
    );

    let ctx = common::gpu::ctx();
    let first = w.store().join("hf/test-org/split").join(&names[0]);
    let joined = logits(&ctx, &first);
    let whole = logits(&ctx, &common::model_path());
    assert_eq!(joined.len(), whole.len());
    for (i, (a, b)) in joined.iter().zip(&whole).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "logit {i}: joined {a} vs unsplit {b}"
        );
    }
    // A later shard alone names the first.
    let err = flint::gguf::GgufFile::open(&w.store().join("hf/test-org/split").join(&names[1]))
        .err()
        .unwrap();
    assert!(err.to_string().contains(&names[0]), "{err}");

    // A missing shard is named.
    let dir = w.store().join("hf/test-org/split");
    std::fs::rename(dir.join(&names[2]), tmp.path().join("away.gguf")).unwrap();
    let err = flint::gguf::GgufFile::open(&first).err().unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains(&names[2]) && msg.contains("is missing"),
        "{msg}"
    );
    std::fs::rename(tmp.path().join("away.gguf"), dir.join(&names[2])).unwrap();

    let rm = w.flint(&server, &["rm", "test-org/split:Q4_1"]);
    assert!(rm.status.success(), "{}", stderr(&rm));
    assert!(
        !w.hub_files()
            .iter()
            .any(|f| f.contains("x.Q4_1") || f.contains("CON")),
        "{:?}",
        w.hub_files()
    );
}
