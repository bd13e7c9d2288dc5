//! Models from the Hugging Face Hub by name: `USER/REPO[:QUANT]` (llama.cpp's `-hf`) and
//! `hf://USER/REPO/FILE`, through the Hub's public HTTP endpoints (docs/MODELS.md):
//!
//! - the file list: `GET {endpoint}/api/models/{repo}/tree/main?recursive=true`, a JSON array of
//!   `{type, oid, size, path, lfs: {oid, size, pointerSize}}` where `lfs.oid` is the file's
//!   sha256 (<https://huggingface.co/docs/huggingface.js/hub/interfaces/ListFileEntry>), paged
//!   by a `Link: <…>; rel="next"` header;
//! - the bytes: `GET {endpoint}/{repo}/resolve/main/{file}`
//!   (<https://huggingface.co/docs/hub/api>), `Range` honoured.
//!
//! `HF_ENDPOINT` replaces `https://huggingface.co`; `HF_TOKEN` (or `--hf-token`) is sent as
//! `Authorization: Bearer`. Which files a name picks is [`super::hub_select`] (llama.cpp's
//! rule). Each file is downloaded by [`super::download`] to `.partial/` in the store (resumed with
//! `Range`), held to the listing's size and sha256, and renamed into
//! `{store}/hf/USER/REPO/FILE`; a file already there is used without a request to download it.
//! When the Hub cannot be reached at all, the store's copy of the repository is listed instead
//! (as llama.cpp falls back to its cache), so a model pulled once runs offline.

use std::fs;
use std::path::{Path, PathBuf};

use super::download::{agent, download, Remote};
pub(super) use super::hub_list::list_local;
use super::hub_list::{encode_path, endpoint, list_remote, HubFile};
use super::hub_select::{pick, quants, shards_of};
use super::{io, models_dir, sha256_file, Pulled, StoreError};

/// Environment variable: the Hub's base URL.
pub const ENDPOINT_ENV: &str = "HF_ENDPOINT";
/// Environment variable: the access token for gated and private repositories.
pub const TOKEN_ENV: &str = "HF_TOKEN";
/// The public Hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// The store's folder of Hub downloads: `{store}/hf/USER/REPO/FILE`.
pub const HUB_DIR: &str = "hf";

/// A model on the Hub by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfRef {
    /// `USER/REPO`.
    pub repo: String,
    /// The quant tag of `USER/REPO:QUANT`.
    pub tag: Option<String>,
    /// A file path in the repository (`hf://USER/REPO/FILE`, `--hf-file`).
    pub file: Option<String>,
}

fn bad_name(name: &str, reason: &str) -> StoreError {
    StoreError::BadHfName {
        name: name.to_string(),
        reason: reason.to_string(),
    }
}

/// Whether `s` is a repository id: `USER/REPO` of `[A-Za-z0-9_.-]`, no empty part, no part
/// starting or ending with `.` or `-`.
fn valid_repo(s: &str) -> bool {
    let parts: Vec<&str> = s.split('/').collect();
    parts.len() == 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.len() <= 96
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
                && !p.starts_with(['.', '-'])
                && !p.ends_with(['.', '-'])
        })
}

/// Whether `path` is a safe relative file path inside a repository: `/`-separated parts, each
/// a normal name on every platform (no `..`, `.`, empty, hidden, root or drive part; no `:`,
/// backslash or control character; not a reserved Windows name such as `CON` or `lpt1.txt`; no
/// trailing dot or space).
pub(super) fn valid_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 1024
        && path.split('/').all(valid_component)
        && std::path::Path::new(path)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

fn valid_component(c: &str) -> bool {
    const RESERVED: &[&str] = &["con", "prn", "aux", "nul", "conin$", "conout$"];
    let stem = c
        .split('.')
        .next()
        .unwrap_or(c)
        .trim_end()
        .to_ascii_lowercase();
    let numbered = (stem.starts_with("com") || stem.starts_with("lpt"))
        && stem.len() == 4
        && stem.as_bytes()[3].is_ascii_digit();
    !c.is_empty()
        && !c.starts_with('.')
        && !c.ends_with(['.', ' '])
        && !c.chars().any(|ch| {
            ch.is_control() || matches!(ch, ':' | '\\' | '<' | '>' | '"' | '|' | '?' | '*')
        })
        && !RESERVED.contains(&stem.as_str())
        && !numbered
}

impl HfRef {
    /// Parse `USER/REPO[:QUANT]` or `hf://USER/REPO/FILE`; `file` (`--hf-file`) names the file
    /// in the repository instead of a quant.
    pub fn parse(spec: &str, file: Option<&str>) -> Result<HfRef, StoreError> {
        let (repo, tag, path) = if let Some(rest) = spec.strip_prefix("hf://") {
            let mut it = rest.splitn(3, '/');
            let (u, r, f) = (it.next(), it.next(), it.next());
            match (u, r, f) {
                (Some(u), Some(r), Some(f)) => (format!("{u}/{r}"), None, Some(f.to_string())),
                _ => return Err(bad_name(spec, "want hf://USER/REPO/FILE")),
            }
        } else {
            match spec.split_once(':') {
                Some((r, t)) if !t.is_empty() => (r.to_string(), Some(t.to_string()), None),
                Some(_) => return Err(bad_name(spec, "the quant after ':' is empty")),
                None => (spec.to_string(), None, None),
            }
        };
        if !valid_repo(&repo) {
            return Err(bad_name(
                spec,
                "want USER/REPO[:QUANT] or hf://USER/REPO/FILE",
            ));
        }
        if tag
            .as_deref()
            .is_some_and(|t| !t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        {
            return Err(bad_name(
                spec,
                "a quant tag is letters, digits and '_' (Q4_K_M)",
            ));
        }
        let file = file.map(str::to_string).or(path);
        if file.as_deref().is_some_and(|f| !valid_path(f)) {
            return Err(bad_name(
                spec,
                "the file is not a plain path in the repository",
            ));
        }
        Ok(HfRef { repo, tag, file })
    }

    /// The store folder of this repository.
    pub fn dir(&self) -> Result<PathBuf, StoreError> {
        let mut d = models_dir()?.join(HUB_DIR);
        for part in self.repo.split('/') {
            d.push(part);
        }
        Ok(d)
    }
}

/// How to fetch.
#[derive(Debug, Clone, Default)]
pub struct HubOptions {
    /// `--hf-token`; else `HF_TOKEN`.
    pub token: Option<String>,
    /// A progress bar on stderr.
    pub progress: bool,
    /// Hash files already in the store and fetch again those that differ (`flint pull`).
    pub recheck: bool,
}

/// The files `r` names among `paths` (the first is the model to open).
pub(super) fn select(r: &HfRef, paths: &[String]) -> Result<Vec<String>, StoreError> {
    let ggufs = || {
        paths
            .iter()
            .filter(|p| p.ends_with(".gguf"))
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    };
    let first = if let Some(f) = &r.file {
        paths
            .iter()
            .find(|p| p.eq_ignore_ascii_case(f))
            .ok_or_else(|| StoreError::NoHubFile {
                repo: r.repo.clone(),
                file: f.clone(),
                files: ggufs(),
            })?
    } else {
        match pick(paths, r.tag.as_deref()) {
            Some(p) => p,
            None => {
                let q = quants(paths);
                return Err(match &r.tag {
                    Some(tag) if !q.is_empty() => StoreError::NoQuant {
                        repo: r.repo.clone(),
                        quant: tag.clone(),
                        quants: q.join(", "),
                    },
                    _ => StoreError::NoModelFiles {
                        repo: r.repo.clone(),
                        files: ggufs(),
                    },
                });
            }
        }
    };
    Ok(shards_of(paths, first))
}

/// The model `r` names, in the store: fetched and verified when missing (or, with
/// `opts.recheck`, when its hash differs). Returns the path to open (the first shard of a split
/// model) and whether anything was downloaded.
pub fn fetch(r: &HfRef, opts: &HubOptions) -> Result<(PathBuf, Pulled), StoreError> {
    let dir = r.dir()?;
    let token = opts
        .token
        .clone()
        .or_else(|| std::env::var(TOKEN_ENV).ok())
        .filter(|t| !t.is_empty());
    let agent = agent();
    let listing = match list_remote(&agent, r, token.as_deref()) {
        Ok(l) => l,
        Err(StoreError::Http { url, reason }) => {
            // The Hub is unreachable: the store's copy, as llama.cpp's cache.
            let local = list_local(&dir);
            let files = select(r, &local).map_err(|e| match local.is_empty() {
                true => StoreError::Http {
                    url: url.clone(),
                    reason: format!("{reason} (and the store has no copy of {})", r.repo),
                },
                false => e,
            })?;
            eprintln!(
                "note: {url} unreachable; using the store's copy of {}",
                r.repo
            );
            return Ok((dir.join(&files[0]), Pulled::Present));
        }
        Err(e) => return Err(e),
    };
    let paths: Vec<String> = listing.iter().map(|f| f.path.clone()).collect();
    let files = select(r, &paths)?;
    let mut how = Pulled::Present;
    for path in &files {
        let Some(f) = listing.iter().find(|f| &f.path == path) else {
            continue;
        };
        if install_one(&agent, r, f, &dir, token.as_deref(), opts)? {
            how = Pulled::Fetched;
        }
    }
    Ok((dir.join(&files[0]), how))
}

/// Put `f` into `dir` unless it is there; whether it was downloaded.
fn install_one(
    agent: &ureq::Agent,
    r: &HfRef,
    f: &HubFile,
    dir: &Path,
    token: Option<&str>,
    opts: &HubOptions,
) -> Result<bool, StoreError> {
    let sha = f.sha256.clone().ok_or_else(|| StoreError::NoSha {
        repo: r.repo.clone(),
        file: f.path.clone(),
    })?;
    let dest = dir.join(&f.path);
    if let Ok(m) = fs::metadata(&dest) {
        let same = m.len() == f.size && (!opts.recheck || sha256_file(&dest)? == sha);
        if same {
            return Ok(false);
        }
    }
    let store = models_dir()?;
    let part = store.join(".partial").join(HUB_DIR).join(format!(
        "{}--{}.part",
        r.repo.replace('/', "--"),
        f.path.replace('/', "--")
    ));
    let parent = |p: &Path| p.parent().map(Path::to_path_buf).unwrap_or_default();
    for d in [parent(&part), parent(&dest)] {
        fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
    }
    let url = format!(
        "{}/{}/resolve/main/{}",
        endpoint(),
        r.repo,
        encode_path(&f.path)
    );
    eprintln!(
        "fetching {}/{} into {} (sha256-checked)",
        r.repo,
        f.path,
        dest.display()
    );
    let remote = Remote {
        url: &url,
        label: &f.path,
        size: Some(f.size),
        token,
    };
    download(agent, &remote, &part, opts.progress)?;
    let got = fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
    let actual = sha256_file(&part)?;
    if got != f.size || actual != sha {
        let _ = fs::remove_file(&part);
        return Err(StoreError::Checksum {
            what: format!(
                "{}/{} ({got} of {} bytes; the Hub's hash)",
                r.repo, f.path, f.size
            ),
            expected: sha,
            actual,
        });
    }
    fs::rename(&part, &dest).map_err(io(format!(
        "renaming {} to {}",
        part.display(),
        dest.display()
    )))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_as_llama_cpp_spells_them() {
        let r = HfRef::parse("bartowski/Qwen3-8B-GGUF:q4_k_m", None).unwrap();
        assert_eq!(
            (r.repo.as_str(), r.tag.as_deref()),
            ("bartowski/Qwen3-8B-GGUF", Some("q4_k_m"))
        );
        let r = HfRef::parse("hf://u/r/sub/m.Q8_0.gguf", None).unwrap();
        assert_eq!(
            (r.repo.as_str(), r.file.as_deref()),
            ("u/r", Some("sub/m.Q8_0.gguf"))
        );
        for bad in [
            "u",
            "u/r/x",
            "u/r:",
            "../r",
            "u/r:Q4/..",
            "hf://u/r",
            "hf://u/r/../x",
            "u/.r",
        ] {
            assert!(HfRef::parse(bad, None).is_err(), "{bad}");
        }
    }
}
