//! Plain getters of one metadata value each: `Ok(None)` when the key is absent, the value when
//! it has a type that means what the caller asks, else a [`MetaError`] naming the key and value.

use super::MetaError;
use crate::gguf::{summarize, MetaArray, MetaValue, Metadata};

/// The error for `key` holding `v` where `expected` was asked.
fn wrong_type(key: &str, expected: &'static str, v: &MetaValue) -> MetaError {
    MetaError::Type {
        key: key.to_string(),
        expected,
        found: v.type_name(),
        value: summarize(v, 8),
    }
}

/// An integer of any width that fits in u32.
pub(super) fn u32_key(m: &Metadata, key: &str) -> Result<Option<u32>, MetaError> {
    let Some(v) = m.get(key) else {
        return Ok(None);
    };
    let i = integer(v).ok_or_else(|| wrong_type(key, "an integer", v))?;
    u32::try_from(i).map(Some).map_err(|_| MetaError::Invalid {
        key: key.to_string(),
        value: i.to_string(),
        why: "not in 0..=u32::MAX",
    })
}

/// A float: f32 as is, f64 rounded to f32.
pub(super) fn f32_key(m: &Metadata, key: &str) -> Result<Option<f32>, MetaError> {
    match m.get(key) {
        None => Ok(None),
        Some(MetaValue::F32(x)) => Ok(Some(*x)),
        Some(MetaValue::F64(x)) => Ok(Some(*x as f32)),
        Some(v) => Err(wrong_type(key, "a float", v)),
    }
}

/// A bool.
pub(super) fn bool_key(m: &Metadata, key: &str) -> Result<Option<bool>, MetaError> {
    match m.get(key) {
        None => Ok(None),
        Some(MetaValue::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(wrong_type(key, "a bool", v)),
    }
}

/// A string.
pub(super) fn string_key<'a>(m: &'a Metadata, key: &str) -> Result<Option<&'a str>, MetaError> {
    match m.get(key) {
        None => Ok(None),
        Some(MetaValue::String(s)) => Ok(Some(s)),
        Some(v) => Err(wrong_type(key, "a string", v)),
    }
}

/// The length of an array of strings.
pub(super) fn string_array_len(m: &Metadata, key: &str) -> Result<Option<usize>, MetaError> {
    match m.get(key) {
        None => Ok(None),
        Some(MetaValue::Array(MetaArray::String(v))) => Ok(Some(v.len())),
        Some(v) => Err(wrong_type(key, "an array of strings", v)),
    }
}

/// An array of integers of any width, as i64 (u64 values past i64::MAX are refused).
pub(super) fn int_array_key(m: &Metadata, key: &str) -> Result<Option<Vec<i64>>, MetaError> {
    let Some(v) = m.get(key) else {
        return Ok(None);
    };
    let MetaValue::Array(a) = v else {
        return Err(wrong_type(key, "an array of integers", v));
    };
    let wide: Vec<i128> = match a {
        MetaArray::U8(x) => x.iter().map(|&e| i128::from(e)).collect(),
        MetaArray::I8(x) => x.iter().map(|&e| i128::from(e)).collect(),
        MetaArray::U16(x) => x.iter().map(|&e| i128::from(e)).collect(),
        MetaArray::I16(x) => x.iter().map(|&e| i128::from(e)).collect(),
        MetaArray::U32(x) => x.iter().map(|&e| i128::from(e)).collect(),
        MetaArray::I32(x) => x.iter().map(|&e| i128::from(e)).collect(),
        MetaArray::U64(x) => x.iter().map(|&e| i128::from(e)).collect(),
        MetaArray::I64(x) => x.iter().map(|&e| i128::from(e)).collect(),
        _ => return Err(wrong_type(key, "an array of integers", v)),
    };
    wide.into_iter()
        .map(|e| {
            i64::try_from(e).map_err(|_| MetaError::Invalid {
                key: key.to_string(),
                value: e.to_string(),
                why: "an element past i64::MAX",
            })
        })
        .collect::<Result<Vec<i64>, _>>()
        .map(Some)
}

/// The value of any integer type, widened.
fn integer(v: &MetaValue) -> Option<i128> {
    Some(match *v {
        MetaValue::U8(x) => x.into(),
        MetaValue::I8(x) => x.into(),
        MetaValue::U16(x) => x.into(),
        MetaValue::I16(x) => x.into(),
        MetaValue::U32(x) => x.into(),
        MetaValue::I32(x) => x.into(),
        MetaValue::U64(x) => x.into(),
        MetaValue::I64(x) => x.into(),
        _ => return None,
    })
}

/// An array of bools.
pub(super) fn bool_array_key(m: &Metadata, key: &str) -> Result<Option<Vec<bool>>, MetaError> {
    match m.get(key) {
        None => Ok(None),
        Some(MetaValue::Array(MetaArray::Bool(v))) => Ok(Some(v.clone())),
        Some(v) => Err(wrong_type(key, "an array of bools", v)),
    }
}
