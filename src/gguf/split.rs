//! Split GGUF models: `NAME-00001-of-0000N.gguf` … `NAME-0000N-of-0000N.gguf`, as llama.cpp's
//! `gguf-split` and gguf-py's `GGUFWriter(split_max_tensors=…)` write them. Every shard is a
//! complete GGUF file; the first holds the model's metadata, and each carries `split.no`
//! (0-based, u16), `split.count` (u16) and `split.tensors.count` (the tensors of all shards,
//! i32). The file names follow `PREFIX-%05d-of-%05d.gguf` (llama.cpp's `llama_split_path`,
//! <https://github.com/ggml-org/llama.cpp/blob/master/tools/gguf-split/README.md>).
//!
//! [`open_rest`] finds the other shards from the first one's name, maps and parses each, and
//! checks the three keys and that no tensor name repeats across shards.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::{map_file, Gguf, GgufError};

/// `split.no`: this shard's 0-based index.
pub const KEY_NO: &str = "split.no";
/// `split.count`: the number of shards.
pub const KEY_COUNT: &str = "split.count";
/// `split.tensors.count`: the tensors of all shards together.
pub const KEY_TENSORS: &str = "split.tensors.count";

/// The most shards a split model may have (five-digit shard numbers).
pub const MAX_COUNT: u32 = 99_999;

/// One shard after the first: its parsed header and its map.
pub(super) struct Shard {
    pub path: PathBuf,
    pub gguf: Gguf,
    pub map: memmap2::Mmap,
}

fn err(path: &Path, reason: impl Into<String>) -> GgufError {
    GgufError::Split {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// `(split.no, split.count)` of a parsed file; `None` when it is not a split model.
pub fn split_keys(g: &Gguf) -> Result<Option<(u32, u32)>, GgufError> {
    let count = g.metadata.opt(KEY_COUNT, |m, k| m.u32(k))?;
    match count {
        None | Some(0 | 1) => Ok(None),
        Some(n) => Ok(Some((
            g.metadata.opt(KEY_NO, |m, k| m.u32(k))?.unwrap_or(0),
            n,
        ))),
    }
}

/// The path of shard `no` (0-based) of `count`, beside `first`, whose name ends in
/// `-00001-of-{count:05}.gguf`.
pub fn shard_path(first: &Path, no: u32, count: u32) -> Result<PathBuf, GgufError> {
    let name = first
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| err(first, "the file name is not UTF-8"))?;
    let suffix = format!("-00001-of-{count:05}.gguf");
    let prefix = name.strip_suffix(&suffix).ok_or_else(|| {
        err(
            first,
            format!("split.count is {count} but the name does not end in '{suffix}'"),
        )
    })?;
    Ok(first.with_file_name(format!("{prefix}-{:05}-of-{count:05}.gguf", no + 1)))
}

/// Open shards 2..=count of the split model whose first shard, `first`, parsed as `head`.
/// Returns them in order; their tensors are checked not to repeat `head`'s or each other's, and
/// to add up to `split.tensors.count`.
pub(super) fn open_rest(first: &Path, head: &Gguf) -> Result<Vec<Shard>, GgufError> {
    let Some((no, count)) = split_keys(head)? else {
        return Ok(Vec::new());
    };
    if no != 0 {
        let first_name = with_no(first, no, count)?;
        return Err(err(
            first,
            format!(
                "this is shard {} of {count}: open the first one, {}",
                no + 1,
                first_name.display()
            ),
        ));
    }
    // `-%05d-of-%05d`: five digits; the name is checked before anything is sized by `count`.
    if count > MAX_COUNT {
        return Err(err(
            first,
            format!("{KEY_COUNT} is {count}, over the {MAX_COUNT} shards a name can number"),
        ));
    }
    shard_path(first, 1, count)?;
    let total = head.metadata.opt(KEY_TENSORS, |m, k| m.u64(k))?;
    let mut names: HashSet<&str> = head.tensors.iter().map(|t| t.name.as_str()).collect();
    let mut shards = Vec::with_capacity((count as usize - 1).min(64));
    for i in 1..count {
        let path = shard_path(first, i, count)?;
        if !path.is_file() {
            return Err(err(
                first,
                format!("shard {} of {count}, {}, is missing", i + 1, path.display()),
            ));
        }
        let map = map_file(&path)?;
        let gguf = Gguf::parse(&map)?;
        match split_keys(&gguf)? {
            Some((n, c)) if n == i && c == count => {}
            got => {
                return Err(err(
                    &path,
                    format!(
                        "expected {KEY_NO} = {i} and {KEY_COUNT} = {count}, found {got:?} \
                         (a shard of another model?)"
                    ),
                ))
            }
        }
        shards.push(Shard { path, gguf, map });
    }
    let mut n = head.tensors.len() as u64;
    for s in &shards {
        for t in &s.gguf.tensors {
            if !names.insert(t.name.as_str()) {
                return Err(GgufError::DuplicateTensor {
                    name: t.name.clone(),
                });
            }
        }
        n += s.gguf.tensors.len() as u64;
    }
    if let Some(total) = total {
        if total != n {
            return Err(err(
                first,
                format!("{KEY_TENSORS} is {total} but the {count} shards hold {n} tensors"),
            ));
        }
    }
    Ok(shards)
}

/// The name `path` would have as shard `no` (its own name when it is that shard).
fn with_no(path: &Path, no: u32, count: u32) -> Result<PathBuf, GgufError> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| err(path, "the file name is not UTF-8"))?;
    let suffix = format!("-{:05}-of-{count:05}.gguf", no + 1);
    let prefix = name.strip_suffix(&suffix).ok_or_else(|| {
        err(
            path,
            format!("split.no is {no} but the name does not end in '{suffix}'"),
        )
    })?;
    Ok(path.with_file_name(format!("{prefix}-00001-of-{count:05}.gguf")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_follow_llama_cpp() {
        let first = Path::new("/m/x-Q4_1-00001-of-00003.gguf");
        assert_eq!(
            shard_path(first, 2, 3).unwrap(),
            Path::new("/m/x-Q4_1-00003-of-00003.gguf")
        );
        assert!(shard_path(Path::new("/m/x.gguf"), 1, 3).is_err());
        assert_eq!(
            with_no(Path::new("/m/x-00002-of-00003.gguf"), 1, 3).unwrap(),
            Path::new("/m/x-00001-of-00003.gguf")
        );
    }
}
