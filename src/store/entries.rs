//! What is in the store, by name: `flint models` (list), `flint rm NAME` (remove), and store
//! names for `-m` (resolve). Names are the manifest's (`smollm2-135m-instruct-q4_1`), a file name
//! at the store's top level, or a Hub download as `USER/REPO/FILE` (a split model by its first
//! shard); `USER/REPO[:QUANT]` and `hf://USER/REPO/FILE` pick among the store's copy of a
//! repository as they would on the Hub.

use std::fs;
use std::path::{Path, PathBuf};

use super::hub::{list_local, select, HfRef, HUB_DIR};
use super::hub_select::{shards_of, split_name};
use super::{ensure, io, manifest, models_dir, StoreError};

/// A model in the store.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Its manifest name, `USER/REPO/FILE` for a Hub download, else its file name.
    pub name: String,
    /// Bytes of all its files.
    pub bytes: u64,
    /// The file to open (the first shard of a split model).
    pub path: PathBuf,
    /// How many files it has (shards of a split model).
    pub files: usize,
}

/// The models in the store, by name.
pub fn list() -> Result<Vec<Stored>, StoreError> {
    let dir = models_dir()?;
    let known = manifest()?;
    let mut out = Vec::new();
    let rd = match fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io(format!("listing {}", dir.display()))(e)),
    };
    for item in rd {
        let item = item.map_err(io(format!("listing {}", dir.display())))?;
        let file = item.file_name().to_string_lossy().into_owned();
        if file.starts_with('.') || !file.ends_with(".gguf") {
            continue;
        }
        let meta = item
            .metadata()
            .map_err(io(format!("reading {}", item.path().display())))?;
        if !meta.is_file() {
            continue;
        }
        let name = known
            .iter()
            .find(|e| e.file == file)
            .map(|e| e.name.clone())
            .unwrap_or(file);
        out.push(Stored {
            name,
            bytes: meta.len(),
            path: item.path(),
            files: 1,
        });
    }
    for (repo, repo_dir) in hub_repos(&dir.join(HUB_DIR)) {
        let paths = list_local(&repo_dir);
        for p in &paths {
            let Some(s) = split_name(p) else { continue };
            if s.count > 1 && s.index != 1 {
                continue;
            }
            let shards = shards_of(&paths, p);
            let bytes = shards
                .iter()
                .filter_map(|f| fs::metadata(repo_dir.join(f)).ok())
                .map(|m| m.len())
                .sum();
            out.push(Stored {
                name: format!("{repo}/{p}"),
                bytes,
                path: repo_dir.join(p),
                files: shards.len(),
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// `(USER/REPO, folder)` of every repository under the store's `hf/`.
fn hub_repos(hf: &Path) -> Vec<(String, PathBuf)> {
    let dirs = |d: &Path| -> Vec<(String, PathBuf)> {
        let Ok(rd) = fs::read_dir(d) else {
            return Vec::new();
        };
        let mut v: Vec<_> = rd
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .filter(|(n, _)| !n.starts_with('.'))
            .collect();
        v.sort();
        v
    };
    let mut out = Vec::new();
    for (user, ud) in dirs(hf) {
        for (repo, rd) in dirs(&ud) {
            out.push((format!("{user}/{repo}"), rd));
        }
    }
    out
}

/// The store's files `name` stands for (a Hub name), and the repository folder.
fn hub_files(name: &str) -> Result<Option<(PathBuf, Vec<PathBuf>)>, StoreError> {
    let spec = name.strip_prefix("hf://").unwrap_or(name);
    // USER/REPO/FILE: a listing name; else USER/REPO[:QUANT] or hf://USER/REPO/FILE.
    let parsed = match spec.splitn(3, '/').collect::<Vec<_>>()[..] {
        [u, r, f] if !name.starts_with("hf://") => HfRef::parse(&format!("{u}/{r}"), Some(f)),
        _ => HfRef::parse(name, None),
    };
    let Ok(r) = parsed else { return Ok(None) };
    let dir = r.dir()?;
    let local = list_local(&dir);
    if local.is_empty() {
        return Ok(None);
    }
    let files = match select(&r, &local) {
        Ok(f) => f,
        Err(_) => return Ok(None),
    };
    let paths = files.iter().map(|f| dir.join(f)).collect();
    Ok(Some((dir, paths)))
}

/// The file a `-m NAME` that is not a path stands for: a known model (fetched on first use, as
/// the default model is) or a model in the store. `None` when `name` is neither.
pub fn resolve_name(name: &str) -> Result<Option<PathBuf>, StoreError> {
    if manifest()?.iter().any(|e| e.name == name) {
        let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
        return ensure(name, progress).map(Some);
    }
    Ok(hub_files(name)?.and_then(|(_, files)| files.into_iter().next()))
}

/// Remove the model `name` from the store (every shard of a split model; `USER/REPO` alone:
/// the whole repository). Returns the files removed.
pub fn remove(name: &str) -> Result<Vec<PathBuf>, StoreError> {
    let dir = models_dir()?;
    let not_in = || StoreError::NotInStore {
        name: name.to_string(),
        dir: dir.display().to_string(),
    };
    let top = manifest()?
        .into_iter()
        .find(|e| e.name == name)
        .map(|e| e.file)
        .unwrap_or_else(|| name.to_string());
    if !top.contains(['/', '\\']) && !top.starts_with('.') && dir.join(&top).is_file() {
        let p = dir.join(&top);
        fs::remove_file(&p).map_err(io(format!("removing {}", p.display())))?;
        return Ok(vec![p]);
    }
    let whole_repo = HfRef::parse(name.strip_prefix("hf://").unwrap_or(name), None)
        .ok()
        .filter(|r| r.tag.is_none() && r.file.is_none());
    if let Some(r) = whole_repo.filter(|r| r.dir().is_ok_and(|d| d.is_dir())) {
        let d = r.dir()?;
        let files: Vec<PathBuf> = list_local(&d).iter().map(|f| d.join(f)).collect();
        fs::remove_dir_all(&d).map_err(io(format!("removing {}", d.display())))?;
        if let Some(p) = d.parent() {
            prune(p, &dir.join(HUB_DIR));
        }
        return Ok(files);
    }
    let (_, files) = hub_files(name)?.ok_or_else(not_in)?;
    for f in &files {
        fs::remove_file(f).map_err(io(format!("removing {}", f.display())))?;
    }
    if let Some(p) = files.first().and_then(|f| f.parent()) {
        prune(p, &dir.join(HUB_DIR));
    }
    Ok(files)
}

/// Remove `from` and its parents while they are empty, stopping at `hf` (kept).
fn prune(from: &Path, hf: &Path) {
    let mut d = Some(from);
    while let Some(cur) = d {
        if !cur.starts_with(hf) || cur == hf || fs::remove_dir(cur).is_err() {
            break;
        }
        d = cur.parent();
    }
}
