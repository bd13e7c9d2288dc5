//! GGUF: the hardened reader (through memmap2 or any byte slice), metadata values, tensor infos,
//! ggml types and the writer.
//!
//! Parsing is O(file) and never allocates more than the file can justify: every count is checked
//! against the bytes left (count × smallest entry) before a vector is reserved, strings and arrays
//! are capped at 1 Gi, and each malformed class has its own [`GgufError`] variant.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod error;
mod layout;
mod metadata;
mod parse;
mod reader;
pub mod split;
mod tensor_info;
pub mod types;
mod value;
mod vocab;
mod writer;

use std::path::{Path, PathBuf};

pub use error::GgufError;
pub use metadata::Metadata;
pub use parse::{Gguf, DEFAULT_ALIGNMENT, MAX_ALIGNMENT, MAX_KEYS, MAX_TENSORS};
pub use tensor_info::{TensorInfo, MAX_DIMS, MAX_NAME_LEN};
pub use types::{GgmlType, ALL_TYPES, QK_K};
pub use value::{summarize, MetaArray, MetaValue, ValueType, MAX_ARRAY_LEN};
pub use writer::GgufWriter;

/// A GGUF model on disk, mapped read-only, with its parsed header: one file, or the shards of a
/// split model (`NAME-00001-of-0000N.gguf` …, [`split`]) joined, each shard mapped on its own.
///
/// The maps must not be truncated by another process while open (that is a SIGBUS, not an
/// error); the parse checks the length once, and callers drop the file after uploading weights.
pub struct GgufFile {
    pub path: PathBuf,
    /// The first file's header; for a split model, `tensors` lists every shard's tensors (each
    /// `offset` relative to its own shard's data section).
    pub gguf: Gguf,
    map: memmap2::Mmap,
    /// Shards 2..=N of a split model (empty for a single file).
    shards: Vec<split::Shard>,
    /// For each entry of `gguf.tensors`: 0 for the first file, `k` for `shards[k - 1]`.
    shard_of: Vec<u32>,
    /// The first file's own tensor count (its data bytes are `map`'s).
    own_tensors: usize,
}

/// Map `path` read-only.
fn map_file(path: &Path) -> Result<memmap2::Mmap, GgufError> {
    let file = std::fs::File::open(path).map_err(|source| GgufError::Open {
        path: path.display().to_string(),
        source,
    })?;
    // SAFETY: the map is read-only; flint never writes the file, and the length it parses
    // against is the length mapped.
    unsafe { memmap2::Mmap::map(&file) }.map_err(|source| GgufError::Map {
        path: path.display().to_string(),
        source,
    })
}

impl GgufFile {
    /// Map and parse `path`; when it is the first shard of a split model, the other shards too
    /// (found beside it by name, held to their `split.*` keys).
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let map = map_file(path)?;
        let mut gguf = Gguf::parse(&map)?;
        let shards = split::open_rest(path, &gguf)?;
        let own_tensors = gguf.tensors.len();
        let mut shard_of = vec![0u32; own_tensors];
        for (k, s) in shards.iter().enumerate() {
            gguf.tensors.extend(s.gguf.tensors.iter().cloned());
            shard_of.extend(std::iter::repeat_n(k as u32 + 1, s.gguf.tensors.len()));
        }
        Ok(GgufFile {
            path: path.to_path_buf(),
            gguf,
            map,
            shards,
            shard_of,
            own_tensors,
        })
    }

    /// The whole first (or only) mapped file.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Whether this is a split model of several files.
    pub fn is_split(&self) -> bool {
        !self.shards.is_empty()
    }

    /// The files of the model: the first, then the other shards in order.
    pub fn paths(&self) -> Vec<&Path> {
        std::iter::once(self.path.as_path())
            .chain(self.shards.iter().map(|s| s.path.as_path()))
            .collect()
    }

    /// Length in bytes of the model's files together.
    pub fn file_len(&self) -> u64 {
        self.map.len() as u64 + self.shards.iter().map(|s| s.map.len() as u64).sum::<u64>()
    }

    /// The data bytes of the tensor named `name`, from whichever shard holds it.
    pub fn tensor_data(&self, name: &str) -> Result<(&TensorInfo, &[u8]), GgufError> {
        let missing = || GgufError::MissingTensor {
            name: name.to_string(),
        };
        let i = self
            .gguf
            .tensors
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(missing)?;
        let t = self.gguf.tensors.get(i).ok_or_else(missing)?;
        let shard = self.shard_of.get(i).copied().unwrap_or(0) as usize;
        let data = match shard.checked_sub(1).and_then(|k| self.shards.get(k)) {
            Some(s) => s.gguf.tensor_data(&s.map, t)?,
            None if i < self.own_tensors => self.gguf.tensor_data(&self.map, t)?,
            None => return Err(missing()),
        };
        Ok((t, data))
    }
}

impl std::ops::Deref for GgufFile {
    type Target = Gguf;
    fn deref(&self) -> &Gguf {
        &self.gguf
    }
}
