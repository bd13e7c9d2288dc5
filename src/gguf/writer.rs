//! The GGUF writer: metadata and tensors in, a valid GGUF v2/v3 file out (used by tests, the
//! fixture generators and the drafter export). The reader must accept whatever this writes.

use std::io::Write;
use std::path::Path;

use super::error::GgufError;
use super::metadata::Metadata;
use super::parse::{DEFAULT_ALIGNMENT, GGUF_MAGIC};
use super::tensor_info::align_up;
use super::types::GgmlType;
use super::value::{MetaArray, MetaValue};

/// A tensor waiting to be written.
#[derive(Debug, Clone)]
struct PendingTensor {
    name: String,
    shape: Vec<u64>,
    ty: GgmlType,
    n_bytes: u64,
    /// `None` for a shape-only tensor.
    data: Option<Vec<u8>>,
}

/// Builds a GGUF file in memory.
#[derive(Debug, Clone)]
pub struct GgufWriter {
    version: u32,
    metadata: Metadata,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty version-3 file.
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            metadata: Metadata::new(),
            tensors: Vec::new(),
        }
    }

    /// Write GGUF version 2 or 3 (the layouts are the same for little-endian files).
    pub fn with_version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Set (or replace) a metadata key.
    pub fn set(&mut self, key: &str, value: MetaValue) -> &mut Self {
        self.metadata.set(key, value);
        self
    }

    /// Set `general.alignment`.
    pub fn set_alignment(&mut self, alignment: u32) -> &mut Self {
        self.set("general.alignment", MetaValue::U32(alignment))
    }

    /// Add a tensor; `data` must hold exactly the bytes its shape and type need.
    pub fn add_tensor(
        &mut self,
        name: &str,
        shape: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self, GgufError> {
        let need = Self::tensor_bytes(name, shape, ty)?;
        if need != data.len() as u64 {
            return Err(GgufError::Write {
                message: format!(
                    "tensor '{name}' {ty} {shape:?} needs {need:?} bytes, got {}",
                    data.len()
                ),
            });
        }
        self.push(name, shape, ty, need, Some(data))
    }

    /// Add a tensor without data: a file of only such tensors is written shape-only (it ends at
    /// the data offset), as `flint gguf strip` makes.
    pub fn add_tensor_shape(
        &mut self,
        name: &str,
        shape: &[u64],
        ty: GgmlType,
    ) -> Result<&mut Self, GgufError> {
        let need = Self::tensor_bytes(name, shape, ty)?;
        self.push(name, shape, ty, need, None)
    }

    fn tensor_bytes(name: &str, shape: &[u64], ty: GgmlType) -> Result<u64, GgufError> {
        let ne0 = shape.first().copied().unwrap_or(1);
        let rows = shape
            .iter()
            .skip(1)
            .try_fold(1u64, |a, &d| a.checked_mul(d));
        ty.row_bytes(ne0)
            .zip(rows)
            .and_then(|(b, r)| b.checked_mul(r))
            .ok_or_else(|| GgufError::Write {
                message: format!("tensor '{name}' {ty} {shape:?}: no valid byte size"),
            })
    }

    fn push(
        &mut self,
        name: &str,
        shape: &[u64],
        ty: GgmlType,
        n_bytes: u64,
        data: Option<Vec<u8>>,
    ) -> Result<&mut Self, GgufError> {
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::Write {
                message: format!("tensor '{name}' added twice"),
            });
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            shape: shape.to_vec(),
            ty,
            n_bytes,
            data,
        });
        Ok(self)
    }

    fn alignment(&self) -> Result<u64, GgufError> {
        match self.metadata.get("general.alignment") {
            None => Ok(DEFAULT_ALIGNMENT),
            Some(MetaValue::U32(a))
                if a.is_power_of_two() && u64::from(*a) <= super::parse::MAX_ALIGNMENT =>
            {
                Ok(u64::from(*a))
            }
            // A file the reader would refuse (and, at 2^31, a 2 GiB padding: found by fuzzing).
            Some(v) => Err(GgufError::Write {
                message: format!(
                    "general.alignment must be a power-of-two u32 of at most {}, got {v:?}",
                    super::parse::MAX_ALIGNMENT
                ),
            }),
        }
    }

    /// The whole file as bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        let alignment = self.alignment()?;
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in self.metadata.iter() {
            put_str(&mut out, key);
            out.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for d in &t.shape {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = align_up(offset + t.n_bytes, alignment).unwrap_or(u64::MAX);
        }
        pad_to(&mut out, alignment);
        let n_shape_only = self.tensors.iter().filter(|t| t.data.is_none()).count();
        if n_shape_only > 0 {
            if n_shape_only < self.tensors.len() {
                return Err(GgufError::Write {
                    message: "some tensors have data and some only shapes".to_string(),
                });
            }
            return Ok(out);
        }
        let data_start = out.len() as u64;
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize((data_start + off) as usize, 0);
            out.extend_from_slice(t.data.as_deref().unwrap_or_default());
        }
        if !self.tensors.is_empty() {
            pad_to(&mut out, alignment);
        }
        Ok(out)
    }

    /// Write the file to `w`.
    pub fn write_to(&self, mut w: impl Write) -> Result<(), GgufError> {
        let bytes = self.to_bytes()?;
        w.write_all(&bytes).map_err(|e| GgufError::Write {
            message: e.to_string(),
        })
    }

    /// Write the file to `path`.
    pub fn write_file(&self, path: &Path) -> Result<(), GgufError> {
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|e| GgufError::Write {
            message: format!("{}: {e}", path.display()),
        })
    }
}

fn pad_to(out: &mut Vec<u8>, alignment: u64) {
    let len = align_up(out.len() as u64, alignment).unwrap_or(out.len() as u64);
    out.resize(len as usize, 0);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    use MetaValue as V;
    match v {
        V::U8(x) => out.push(*x),
        V::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::Bool(x) => out.push(u8::from(*x)),
        V::String(s) => put_str(out, s),
        V::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        V::Array(a) => put_array(out, a),
    }
}

fn put_array(out: &mut Vec<u8>, a: &MetaArray) {
    out.extend_from_slice(&(a.elem_type() as u32).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        MetaArray::U8(v) => out.extend_from_slice(v),
        MetaArray::I8(v) => each!(v),
        MetaArray::U16(v) => each!(v),
        MetaArray::I16(v) => each!(v),
        MetaArray::U32(v) => each!(v),
        MetaArray::I32(v) => each!(v),
        MetaArray::F32(v) => each!(v),
        MetaArray::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        MetaArray::String(v) => v.iter().for_each(|s| put_str(out, s)),
        MetaArray::Array(v) => v.iter().for_each(|x| put_array(out, x)),
        MetaArray::U64(v) => each!(v),
        MetaArray::I64(v) => each!(v),
        MetaArray::F64(v) => each!(v),
    }
}
