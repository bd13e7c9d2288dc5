//! What a server without an API key accepts from browsers: a page the user opens may post to
//! `http://127.0.0.1:PORT` (a "simple" cross-site request needs no CORS preflight) or rebind its
//! own name to the loopback address and read the answers. Without a key, a request's `Host`
//! must be a loopback name (`localhost`, `*.localhost`, a loopback address), the bound address
//! (any address when bound to `0.0.0.0` / `::`: an address in `Host` cannot be rebound), or one
//! of `--allowed-hosts` (403 otherwise); and a POST body must be `application/json`, which a page
//! cannot send cross-site without a preflight (415 otherwise). With a key, or
//! `--allowed-hosts '*'`, neither check applies.

use std::net::IpAddr;

use axum::http::{header, HeaderMap, Method};

use super::error::ApiError;

/// The keyless server's checks; `open`: none.
#[derive(Debug, Clone)]
pub struct Access {
    open: bool,
    bound: IpAddr,
    /// Extra host names, lower case, without port.
    allowed: Vec<String>,
}

impl Access {
    /// `keyless`: the server has no API key; `bound`: the address it listens on.
    pub fn new(keyless: bool, bound: IpAddr, allowed_hosts: &[String]) -> Access {
        let allowed: Vec<String> = allowed_hosts
            .iter()
            .map(|h| host_name(h.trim()).to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        Access {
            open: !keyless || allowed.iter().any(|h| h == "*"),
            bound,
            allowed,
        }
    }

    /// `Err(403)` for a foreign `Host`, `Err(415)` for a POST whose body is not JSON.
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.open {
            return Ok(());
        }
        // No `Host` at all (HTTP/1.0): no browser sends such a request.
        if let Some(host) = headers.get(header::HOST) {
            let text = host.to_str().unwrap_or("");
            if !self.host_allowed(text) {
                return Err(ApiError::foreign_host(text));
            }
        }
        if method == Method::POST {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap_or("?"))
                .unwrap_or("");
            if !is_json(ct) {
                return Err(ApiError::not_json(ct));
            }
        }
        Ok(())
    }

    fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host).to_ascii_lowercase();
        let name = name.trim_end_matches('.');
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        if let Ok(ip) = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            return ip.is_loopback() || ip == self.bound || self.bound.is_unspecified();
        }
        self.allowed.iter().any(|a| a == name)
    }
}

/// `host` without its port (`[::1]:80` → `[::1]`, `a.b:80` → `a.b`).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    match host.rsplit_once(':') {
        // One colon: a port; more: a bare IPv6 address.
        Some((name, _)) if !name.contains(':') => name,
        _ => host,
    }
}

/// `application/json`, any parameters (`; charset=utf-8`), any case.
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}
