//! Connections: the accept loop of `flint serve` (hyper's HTTP/1 on tokio, serving the axum
//! router) with the limits that keep one client from holding the server:
//!
//! - a request's head must arrive within the header timeout (hyper's timer; the wait for the
//!   next request on a kept-alive connection counts too), its body within the body timeout
//!   (the handlers' read, [`Limits::body`]);
//! - a connection with no request in flight that moves no byte for the idle timeout is closed,
//!   and so is one whose response has not been able to write a byte for that long (a client
//!   that stopped reading);
//! - at most `max` connections are open: a new one past the cap closes the connection idle the
//!   longest, and is answered 503 only when every open connection has a request in flight.
//!
//! Every connection has a watchdog task beside it that enforces the idle rules and the
//! eviction; the shutdown asks each connection to finish its requests and close.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use super::inflight::InFlight;

/// The connection limits (`flint serve --timeout-header … --max-connections`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header: Duration,
    pub body: Duration,
    pub idle: Duration,
    pub max: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header: Duration::from_secs(30),
            body: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            max: 256,
        }
    }
}

/// What a connection's watchdog watches.
#[derive(Debug)]
pub struct Activity {
    born: Instant,
    /// Milliseconds since `born` of the last byte read or written.
    last_io: AtomicU64,
    /// Milliseconds since `born` (plus one) when a write began to wait; 0 when none waits.
    write_stalled: AtomicU64,
    /// Requests whose response has not ended.
    pub in_flight: AtomicUsize,
    /// Set to close the connection (the cap, shutdown).
    close: AtomicBool,
    wake: Notify,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            born: Instant::now(),
            last_io: AtomicU64::new(0),
            write_stalled: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            close: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    fn touch(&self) {
        self.last_io.store(self.now_ms(), Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = self.last_io.load(Ordering::Relaxed);
        Duration::from_millis(self.now_ms().saturating_sub(last))
    }

    /// How long a write has waited for the client to read (zero when none waits).
    fn stalled_for(&self) -> Duration {
        match self.write_stalled.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            since => Duration::from_millis(self.now_ms().saturating_sub(since - 1)),
        }
    }

    fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0
    }

    fn ask_close(&self) {
        self.close.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }
}

/// A socket that reports its reads and writes to its [`Activity`].
struct Watched {
    inner: TcpStream,
    act: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.act.touch();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        match &r {
            Poll::Pending => {
                let now = self.act.now_ms() + 1;
                let _ = self.act.write_stalled.compare_exchange(
                    0,
                    now,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            Poll::Ready(_) => {
                self.act.write_stalled.store(0, Ordering::Relaxed);
                self.act.touch();
            }
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The open connections.
#[derive(Debug, Default)]
pub struct Table {
    conns: Mutex<HashMap<u64, Arc<Activity>>>,
    next: AtomicU64,
    /// Wakes the shutdown's wait when a connection closes.
    closed: Notify,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Room for one more connection under `max`: `false` when every open connection has a
    /// request in flight; otherwise the idlest idle ones are asked to close.
    fn make_room(&self, max: usize) -> bool {
        let conns = self.lock();
        let open = conns
            .values()
            .filter(|a| !a.close.load(Ordering::Relaxed))
            .count();
        if open < max {
            return true;
        }
        // Each idle time read once: the clock moves while this sorts.
        let mut idle: Vec<(Duration, &Arc<Activity>)> = conns
            .values()
            .filter(|a| a.is_idle() && !a.close.load(Ordering::Relaxed))
            .map(|a| (a.idle_for(), a))
            .collect();
        if idle.is_empty() {
            return false;
        }
        idle.sort_by_key(|(t, _)| std::cmp::Reverse(*t));
        for (_, a) in idle.into_iter().take(open + 1 - max) {
            a.ask_close();
        }
        true
    }

    fn add(&self) -> (u64, Arc<Activity>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let act = Arc::new(Activity::new());
        self.lock().insert(id, Arc::clone(&act));
        (id, act)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
        self.closed.notify_waiters();
    }

    /// Asks every connection to finish its requests and close.
    fn close_all(&self) {
        for a in self.lock().values() {
            a.ask_close();
        }
    }
}

/// What a connection refused at the cap is sent before it is closed.
fn full_response() -> String {
    let body = serde_json::json!({"error": {
        "message": "too many open connections, each with a request in flight: retry later",
        "type": "unavailable_error",
        "param": null,
        "code": "too_many_connections",
    }})
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         connection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Serves `router` on `listener` until `stop` is notified, then lets the open connections end
/// their requests for up to `grace`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    table: Arc<Table>,
    stop: Arc<Notify>,
    grace: Duration,
) {
    loop {
        let stream = tokio::select! {
            _ = stop.notified() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors and the like: wait a little rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if !table.make_room(limits.max) {
            tokio::spawn(refuse(stream));
            continue;
        }
        let _ = stream.set_nodelay(true);
        let (id, act) = table.add();
        let (router, table) = (router.clone(), Arc::clone(&table));
        tokio::spawn(async move {
            connection(stream, router, limits, Arc::clone(&act)).await;
            table.remove(id);
        });
    }
    drop(listener);
    table.close_all();
    let end = tokio::time::Instant::now() + grace;
    while !table.is_empty() {
        let closed = table.closed.notified();
        if table.is_empty() {
            break;
        }
        if tokio::time::timeout_at(end, closed).await.is_err() {
            tracing::warn!(
                target: super::reqlog::TARGET,
                "{} connection(s) still open after {grace:?}: exiting",
                table.len()
            );
            break;
        }
    }
}

async fn refuse(mut stream: TcpStream) {
    let answer = full_response();
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(answer.as_bytes())).await;
}

/// One connection and its watchdog.
async fn connection(stream: TcpStream, router: Router, limits: Limits, act: Arc<Activity>) {
    let io = TokioIo::new(Watched {
        inner: stream,
        act: Arc::clone(&act),
    });
    let svc = TowerToHyperService::new(InFlight::new(router, Arc::clone(&act)));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header)
        .keep_alive(true);
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    let mut graceful = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            cut = watch(&act, limits, graceful) => match cut {
                Watch::Graceful => {
                    graceful = true;
                    conn.as_mut().graceful_shutdown();
                }
                Watch::Cut => return,
            },
        }
    }
}

/// What the watchdog decided.
enum Watch {
    /// Finish the requests in flight, then close.
    Graceful,
    /// Close now.
    Cut,
}

/// Returns when the connection must close: asked to (gracefully, once), idle or stalled past the
/// idle timeout (at once).
async fn watch(act: &Activity, limits: Limits, graceful: bool) -> Watch {
    let tick = (limits.idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
    loop {
        if act.close.load(Ordering::Relaxed) && !graceful {
            return Watch::Graceful;
        }
        if act.stalled_for() >= limits.idle {
            return Watch::Cut;
        }
        if act.is_idle() && act.idle_for() >= limits.idle {
            return Watch::Cut;
        }
        if graceful && act.is_idle() {
            return Watch::Cut;
        }
        let _ = tokio::time::timeout(tick, act.wake.notified()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_closes_the_idlest_idle_connection_and_refuses_only_when_all_are_busy() {
        let t = Table::default();
        let (_, a) = t.add();
        let (_, b) = t.add();
        std::thread::sleep(Duration::from_millis(30));
        a.touch();
        // Both idle: room is made by closing the idlest (b: a just moved a byte).
        assert!(t.make_room(2));
        assert!(b.close.load(Ordering::Relaxed));
        assert!(!a.close.load(Ordering::Relaxed));
        // Under the cap once b is on its way out.
        assert!(t.make_room(2));
        assert!(!a.close.load(Ordering::Relaxed));
        // Every open connection busy: no room.
        let (_, c) = t.add();
        a.in_flight.fetch_add(1, Ordering::Relaxed);
        c.in_flight.fetch_add(1, Ordering::Relaxed);
        assert!(!t.make_room(2));
        assert!(!a.close.load(Ordering::Relaxed) && !c.close.load(Ordering::Relaxed));
    }

    #[test]
    fn the_refusal_at_the_cap_is_a_whole_http_response() {
        let r = full_response();
        let (head, body) = r.split_once("\r\n\r\n").expect("a head and a body");
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.parse().ok())
            .expect("a content-length");
        assert_eq!(len, body.len());
        let v: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert_eq!(v["error"]["code"], "too_many_connections");
    }
}
