//! The file list of a Hugging Face repository: from the Hub's tree API (paths, sizes, the
//! sha256 of LFS files; every page of a `Link: <…>; rel="next"` header), or from the store's copy
//! of the repository when the Hub cannot be reached.

use std::fs;
use std::path::Path;

use super::download::http_err;
use super::hub::{valid_path, HfRef, DEFAULT_ENDPOINT, ENDPOINT_ENV};
use super::StoreError;

/// A file of the listing: path, size, and the sha256 of an LFS file.
#[derive(Debug, Clone)]
pub(super) struct HubFile {
    pub path: String,
    pub size: u64,
    pub sha256: Option<String>,
}

pub(super) fn endpoint() -> String {
    match std::env::var(ENDPOINT_ENV) {
        Ok(e) if !e.trim().is_empty() => e.trim().trim_end_matches('/').to_string(),
        _ => DEFAULT_ENDPOINT.to_string(),
    }
}

/// Percent-encode a repository path for a URL, `/` kept.
pub(super) fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `rel="next"` URL of a `Link` header.
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"")
            .then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
    })
}

/// `scheme://host[:port]` of `url`, lower case.
fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let host = rest.split(['/', '?', '#']).next()?;
    (!host.is_empty() && !host.contains('@'))
        .then(|| format!("{scheme}://{host}").to_ascii_lowercase())
}

/// The next page's URL when it is on the endpoint's origin (a `Link` to another host would get
/// the token): a path is taken relative to the endpoint.
fn same_origin(base: &str, page: &str, next: &str) -> Result<String, StoreError> {
    let Some(home) = origin(base) else {
        return Err(StoreError::Http {
            url: page.to_string(),
            reason: format!("the endpoint {base} has no origin"),
        });
    };
    if next.starts_with('/') && !next.starts_with("//") {
        return Ok(format!("{home}{next}"));
    }
    match origin(next) {
        Some(o) if o == home => Ok(next.to_string()),
        _ => Err(StoreError::ForeignLink {
            url: page.to_string(),
            next: next.to_string(),
            origin: home,
        }),
    }
}

/// The repository's files from the Hub, every page.
pub(super) fn list_remote(
    agent: &ureq::Agent,
    r: &HfRef,
    token: Option<&str>,
) -> Result<Vec<HubFile>, StoreError> {
    let base = endpoint();
    let mut url = format!("{base}/api/models/{}/tree/main?recursive=true", r.repo);
    let mut out = Vec::new();
    for _page in 0..1000 {
        let mut req = agent.get(&url).header("Accept", "application/json");
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut resp = req.call().map_err(http_err(&url))?;
        match resp.status().as_u16() {
            200 => {}
            // The Hub answers 401 for a repository it does not show an anonymous caller
            // (missing, private or gated), 404 for one it does not have.
            404 | 401 => {
                return Err(StoreError::NoRepo {
                    repo: r.repo.clone(),
                    endpoint: base,
                    status: resp.status().as_u16(),
                })
            }
            403 => {
                return Err(StoreError::HubAuth {
                    repo: r.repo.clone(),
                    status: 403,
                })
            }
            status => return Err(StoreError::Status { url, status }),
        }
        let next = resp
            .headers()
            .get("link")
            .and_then(|v| v.to_str().ok())
            .and_then(next_link);
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(http_err(&url))?;
        let items: Vec<serde_json::Value> =
            serde_json::from_str(&text).map_err(|e| StoreError::Http {
                url: url.clone(),
                reason: format!("not the Hub's tree listing (a JSON array): {e}"),
            })?;
        for it in &items {
            let Some(path) = it["path"].as_str().filter(|p| valid_path(p)) else {
                continue;
            };
            if it["type"].as_str() != Some("file") {
                continue;
            }
            let lfs = &it["lfs"];
            let sha256 = lfs["oid"]
                .as_str()
                .map(str::to_ascii_lowercase)
                .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()));
            let size = lfs["size"].as_u64().or(it["size"].as_u64()).unwrap_or(0);
            out.push(HubFile {
                path: path.to_string(),
                size,
                sha256,
            });
        }
        match next {
            Some(n) => url = same_origin(&base, &url, &n)?,
            None => return Ok(out),
        }
    }
    Ok(out)
}

/// The files of the store's copy of a repository (`dir`), as repository paths, sorted.
pub(super) fn list_local(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, d: &Path, out: &mut Vec<String>) {
        let Ok(rd) = fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if let Ok(rel) = p.strip_prefix(root) {
                let parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers_and_paths() {
        assert_eq!(
            next_link("<https://h/api/x?cursor=a>; rel=\"next\"").as_deref(),
            Some("https://h/api/x?cursor=a")
        );
        assert_eq!(next_link("<https://h/a>; rel=\"prev\""), None);
        assert_eq!(encode_path("a b/c+.gguf"), "a%20b/c%2B.gguf");
    }
}
