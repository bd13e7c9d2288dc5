//! SIGTERM ends `flint serve` with exit status 0 on Vulkan and on GL, 20 times each, whatever
//! the server is doing: loading the model and compiling its pipelines (where teardown races
//! live: threads inside the driver while the process ends), idle after "ready", or with a
//! request in flight that the shutdown grace does not wait for. The GL runs hide the Vulkan
//! driver (`VK_ICD_FILENAMES` / `VK_DRIVER_FILES` naming a file that does not exist), so they
//! also check the fallback: flint finds GL by itself and says it runs on it.
//!
//! Each backend's first run goes to "ready" and times the load; the others are signalled at
//! points spread over that load (after the first `/health` answer, which shows the signal
//! handler is installed) or after "ready". GL needs Mesa's GL/EGL (Debian/Ubuntu:
//! `apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri`): without it the GL test fails and
//! says so, it never skips. Unix only (signals).

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs per backend.
const RUNS: usize = 20;
/// Bounds that only a hang exceeds (the shutdown grace is 10 s).
const START_LIMIT: Duration = Duration::from_secs(120);
const EXIT_LIMIT: Duration = Duration::from_secs(40);
/// The stderr line of a server that has bound its socket, and the one of a loaded one.
const LISTENING: &str = "flint serve: listening on http://";
const READY: &str = "flint serve: ready:";
/// What flint prints when it runs on GL (`gpu::adapters::gl_note`).
const ON_GL: &str = "flint: running on OpenGL (GL)";
const INSTALL_GL: &str = "install Mesa's GL/EGL (Debian/Ubuntu: `apt-get install libegl1 \
                          libegl-mesa0 libgl1-mesa-dri`)";

/// One test at a time: each run shares two cores with nothing else.
static SERIAL: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy, Debug, PartialEq)]
enum Backend {
    Vulkan,
    Gl,
}

/// When a run is signalled.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// This long after the first `/health` answer (usually while loading).
    Loading(Duration),
    /// After "ready".
    Ready,
    /// After "ready", with a completion request in flight.
    Busy,
}

fn model() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run `bash models/fetch.sh`",
        p.display()
    );
    p
}

/// `flint ARGS` with the backend's environment.
fn flint(backend: Backend, xdg: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flint"));
    c.env("XDG_RUNTIME_DIR", xdg).env_remove("FLINT_BACKEND");
    match backend {
        Backend::Vulkan => {
            c.env("FLINT_BACKEND", "vulkan");
        }
        Backend::Gl => {
            // No Vulkan driver at all: flint falls back to GL by itself.
            let none = xdg.join("no-such-icd.json");
            c.env("VK_ICD_FILENAMES", &none)
                .env("VK_DRIVER_FILES", &none);
        }
    }
    c
}

/// A running server: its process and everything it printed so far.
struct Run {
    child: Child,
    log: Arc<Mutex<String>>,
    lines: mpsc::Receiver<String>,
}

impl Run {
    fn start(backend: Backend, xdg: &Path) -> Run {
        let mut child = flint(backend, xdg)
            .args(["serve", "--port", "0", "-c", "256", "-ub", "32", "-m"])
            .arg(model())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn flint serve");
        let err = child.stderr.take().expect("stderr is piped");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = mpsc::channel();
        let l = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut g = l.lock().unwrap_or_else(|e| e.into_inner());
                g.push_str(&line);
                g.push('\n');
                drop(g);
                tx.send(line).ok();
            }
        });
        Run { child, log, lines }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits for a stderr line containing `what`; the line.
    fn wait_line(&mut self, what: &str) -> String {
        let end = Instant::now() + START_LIMIT;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let st = self.child.try_wait().ok().flatten();
        panic!(
            "no {what:?} line within {START_LIMIT:?} (exit: {st:?}):\n{}",
            self.log()
        );
    }

    fn signal_term(&self) {
        let st = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -s TERM {}", self.child.id()))
            .status()
            .expect("run sh -c kill");
        assert!(st.success(), "kill -s TERM failed");
    }

    fn wait_exit(&mut self) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            if t0.elapsed() > EXIT_LIMIT {
                self.child.kill().ok();
                self.child.wait().ok();
                panic!(
                    "still running {EXIT_LIMIT:?} after SIGTERM (a hang):\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.child.kill().ok();
            self.child.wait().ok();
        }
    }
}

/// One request on a fresh connection; the status code.
fn get(addr: &str, path: &str) -> std::io::Result<u16> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)?;
    let text = String::from_utf8_lossy(&head);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("status line {text:?}")))
}

/// Sends a streamed completion request and leaves it open (the caller keeps the stream).
fn start_request(addr: &str) -> TcpStream {
    let body = r#"{"prompt":"Once upon a time","max_tokens":200,"stream":true}"#;
    let mut s = TcpStream::connect(addr).expect("connect for a completion");
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send a completion request");
    s
}

/// Starts a server, signals it at `phase`, requires exit status 0; the seconds from the first
/// `/health` answer to "ready" when the run got there before the signal.
fn run_once(backend: Backend, xdg: &Path, phase: Phase, i: usize) -> Option<f64> {
    let mut run = Run::start(backend, xdg);
    let line = run.wait_line(LISTENING);
    let addr = line
        .split(LISTENING)
        .nth(1)
        .map(|a| a.trim().trim_end_matches('/').to_string())
        .expect("an address after the listening line");
    // Any answer shows the server loop runs, and with it the signal handler.
    let t0 = Instant::now();
    while get(&addr, "/health").is_err() {
        assert!(
            t0.elapsed() < START_LIMIT,
            "no /health answer:\n{}",
            run.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let loaded = Instant::now();
    let mut ready = None;
    let _open = match phase {
        Phase::Loading(after) => {
            std::thread::sleep(after);
            None
        }
        Phase::Ready | Phase::Busy => {
            run.wait_line(READY);
            ready = Some(loaded.elapsed().as_secs_f64());
            (matches!(phase, Phase::Busy)).then(|| start_request(&addr))
        }
    };
    if matches!(phase, Phase::Busy) {
        // Let the request reach its slot's worker (on GL it then compiles for a while).
        std::thread::sleep(Duration::from_millis(300));
    }
    let t = Instant::now();
    run.signal_term();
    let st = run.wait_exit();
    let log = run.log();
    eprintln!(
        "{backend:?} run {i:2} ({phase:?}): {st} {:.2} s after SIGTERM{}",
        t.elapsed().as_secs_f64(),
        if log.contains(READY) {
            ", had been ready"
        } else {
            ""
        }
    );
    assert_eq!(
        st.code(),
        Some(0),
        "{backend:?} run {i} ({phase:?}): exit after SIGTERM: {st}:\n{log}"
    );
    // A thread that panics while the process ends is a crash at exit, whatever the status.
    assert!(
        !log.contains("panicked"),
        "{backend:?} run {i} ({phase:?}): a panic at exit:\n{log}"
    );
    match backend {
        Backend::Gl => assert!(log.contains(ON_GL), "not on GL ({INSTALL_GL}?):\n{log}"),
        Backend::Vulkan => assert!(log.contains(", vulkan, "), "not on Vulkan:\n{log}"),
    }
    ready
}

/// Whether `flint devices` finds an adapter of `backend` with that environment.
fn has_adapter(backend: Backend, xdg: &Path) -> (bool, String) {
    let out = flint(backend, xdg)
        .arg("devices")
        .output()
        .expect("run flint devices");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let name = match backend {
        Backend::Vulkan => "backend vulkan",
        Backend::Gl => "backend gl",
    };
    (out.status.success() && text.contains(name), text)
}

fn twenty_shutdowns(backend: Backend) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let xdg = tempfile::tempdir().expect("a runtime directory");
    let (found, devices) = has_adapter(backend, xdg.path());
    if backend == Backend::Gl {
        assert!(
            found,
            "no GL adapter with the Vulkan driver hidden: {INSTALL_GL}.\n{devices}"
        );
    } else {
        assert!(
            found,
            "no Vulkan adapter (install mesa-vulkan-drivers):\n{devices}"
        );
    }
    let t0 = Instant::now();
    // The first run times the load; the others are spread over it or come after "ready".
    let load = run_once(backend, xdg.path(), Phase::Ready, 0).unwrap_or(1.0);
    let mut ready_runs = 1;
    for i in 1..RUNS {
        let phase = match i % 4 {
            0 if i == 8 => Phase::Busy,
            0 => Phase::Ready,
            // Points over the measured load, from its start to just past its end.
            k => Phase::Loading(Duration::from_secs_f64(
                load * ((i / 4 * 3 + k) as f64) / 15.0 * 1.1,
            )),
        };
        if run_once(backend, xdg.path(), phase, i).is_some() {
            ready_runs += 1;
        }
    }
    eprintln!(
        "{backend:?}: {RUNS} SIGTERM shutdowns, exit 0 each ({ready_runs} signalled after \
         ready; load {load:.1} s), {:.0} s in all",
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn twenty_sigterm_shutdowns_on_vulkan_exit_0() {
    twenty_shutdowns(Backend::Vulkan);
}

#[test]
fn twenty_sigterm_shutdowns_on_gl_exit_0() {
    twenty_shutdowns(Backend::Gl);
}
