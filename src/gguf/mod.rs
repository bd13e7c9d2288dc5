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

/// A GGUF file on disk, mapped read-only, with its parsed header.
///
/// The map must not be truncated by another process while open (that is a SIGBUS, not an
/// error); the parse checks the length once, and callers drop the file after uploading weights.
pub struct GgufFile {
    pub path: PathBuf,
    pub gguf: Gguf,
    map: memmap2::Mmap,
}

impl GgufFile {
    /// Map and parse `path`.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let file = std::fs::File::open(path).map_err(|source| GgufError::Open {
            path: path.display().to_string(),
            source,
        })?;
        // SAFETY: the map is read-only; flint never writes the file, and the length it parses
        // against is the length mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| GgufError::Map {
            path: path.display().to_string(),
            source,
        })?;
        let gguf = Gguf::parse(&map)?;
        Ok(GgufFile {
            path: path.to_path_buf(),
            gguf,
            map,
        })
    }

    /// The whole mapped file.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// File length in bytes.
    pub fn file_len(&self) -> u64 {
        self.map.len() as u64
    }

    /// The data bytes of the tensor named `name`.
    pub fn tensor_data(&self, name: &str) -> Result<(&TensorInfo, &[u8]), GgufError> {
        let t = self
            .gguf
            .tensor(name)
            .ok_or_else(|| GgufError::MissingTensor {
                name: name.to_string(),
            })?;
        Ok((t, self.gguf.tensor_data(&self.map, t)?))
    }
}

impl std::ops::Deref for GgufFile {
    type Target = Gguf;
    fn deref(&self) -> &Gguf {
        &self.gguf
    }
}
