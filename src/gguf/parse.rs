//! The GGUF parser: header → metadata → tensor infos → data section, all checked against the
//! real length of the bytes before anything is trusted or allocated.
//!
//! Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv ×
//! (string key, u32 value type, value), then n_tensors × (string name, u32 n_dims, n_dims × u64,
//! u32 type, u64 offset), padding to `general.alignment` (default 32), tensor data.

use std::collections::HashSet;

use super::error::GgufError;
use super::layout::resolve_id42_layouts;
use super::metadata::Metadata;
use super::reader::Reader;
use super::tensor_info::{align_up, read_tensor_info, TensorInfo, MIN_TENSOR_INFO_BYTES};
use super::value::{read_value, MetaValue, ValueType};
use super::vocab::validate_tokenizer;

/// "GGUF" as it appears in the first four bytes.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Default data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Largest accepted alignment (1 MiB).
pub const MAX_ALIGNMENT: u64 = 1 << 20;
/// Most tensors in one file.
pub const MAX_TENSORS: u64 = 1 << 20;
/// Most metadata keys in one file.
pub const MAX_KEYS: u64 = 1 << 20;
/// Longest metadata key in bytes.
pub const MAX_KEY_LEN: u64 = 1 << 16;
/// Smallest on-disk metadata entry: key length (8), one-byte key, type (4), one-byte value.
const MIN_KV_BYTES: u64 = 14;

/// A parsed GGUF file: everything but the tensor data, which stays where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Gguf {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    /// Data alignment in bytes (`general.alignment` or 32).
    pub alignment: u64,
    /// Byte offset of the data section from the start of the file.
    pub data_offset: u64,
    /// Bytes of the data section that tensors use (last tensor end).
    pub data_size: u64,
    /// The file ends exactly at the data offset: shapes and metadata only, no weights
    /// (`flint gguf strip` makes such files so a model can be planned before it is downloaded).
    pub shape_only: bool,
}

impl Gguf {
    /// Parse and validate a whole GGUF file held in `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Gguf, GgufError> {
        let file_len = bytes.len() as u64;
        if file_len < 24 {
            // Still report a bad magic first when the magic is there to read.
            if let Some(found) = bytes.get(..4).and_then(|m| <[u8; 4]>::try_from(m).ok()) {
                if found != GGUF_MAGIC {
                    return Err(GgufError::BadMagic { found });
                }
            }
            return Err(GgufError::TooSmall { file_len });
        }
        let mut r = Reader::new(bytes);
        let magic = r.bytes(4, "magic")?;
        let found = <[u8; 4]>::try_from(magic).unwrap_or_default();
        if found != GGUF_MAGIC {
            return Err(GgufError::BadMagic { found });
        }
        let version = r.u32("version")?;
        if version != 2 && version != 3 {
            if version & 0xFFFF == 0 && version.swap_bytes() <= 3 && version != 0 {
                return Err(GgufError::BigEndian { raw: version });
            }
            return Err(GgufError::UnsupportedVersion { version });
        }
        let n_tensors = r.u64("tensor count")?;
        if n_tensors > MAX_TENSORS {
            return Err(GgufError::TooManyTensors {
                count: n_tensors,
                max: MAX_TENSORS,
            });
        }
        let n_kv = r.u64("metadata count")?;
        if n_kv > MAX_KEYS {
            return Err(GgufError::TooManyKeys {
                count: n_kv,
                max: MAX_KEYS,
            });
        }
        r.check_count("metadata entries", n_kv, MIN_KV_BYTES)?;
        let metadata = read_metadata(&mut r, n_kv)?;
        let alignment = read_alignment(&metadata)?;

        r.check_count("tensor infos", n_tensors, MIN_TENSOR_INFO_BYTES)?;
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut names = HashSet::with_capacity(n_tensors as usize);
        for index in 0..n_tensors {
            let t = read_tensor_info(&mut r, index)?;
            if !names.insert(t.name.clone()) {
                return Err(GgufError::DuplicateTensor { name: t.name });
            }
            if t.offset % alignment != 0 {
                return Err(GgufError::MisalignedOffset {
                    name: t.name,
                    offset: t.offset,
                    alignment,
                });
            }
            tensors.push(t);
        }
        let data_offset = align_up(r.pos(), alignment).unwrap_or(u64::MAX);
        // Every tensor has at least one element, so at least one byte of data.
        let shape_only = !tensors.is_empty() && file_len == data_offset;
        let data_len = (!shape_only).then(|| file_len.saturating_sub(data_offset));
        resolve_id42_layouts(&mut tensors, alignment, data_len)?;

        let mut expected = 0u64;
        for t in &tensors {
            if t.offset != expected {
                return Err(GgufError::UnexpectedOffset {
                    name: t.name.clone(),
                    offset: t.offset,
                    expected,
                });
            }
            let next = t
                .offset
                .checked_add(t.n_bytes)
                .and_then(|end| align_up(end, alignment));
            let Some(next) = next else {
                return Err(GgufError::DataSizeOverflow {
                    name: t.name.clone(),
                });
            };
            expected = next;
        }
        let data_size = tensors
            .last()
            .map(|t| t.offset.saturating_add(t.n_bytes))
            .unwrap_or(0);
        if !tensors.is_empty()
            && !shape_only
            && data_offset
                .checked_add(data_size)
                .is_none_or(|e| e > file_len)
        {
            return Err(GgufError::DataExceedsFile {
                data_offset,
                needed: data_size,
                file_len,
            });
        }
        let gguf = Gguf {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
            data_size,
            shape_only,
        };
        validate_tokenizer(&gguf)?;
        Ok(gguf)
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The bytes of tensor `t` within the whole file `bytes` this was parsed from.
    pub fn tensor_data<'a>(&self, bytes: &'a [u8], t: &TensorInfo) -> Result<&'a [u8], GgufError> {
        if self.shape_only {
            return Err(GgufError::ShapeOnly {
                tensor: t.name.clone(),
            });
        }
        let start = self.data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        let out_of_bounds = || GgufError::DataExceedsFile {
            data_offset: self.data_offset,
            needed: t.offset.saturating_add(t.n_bytes),
            file_len: bytes.len() as u64,
        };
        match (start, end) {
            (Some(s), Some(e)) => usize::try_from(s)
                .ok()
                .zip(usize::try_from(e).ok())
                .and_then(|(s, e)| bytes.get(s..e))
                .ok_or_else(out_of_bounds),
            _ => Err(out_of_bounds()),
        }
    }
}

fn read_metadata(r: &mut Reader<'_>, n_kv: u64) -> Result<Metadata, GgufError> {
    let mut metadata = Metadata::new();
    for index in 0..n_kv {
        let key_offset = r.pos();
        let raw = r.string_bytes("metadata key")?;
        if raw.is_empty() {
            return Err(GgufError::EmptyKey { index });
        }
        if raw.len() as u64 > MAX_KEY_LEN {
            return Err(GgufError::KeyTooLong {
                index,
                len: raw.len() as u64,
                max: MAX_KEY_LEN,
            });
        }
        let key = std::str::from_utf8(raw)
            .map_err(|e| GgufError::InvalidUtf8 {
                offset: key_offset,
                valid_up_to: e.valid_up_to(),
            })?
            .to_string();
        if metadata.contains(&key) {
            return Err(GgufError::DuplicateKey { key });
        }
        let type_id = r.u32("metadata value type")?;
        let Some(ty) = ValueType::from_id(type_id) else {
            return Err(GgufError::UnknownValueType { key, type_id });
        };
        let value = read_value(r, ty, &key)?;
        metadata.insert(key, value)?;
    }
    Ok(metadata)
}

fn read_alignment(metadata: &Metadata) -> Result<u64, GgufError> {
    let alignment = match metadata.get("general.alignment") {
        None => return Ok(DEFAULT_ALIGNMENT),
        Some(MetaValue::U32(a)) => u64::from(*a),
        Some(v) => {
            return Err(GgufError::AlignmentType {
                found: v.value_type(),
            })
        }
    };
    if alignment == 0 || !alignment.is_power_of_two() {
        return Err(GgufError::AlignmentNotPowerOfTwo { alignment });
    }
    if alignment > MAX_ALIGNMENT {
        return Err(GgufError::AlignmentTooLarge {
            alignment,
            max: MAX_ALIGNMENT,
        });
    }
    Ok(alignment)
}
