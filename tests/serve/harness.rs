//! Harness of the `flint serve` acceptance tests (tests/serve.rs): start a server on a free port
//! and wait until it has loaded, run the Python client scripts beside this file in their pinned
//! environment (venv.sh), and stop the server with a signal.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::http;

/// The line the server prints to stderr once its socket is bound.
const LISTENING: &str = "flint serve: listening on http://";

/// Seconds past which a wait counts as a hang. Times the tests measure are printed, never held
/// to a figure: only this bound, which a hang alone would pass, fails a test.
pub const LIVENESS: Duration = Duration::from_secs(60);

/// One test at a time: servers share two cores and one device, and the tests time things.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn model() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run `bash models/fetch.sh` first",
        p.display()
    );
    p
}

/// A fresh scratch folder under the target directory.
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("serve-{name}"));
    std::fs::remove_dir_all(&d).ok();
    std::fs::create_dir_all(&d).expect("create a scratch folder");
    d
}

/// Spawn `flint serve -m MODEL ARGS...` with stdout and stderr collected into one log; the
/// returned channel receives each stderr line as it comes.
pub fn spawn(args: &[&str]) -> (Child, Arc<Mutex<String>>, mpsc::Receiver<String>) {
    spawn_env(args, &[])
}

/// [`spawn`] with environment variables added (`RUST_LOG`).
pub fn spawn_env(
    args: &[&str],
    env: &[(&str, &str)],
) -> (Child, Arc<Mutex<String>>, mpsc::Receiver<String>) {
    spawn_model_env(&model(), args, env)
}

/// [`spawn_env`] serving the model file `model`.
pub fn spawn_model_env(
    model: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Child, Arc<Mutex<String>>, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flint"))
        .arg("serve")
        .arg("-m")
        .arg(model)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flint serve");
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().expect("stderr is piped");
    let out = child.stdout.take().expect("stdout is piped");
    let l = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            l.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_str(&format!("{line}\n"));
            tx.send(line).ok();
        }
    });
    let l = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            l.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_str(&format!("[stdout] {line}\n"));
        }
    });
    (child, log, rx)
}

/// Wait for the listening line; its `HOST:PORT`, or None when the process ends first.
pub fn listening(rx: &mpsc::Receiver<String>, within: Duration) -> Option<String> {
    let end = Instant::now() + within;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                let line = json_line(&line).unwrap_or(line);
                if let Some(rest) = line.split(LISTENING).nth(1) {
                    return Some(rest.trim().trim_end_matches('/').to_string());
                }
            }
            Err(_) => return None,
        }
    }
    None
}

/// A `--log-format json` line as its text form reads (`TARGET: MESSAGE`), if it is one.
fn json_line(line: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line).ok()?;
    Some(format!(
        "{}: {}",
        v["target"].as_str()?,
        v["message"].as_str()?
    ))
}

/// A running `flint serve`.
pub struct Server {
    child: Child,
    log: Arc<Mutex<String>>,
    pub addr: String,
    /// Status and body of the first `/health` answer (503 while loading, if it was seen).
    pub first_health: (u16, String),
    /// While `/health` said 503: (route, status, body) of other routes asked at once.
    pub loading_probe: Vec<(String, u16, String)>,
}

impl Server {
    /// Start on a free loopback port and wait until `/health` answers 200.
    pub fn start(args: &[&str]) -> Server {
        Server::start_env(args, &[])
    }

    /// [`Server::start`] with environment variables added.
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::start_model(&model(), args, env)
    }

    /// [`Server::start_env`] serving the model file `model`.
    pub fn start_model(model: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut all = vec!["--port", "0"];
        all.extend_from_slice(args);
        let (child, log, rx) = spawn_model_env(model, &all, env);
        let mut s = Server {
            child,
            log,
            addr: String::new(),
            first_health: (0, String::new()),
            loading_probe: Vec::new(),
        };
        match listening(&rx, LIVENESS) {
            Some(addr) => s.addr = addr,
            None => panic!("no listening line within {LIVENESS:?}: {}", s.log()),
        }
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = s.child.try_wait() {
                panic!("flint serve exited ({st}) while loading: {}", s.log());
            }
            if let Ok((code, body)) = s.get("/health", &[]) {
                if s.first_health.0 == 0 {
                    s.first_health = (code, body.clone());
                    if code == 503 {
                        s.loading_probe = s.probe();
                    }
                }
                if code == 200 {
                    break;
                }
                assert_eq!(code, 503, "/health while loading: {body}");
            }
            let waited = t0.elapsed();
            assert!(
                waited < Duration::from_secs(180),
                "not ready in 180 s (a hang): {}",
                s.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "server {} ready in {:.1} s",
            s.addr,
            t0.elapsed().as_secs_f64()
        );
        s
    }

    /// Ask every other route once (without a key).
    fn probe(&self) -> Vec<(String, u16, String)> {
        let chat = r#"{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1}"#;
        let routes = [
            ("GET", "/v1/models", None),
            ("GET", "/slots", None),
            ("GET", "/metrics", None),
            ("POST", "/v1/chat/completions", Some(chat)),
        ];
        let mut out = Vec::new();
        for (method, path, body) in routes {
            if let Ok((code, text)) = http(&self.addr, method, path, &[], body) {
                out.push((format!("{method} {path}"), code, text));
            }
        }
        out
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> std::io::Result<(u16, String)> {
        http(&self.addr, "GET", path, headers, None)
    }

    /// Send `sig` (TERM, INT); without Unix signals, kill.
    pub fn signal(&mut self, sig: &str) {
        #[cfg(unix)]
        {
            // The shell's own `kill`: a /bin/kill may be missing from small images.
            let st = Command::new("sh")
                .arg("-c")
                .arg(format!("kill -s {sig} {}", self.child.id()))
                .status()
                .expect("run sh -c kill");
            assert!(st.success(), "kill -s {sig} failed");
        }
        #[cfg(not(unix))]
        {
            let _ = sig;
            self.child.kill().ok();
        }
    }

    /// Wait for the process to end; panics (after killing it) past [`LIVENESS`], a hang.
    pub fn wait_exit(&mut self) -> ExitStatus {
        match wait_within(&mut self.child, LIVENESS) {
            Some(st) => st,
            None => panic!(
                "flint serve still running {LIVENESS:?} after the signal (a hang): {}",
                self.log()
            ),
        }
    }

    /// SIGTERM, then require a clean exit (status 0); the time it took is printed.
    pub fn stop(mut self) {
        let t0 = Instant::now();
        self.signal("TERM");
        let st = self.wait_exit();
        eprintln!(
            "server {} exited {:.2} s after SIGTERM",
            self.addr,
            t0.elapsed().as_secs_f64()
        );
        if cfg!(unix) {
            assert!(st.success(), "exit after SIGTERM: {st}: {}", self.log());
        }
    }
}

/// Wait for `child` to end; None (after killing it) when it still runs past `within`.
pub fn wait_within(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return Some(st);
        }
        if t0.elapsed() > within {
            child.kill().ok();
            child.wait().ok();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.child.kill().ok();
            self.child.wait().ok();
        }
    }
}

/// The launcher of the pinned Python environment (tests/serve/venv.sh), made once per run.
pub fn python() -> &'static Path {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-venv");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve/venv.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .output()
            .expect("run bash tests/serve/venv.sh (bash and python3 are required)");
        assert!(
            out.status.success(),
            "tests/serve/venv.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(
            stdout
                .lines()
                .last()
                .expect("venv.sh prints the launcher")
                .trim(),
        )
    })
}

/// Run `tests/serve/NAME ARGS...`, give it `limit`, require exit 0; its JSON result.
pub fn script(name: &str, args: &[&str], limit: Duration) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/serve")
        .join(name);
    let mut child = Command::new(python())
        .arg(&path)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the python launcher");
    let (mut out, mut err) = (
        child.stdout.take().expect("piped"),
        child.stderr.take().expect("piped"),
    );
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).ok();
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).ok();
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break Some(st);
        }
        if t0.elapsed() > limit {
            child.kill().ok();
            child.wait().ok();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (
        out_t.join().unwrap_or_default(),
        err_t.join().unwrap_or_default(),
    );
    eprintln!(
        "{name}: {:.1} s\n{stderr}{stdout}",
        t0.elapsed().as_secs_f64()
    );
    let status = status.unwrap_or_else(|| panic!("{name} ran past {limit:?}: {stderr}"));
    assert!(status.success(), "{name} failed ({status}):\n{stderr}");
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{name}: last line is not JSON ({e}): {stdout}"))
}

/// A random DSpark drafter of block 4 for `model` (`flint dspark init`), written to `out`.
pub fn dspark_init(model: &Path, out: &Path) {
    let run = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["dspark", "init", "--block", "4", "-m"])
        .arg(model)
        .arg("-o")
        .arg(out)
        .output()
        .expect("run flint dspark init");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
