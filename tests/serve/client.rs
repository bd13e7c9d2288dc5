//! A raw HTTP/1.1 client for the `flint serve` tests: one request per connection, chunked
//! bodies decoded piece by piece, and server-sent events read as they come.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Write one request (`Connection: close`) and return the stream, positioned after the
/// response head, with the status and whether the body is chunked.
pub fn send(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<(u16, bool, BufReader<TcpStream>)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str("Content-Type: application/json\r\n");
        req.push_str(&format!("Content-Length: {}\r\n\r\n{b}", b.len()));
    } else {
        req.push_str("\r\n");
    }
    s.write_all(req.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let code = line.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    let code = code.ok_or_else(|| std::io::Error::other(format!("status line {line:?}")))?;
    let mut chunked = false;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        let l = line.to_ascii_lowercase();
        chunked |= l.starts_with("transfer-encoding:") && l.contains("chunked");
    }
    Ok((code, chunked, r))
}

/// The next piece of a response body: a chunk when `chunked`, else what a read returns.
/// None at the end of the body.
pub fn body_piece(r: &mut BufReader<TcpStream>, chunked: bool) -> std::io::Result<Option<Vec<u8>>> {
    if !chunked {
        let mut buf = vec![0u8; 4096];
        let n = r.read(&mut buf)?;
        buf.truncate(n);
        return Ok((n > 0).then_some(buf));
    }
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let size = line.trim().split(';').next().unwrap_or("");
    let n = usize::from_str_radix(size, 16)
        .map_err(|_| std::io::Error::other(format!("chunk size line {line:?}")))?;
    if n == 0 {
        return Ok(None);
    }
    let mut buf = vec![0u8; n + 2];
    r.read_exact(&mut buf)?;
    buf.truncate(n);
    Ok(Some(buf))
}

/// One whole request: status and body text.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let (code, chunked, mut r) = send(addr, method, path, headers, body)?;
    let mut all = Vec::new();
    while let Some(p) = body_piece(&mut r, chunked)? {
        all.extend_from_slice(&p);
    }
    Ok((code, String::from_utf8_lossy(&all).into_owned()))
}

/// Read server-sent events until `want` accepts one or the body ends; every event's data.
pub fn read_events(
    r: &mut BufReader<TcpStream>,
    chunked: bool,
    buf: &mut String,
    mut want: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let mut events = Vec::new();
    loop {
        while let Some(i) = buf.find("\n\n") {
            let ev: String = buf.drain(..i + 2).collect();
            for line in ev.lines() {
                if let Some(d) = line.strip_prefix("data: ") {
                    events.push(d.to_string());
                    if want(d) {
                        return events;
                    }
                }
            }
        }
        match body_piece(r, chunked) {
            Ok(Some(p)) => buf.push_str(&String::from_utf8_lossy(&p)),
            Ok(None) => return events,
            Err(e) => panic!("reading the stream: {e} (events so far: {events:?})"),
        }
    }
}
