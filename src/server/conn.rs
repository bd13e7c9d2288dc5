//! Connections: the accept loop of `flint serve` (hyper's HTTP/1 on tokio, serving the axum
//! router) with the limits that keep one client from holding the server:
//!
//! - a request's head must arrive within the header timeout (hyper's timer; the wait for the
//!   next request on a kept-alive connection counts too), its body within the body timeout
//!   (the handlers' read, [`Limits::body`]);
//! - a connection with no request in flight that moves no byte for the idle timeout is closed,
//!   and so is one whose response has not been able to write a byte for that long (a client
//!   that stopped reading);
//! - at most `max` connections are open, at most `per_peer` from one peer address: a new one
//!   past a cap closes the connection idle the longest (of that peer, for its cap), else the one
//!   whose request body has moved no byte the longest (a client dribbling a body holds no
//!   place), and is answered 503 only when each such connection waits for its answer.
//!
//! Every connection has a watchdog task beside it that enforces the idle rules and the
//! eviction; the shutdown asks each connection to finish its requests and close.

use std::collections::HashMap;
use std::net::IpAddr;
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
    /// Open connections from one peer address at most.
    pub per_peer: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header: Duration::from_secs(30),
            body: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            max: 256,
            per_peer: 128,
        }
    }
}

/// What a connection's watchdog watches.
#[derive(Debug)]
pub struct Activity {
    born: Instant,
    peer: Option<IpAddr>,
    /// Milliseconds since `born` of the last byte read or written.
    last_io: AtomicU64,
    /// Milliseconds since `born` (plus one) when a write began to wait; 0 when none waits.
    write_stalled: AtomicU64,
    /// Requests whose response has not ended.
    pub in_flight: AtomicUsize,
    /// Requests whose body is still being received.
    pub receiving: AtomicUsize,
    /// Set to close the connection (the cap, shutdown).
    close: AtomicBool,
    /// Set with `close` to close it at once, its request unanswered (a body still coming).
    cut: AtomicBool,
    wake: Notify,
}

impl Activity {
    fn new(peer: Option<IpAddr>) -> Activity {
        Activity {
            born: Instant::now(),
            peer,
            last_io: AtomicU64::new(0),
            write_stalled: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            receiving: AtomicUsize::new(0),
            close: AtomicBool::new(false),
            cut: AtomicBool::new(false),
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

    /// Whether each request in flight is still receiving its body (none waits for its answer).
    fn receiving_only(&self) -> bool {
        let n = self.in_flight.load(Ordering::Relaxed);
        n > 0 && self.receiving.load(Ordering::Relaxed) >= n
    }

    fn ask_close(&self) {
        self.close.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    fn ask_cut(&self) {
        self.cut.store(true, Ordering::Relaxed);
        self.ask_close();
    }

    fn closing(&self) -> bool {
        self.close.load(Ordering::Relaxed)
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

    /// Room for one more connection from `peer` under `max` and `per_peer`: `false` when no
    /// connection under a full cap can give way; otherwise the connections giving way are asked
    /// to close (idle ones gracefully, the idlest first; then ones still receiving a body, cut).
    fn make_room(&self, max: usize, per_peer: usize, peer: Option<IpAddr>) -> bool {
        let conns = self.lock();
        let open: Vec<&Arc<Activity>> = conns.values().filter(|a| !a.closing()).collect();
        let mine: Vec<&Arc<Activity>> = open
            .iter()
            .copied()
            .filter(|a| peer.is_some() && a.peer == peer)
            .collect();
        let peer_over = (mine.len() + 1).saturating_sub(per_peer.max(1));
        let Some(freed) = give_way(&mine, peer_over) else {
            return false;
        };
        let over = (open.len() + 1).saturating_sub(max.max(1) + freed.len());
        let rest: Vec<&Arc<Activity>> = open
            .iter()
            .copied()
            .filter(|a| !freed.iter().any(|f| Arc::ptr_eq(f, a)))
            .collect();
        let Some(more) = give_way(&rest, over) else {
            return false;
        };
        for a in freed.into_iter().chain(more) {
            if a.is_idle() {
                a.ask_close();
            } else {
                a.ask_cut();
            }
        }
        true
    }

    fn add(&self, peer: Option<IpAddr>) -> (u64, Arc<Activity>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let act = Arc::new(Activity::new(peer));
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

/// `n` of `conns` that may give way, best first (idle ones, the idlest first; then ones still
/// receiving a body, the longest without a byte first); `None` when fewer than `n` may.
fn give_way<'a>(conns: &[&'a Arc<Activity>], n: usize) -> Option<Vec<&'a Arc<Activity>>> {
    if n == 0 {
        return Some(Vec::new());
    }
    // Each idle time read once: the clock moves while this sorts.
    let mut can: Vec<(bool, Duration, &'a Arc<Activity>)> = conns
        .iter()
        .filter(|a| a.is_idle() || a.receiving_only())
        .map(|a| (!a.is_idle(), a.idle_for(), *a))
        .collect();
    if can.len() < n {
        return None;
    }
    can.sort_by_key(|(busy, t, _)| (*busy, std::cmp::Reverse(*t)));
    Some(can.into_iter().take(n).map(|(_, _, a)| a).collect())
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
        let (stream, peer) = tokio::select! {
            _ = stop.notified() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => (stream, peer.ip()),
                // Out of descriptors and the like: wait a little rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if !table.make_room(limits.max, limits.per_peer, Some(peer)) {
            tokio::spawn(refuse(stream));
            continue;
        }
        let _ = stream.set_nodelay(true);
        let (id, act) = table.add(Some(peer));
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
        if act.cut.load(Ordering::Relaxed) {
            return Watch::Cut;
        }
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
        let (_, a) = t.add(None);
        let (_, b) = t.add(None);
        std::thread::sleep(Duration::from_millis(30));
        a.touch();
        // Both idle: room is made by closing the idlest (b: a just moved a byte).
        assert!(t.make_room(2, 8, None));
        assert!(b.close.load(Ordering::Relaxed));
        assert!(!a.close.load(Ordering::Relaxed));
        // Under the cap once b is on its way out.
        assert!(t.make_room(2, 8, None));
        assert!(!a.close.load(Ordering::Relaxed));
        // Every open connection busy: no room.
        let (_, c) = t.add(None);
        a.in_flight.fetch_add(1, Ordering::Relaxed);
        c.in_flight.fetch_add(1, Ordering::Relaxed);
        assert!(!t.make_room(2, 8, None));
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
