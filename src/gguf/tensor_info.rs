//! Tensor infos: name, shape (ggml order: `ne[0]` is the contiguous row length), type and the
//! offset of the data relative to the start of the data section, with every check ggml makes.

use super::error::GgufError;
use super::reader::Reader;
use super::types::GgmlType;

/// Most dimensions of a tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Longest tensor name in bytes (ggml's `GGML_MAX_NAME` less its terminating NUL).
pub const MAX_NAME_LEN: u64 = 63;
/// Smallest on-disk tensor info: name length (8), one-byte name, n_dims (4), one dim (8),
/// type (4), offset (8).
pub const MIN_TENSOR_INFO_BYTES: u64 = 33;

/// One tensor of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// `[ne0, ne1, …]`: `ne0` elements per row, rows of `ne1`, …
    pub shape: Vec<u64>,
    pub ty: GgmlType,
    /// Byte offset from the start of the data section.
    pub offset: u64,
    /// Bytes of data (`rows × row_bytes(ne0)`).
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Elements per row (`ne0`).
    pub fn row_len(&self) -> u64 {
        self.shape.first().copied().unwrap_or(1)
    }

    /// Number of rows (product of the dimensions after the first).
    pub fn n_rows(&self) -> u64 {
        self.shape.iter().skip(1).product()
    }
}

/// Read one tensor info and check its name, shape and type. Offsets are checked by the caller,
/// which knows the alignment and the running offset.
pub(crate) fn read_tensor_info(r: &mut Reader<'_>, index: u64) -> Result<TensorInfo, GgufError> {
    let raw = r.string_bytes("tensor name")?;
    let name = match std::str::from_utf8(raw) {
        Ok(s) => s.to_string(),
        Err(e) => {
            return Err(GgufError::InvalidUtf8 {
                offset: r.pos().saturating_sub(raw.len() as u64),
                valid_up_to: e.valid_up_to(),
            })
        }
    };
    if name.is_empty() {
        return Err(GgufError::EmptyTensorName { index });
    }
    if name.len() as u64 > MAX_NAME_LEN {
        return Err(GgufError::TensorNameTooLong {
            len: name.len() as u64,
            name,
            max: MAX_NAME_LEN,
        });
    }
    let n_dims = r.u32("tensor n_dims")?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(GgufError::BadDimCount {
            name,
            n_dims,
            max: MAX_DIMS,
        });
    }
    let mut shape = Vec::with_capacity(n_dims as usize);
    for axis in 0..n_dims as usize {
        let value = r.u64("tensor dimension")?;
        if value == 0 {
            return Err(GgufError::ZeroDim { name, axis });
        }
        if value > i64::MAX as u64 {
            return Err(GgufError::DimTooLarge { name, axis, value });
        }
        shape.push(value);
    }
    let type_id = r.u32("tensor type")?;
    let offset = r.u64("tensor offset")?;

    let n_elements = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64);
    let Some(n_elements) = n_elements else {
        return Err(GgufError::ElementCountOverflow { name, shape });
    };
    if let Some(type_name) = GgmlType::unsupported_prism_type(type_id) {
        return Err(GgufError::UnsupportedTensorType {
            name,
            type_id,
            type_name,
        });
    }
    // Id 42 reads as mainline Q2_0 here; `layout::resolve_id42_layouts` settles it per file.
    let Some(ty) = GgmlType::from_id(type_id) else {
        return Err(GgufError::UnknownTensorType { name, type_id });
    };
    let ne0 = shape.first().copied().unwrap_or(1);
    let block_size = ty.block_size() as u64;
    if ne0 % block_size != 0 {
        return Err(GgufError::NotBlockMultiple {
            name,
            ty,
            ne0,
            block_size,
        });
    }
    let rows = n_elements / ne0;
    let n_bytes = ty.row_bytes(ne0).and_then(|rb| rb.checked_mul(rows));
    let Some(n_bytes) = n_bytes.filter(|&n| n <= i64::MAX as u64) else {
        return Err(GgufError::ByteSizeOverflow { name, ty, shape });
    };
    if n_elements > u32::MAX as u64 || n_bytes > u32::MAX as u64 {
        return Err(GgufError::TensorTooLargeForShaders {
            name,
            elements: n_elements,
            bytes: n_bytes,
        });
    }
    Ok(TensorInfo {
        name,
        shape,
        ty,
        offset,
        n_bytes,
    })
}

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
pub fn align_up(x: u64, align: u64) -> Option<u64> {
    let mask = align.checked_sub(1)?;
    x.checked_add(mask).map(|v| v & !mask)
}
