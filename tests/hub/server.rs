//! The loopback Hugging Face Hub of tests/store_hub.rs: the tree listing
//! (`GET /api/models/{repo}/tree/main?recursive=true`, JSON as the Hub documents it) and the
//! bytes (`GET /{repo}/resolve/main/{file}`, `Range` honoured), with a wrong sha256 or a cut
//! body on demand; every request logged; stoppable, so a later run finds it unreachable.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

pub fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One file of a served repository.
#[derive(Clone)]
pub struct File {
    pub path: String,
    pub bytes: Arc<Vec<u8>>,
    /// Listed as an LFS file (with its sha256), as the Hub lists GGUF files.
    pub lfs: bool,
    /// The sha256 the listing gives (default: the real one).
    pub listed_sha: Option<String>,
}

pub fn lfs(path: &str, bytes: Vec<u8>) -> File {
    File {
        path: path.to_string(),
        bytes: Arc::new(bytes),
        lfs: true,
        listed_sha: None,
    }
}

#[derive(Default)]
pub struct Hub {
    pub repos: HashMap<String, Vec<File>>,
    /// Send only this many bytes of the next file body (Content-Length says all), then close.
    pub cut_next: Option<usize>,
    /// Send only this many bytes of the next file body, then nothing for a minute, then the rest.
    pub stall_next: Option<usize>,
    /// Send this many bytes past the next file body (Content-Length counts them).
    pub extra_next: Option<usize>,
    /// A `Link: <URL>; rel="next"` on every listing.
    pub next_link: Option<String>,
}

/// The Hub on loopback; records `METHOD PATH [Range] [Authorization]` of each request.
pub struct Server {
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
    pub hub: Arc<Mutex<Hub>>,
    stop: Arc<AtomicBool>,
}

impl Server {
    pub fn start(hub: Hub) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let hub = Arc::new(Mutex::new(hub));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, h, s) = (Arc::clone(&log), Arc::clone(&hub), Arc::clone(&stop));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break; // the listener drops: connections are refused from now on
                }
                let Ok(conn) = conn else { continue };
                let (l, h) = (Arc::clone(&l), Arc::clone(&h));
                std::thread::spawn(move || serve(conn, &l, &h));
            }
        });
        Server {
            port,
            log,
            hub,
            stop,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Close the listening socket.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for _ in 0..100 {
            if TcpStream::connect(("127.0.0.1", self.port)).is_err() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("the loopback Hub did not stop");
    }
}

fn serve(mut conn: TcpStream, log: &Mutex<Vec<String>>, hub: &Mutex<Hub>) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let (mut range, mut auth) = (None, None);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("range") {
                range = Some(v.trim().to_string());
            }
            if k.eq_ignore_ascii_case("authorization") {
                auth = Some(v.trim().to_string());
            }
        }
    }
    let mut entry = format!("GET {target}");
    if let Some(r) = &range {
        entry += &format!(" Range: {r}");
    }
    if let Some(a) = &auth {
        entry += &format!(" Authorization: {a}");
    }
    log.lock().unwrap().push(entry);
    let head = |status: &str, len: usize, extra: &str| {
        format!("HTTP/1.1 {status}\r\nContent-Length: {len}\r\nConnection: close\r\n{extra}\r\n")
    };
    let mut hub = hub.lock().unwrap();
    let not_found = |conn: &mut TcpStream| {
        let body = br#"{"error":"Repository not found"}"#;
        conn.write_all(head("404 Not Found", body.len(), "").as_bytes())?;
        conn.write_all(body)
    };
    // GET /api/models/{user}/{repo}/tree/main?recursive=true
    if let Some(rest) = target.strip_prefix("/api/models/") {
        let Some(repo) = rest.strip_suffix("/tree/main?recursive=true") else {
            return not_found(&mut conn);
        };
        let Some(files) = hub.repos.get(repo) else {
            return not_found(&mut conn);
        };
        let items: Vec<serde_json::Value> = files
            .iter()
            .map(|f| {
                let git_oid = &sha(f.path.as_bytes())[..40];
                let mut v = serde_json::json!({
                    "type": "file", "oid": git_oid, "size": f.bytes.len(), "path": f.path,
                });
                if f.lfs {
                    let oid = f.listed_sha.clone().unwrap_or_else(|| sha(&f.bytes));
                    v["size"] = serde_json::json!(f.bytes.len());
                    v["lfs"] = serde_json::json!({
                        "oid": oid, "size": f.bytes.len(), "pointerSize": 134,
                    });
                }
                v
            })
            .collect();
        let body = serde_json::Value::Array(items).to_string();
        let mut extra = "Content-Type: application/json\r\n".to_string();
        if let Some(l) = &hub.next_link {
            extra += &format!("Link: <{l}>; rel=\"next\"\r\n");
        }
        conn.write_all(head("200 OK", body.len(), &extra).as_bytes())?;
        return conn.write_all(body.as_bytes());
    }
    // GET /{user}/{repo}/resolve/main/{file}
    let found = target.strip_prefix('/').and_then(|t| {
        let (repo_and_file, _) = t.split_once("/resolve/main/").map(|(r, f)| ((r, f), ()))?;
        let (repo, file) = repo_and_file;
        let f = hub.repos.get(repo)?.iter().find(|x| x.path == file)?;
        Some(f.clone())
    });
    let Some(f) = found else {
        return not_found(&mut conn);
    };
    let total = f.bytes.len();
    let start = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok())
        .filter(|&s| s < total);
    let (status, from, extra) = match start {
        Some(s) => (
            "206 Partial Content",
            s,
            format!("Content-Range: bytes {s}-{}/{total}\r\n", total - 1),
        ),
        None => ("200 OK", 0, String::new()),
    };
    let mut body = f.bytes[from..].to_vec();
    body.extend(std::iter::repeat_n(
        0x5a,
        hub.extra_next.take().unwrap_or(0),
    ));
    let send = hub.cut_next.take().unwrap_or(body.len()).min(body.len());
    let stall = hub.stall_next.take();
    drop(hub);
    conn.write_all(head(status, body.len(), &extra).as_bytes())?;
    if let Some(n) = stall {
        let n = n.min(body.len());
        conn.write_all(&body[..n])?;
        conn.flush()?;
        std::thread::sleep(std::time::Duration::from_secs(60));
        conn.write_all(&body[n..])?;
    } else {
        conn.write_all(&body[..send])?;
    }
    conn.flush()?;
    conn.shutdown(std::net::Shutdown::Both)
}
