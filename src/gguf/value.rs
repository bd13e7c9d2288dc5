//! Metadata values: the 13 GGUF value types, scalars, and typed arrays (one level of nesting).
//!
//! Arrays are stored typed (`Vec<f32>`, `Vec<String>`, …) so a vocabulary of 150k tokens costs
//! what it weighs, and the parser's allocation stays bounded by the file length.

use std::fmt;

use super::error::GgufError;
use super::reader::Reader;

/// Most elements in one array, as in ggml (1 Gi).
pub const MAX_ARRAY_LEN: u64 = 1 << 30;

/// A GGUF metadata value type (on-disk id in the discriminant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Smallest on-disk size of one value of this type (a string is at least its u64 length,
    /// an array its u32 type and u64 length).
    pub fn min_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A typed array. `Array` holds arrays of arrays; their elements may not be arrays again.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<MetaArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl MetaValue {
    pub fn value_type(&self) -> ValueType {
        use MetaValue as V;
        match self {
            V::U8(_) => ValueType::U8,
            V::I8(_) => ValueType::I8,
            V::U16(_) => ValueType::U16,
            V::I16(_) => ValueType::I16,
            V::U32(_) => ValueType::U32,
            V::I32(_) => ValueType::I32,
            V::F32(_) => ValueType::F32,
            V::Bool(_) => ValueType::Bool,
            V::String(_) => ValueType::String,
            V::Array(_) => ValueType::Array,
            V::U64(_) => ValueType::U64,
            V::I64(_) => ValueType::I64,
            V::F64(_) => ValueType::F64,
        }
    }

    /// The type spelled for error messages: `u32`, `array[string]`, …
    pub fn type_name(&self) -> String {
        match self {
            MetaValue::Array(a) => format!("array[{}]", a.elem_type()),
            v => v.value_type().name().to_string(),
        }
    }

    /// The value as a signed 128-bit integer when it is any integer type.
    pub fn as_i128(&self) -> Option<i128> {
        use MetaValue as V;
        Some(match *self {
            V::U8(x) => x.into(),
            V::I8(x) => x.into(),
            V::U16(x) => x.into(),
            V::I16(x) => x.into(),
            V::U32(x) => x.into(),
            V::I32(x) => x.into(),
            V::U64(x) => x.into(),
            V::I64(x) => x.into(),
            _ => return None,
        })
    }
}

impl MetaArray {
    pub fn elem_type(&self) -> ValueType {
        use MetaArray as A;
        match self {
            A::U8(_) => ValueType::U8,
            A::I8(_) => ValueType::I8,
            A::U16(_) => ValueType::U16,
            A::I16(_) => ValueType::I16,
            A::U32(_) => ValueType::U32,
            A::I32(_) => ValueType::I32,
            A::F32(_) => ValueType::F32,
            A::Bool(_) => ValueType::Bool,
            A::String(_) => ValueType::String,
            A::Array(_) => ValueType::Array,
            A::U64(_) => ValueType::U64,
            A::I64(_) => ValueType::I64,
            A::F64(_) => ValueType::F64,
        }
    }

    pub fn len(&self) -> usize {
        use MetaArray as A;
        match self {
            A::U8(v) => v.len(),
            A::I8(v) => v.len(),
            A::U16(v) => v.len(),
            A::I16(v) => v.len(),
            A::U32(v) => v.len(),
            A::I32(v) => v.len(),
            A::F32(v) => v.len(),
            A::Bool(v) => v.len(),
            A::String(v) => v.len(),
            A::Array(v) => v.len(),
            A::U64(v) => v.len(),
            A::I64(v) => v.len(),
            A::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Read one value of type `ty` for `key`. `depth` counts enclosing arrays.
pub(crate) fn read_value(
    r: &mut Reader<'_>,
    ty: ValueType,
    key: &str,
) -> Result<MetaValue, GgufError> {
    use MetaValue as V;
    Ok(match ty {
        ValueType::U8 => V::U8(r.u8("u8 value")?),
        ValueType::I8 => V::I8(r.i8("i8 value")?),
        ValueType::U16 => V::U16(r.u16("u16 value")?),
        ValueType::I16 => V::I16(r.i16("i16 value")?),
        ValueType::U32 => V::U32(r.u32("u32 value")?),
        ValueType::I32 => V::I32(r.i32("i32 value")?),
        ValueType::F32 => V::F32(r.f32("f32 value")?),
        ValueType::Bool => V::Bool(read_bool(r, key)?),
        ValueType::String => V::String(r.string("string value")?),
        ValueType::U64 => V::U64(r.u64("u64 value")?),
        ValueType::I64 => V::I64(r.i64("i64 value")?),
        ValueType::F64 => V::F64(r.f64("f64 value")?),
        ValueType::Array => V::Array(read_array(r, key, 1)?),
    })
}

fn read_bool(r: &mut Reader<'_>, key: &str) -> Result<bool, GgufError> {
    match r.u8("bool value")? {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(GgufError::InvalidBool {
            key: key.to_string(),
            value,
        }),
    }
}

/// Read an array header and its elements; `depth` is 1 for a top-level array.
fn read_array(r: &mut Reader<'_>, key: &str, depth: u32) -> Result<MetaArray, GgufError> {
    let type_id = r.u32("array element type")?;
    let ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
        key: key.to_string(),
        type_id,
    })?;
    let len = r.u64("array length")?;
    if len > MAX_ARRAY_LEN {
        return Err(GgufError::ArrayTooLong {
            key: key.to_string(),
            len,
            max: MAX_ARRAY_LEN,
        });
    }
    if ty == ValueType::Array && depth >= 2 {
        return Err(GgufError::NestedArrayTooDeep {
            key: key.to_string(),
            depth: depth + 1,
        });
    }
    let min = ty.min_size();
    if len.checked_mul(min).is_none_or(|n| n > r.remaining()) {
        return Err(GgufError::ArrayExceedsFile {
            key: key.to_string(),
            len,
            min_elem_bytes: min,
            remaining: r.remaining(),
        });
    }
    // `len` elements of at least `min` bytes fit in the file, so `len` is bounded by its length.
    let n = len as usize;
    macro_rules! many {
        ($variant:ident, $read:expr) => {{
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push($read?);
            }
            MetaArray::$variant(v)
        }};
    }
    Ok(match ty {
        ValueType::U8 => MetaArray::U8(r.bytes(len, "u8 array")?.to_vec()),
        ValueType::I8 => many!(I8, r.i8("i8 array")),
        ValueType::U16 => many!(U16, r.u16("u16 array")),
        ValueType::I16 => many!(I16, r.i16("i16 array")),
        ValueType::U32 => many!(U32, r.u32("u32 array")),
        ValueType::I32 => many!(I32, r.i32("i32 array")),
        ValueType::F32 => many!(F32, r.f32("f32 array")),
        ValueType::Bool => many!(Bool, read_bool(r, key)),
        ValueType::String => many!(String, r.string("string array element")),
        ValueType::U64 => many!(U64, r.u64("u64 array")),
        ValueType::I64 => many!(I64, r.i64("i64 array")),
        ValueType::F64 => many!(F64, r.f64("f64 array")),
        ValueType::Array => many!(Array, read_array(r, key, depth + 1)),
    })
}

/// Short human form: scalars as is, arrays summarised past `max_items` elements.
pub fn summarize(value: &MetaValue, max_items: usize) -> String {
    match value {
        MetaValue::String(s) => format!("{s:?}"),
        MetaValue::Array(a) => summarize_array(a, max_items),
        MetaValue::Bool(b) => b.to_string(),
        MetaValue::F32(x) => x.to_string(),
        MetaValue::F64(x) => x.to_string(),
        v => v.as_i128().map(|i| i.to_string()).unwrap_or_default(),
    }
}

fn summarize_array(a: &MetaArray, max_items: usize) -> String {
    fn list<T: fmt::Debug>(v: &[T], max: usize) -> String {
        let shown: Vec<String> = v.iter().take(max).map(|x| format!("{x:?}")).collect();
        let more = if v.len() > max {
            format!(", … ({} more)", v.len() - max)
        } else {
            String::new()
        };
        format!("[{}{}]", shown.join(", "), more)
    }
    let body = match a {
        MetaArray::U8(v) => list(v, max_items),
        MetaArray::I8(v) => list(v, max_items),
        MetaArray::U16(v) => list(v, max_items),
        MetaArray::I16(v) => list(v, max_items),
        MetaArray::U32(v) => list(v, max_items),
        MetaArray::I32(v) => list(v, max_items),
        MetaArray::F32(v) => list(v, max_items),
        MetaArray::Bool(v) => list(v, max_items),
        MetaArray::String(v) => list(v, max_items),
        MetaArray::U64(v) => list(v, max_items),
        MetaArray::I64(v) => list(v, max_items),
        MetaArray::F64(v) => list(v, max_items),
        MetaArray::Array(v) => {
            let shown: Vec<String> = v
                .iter()
                .take(max_items)
                .map(|x| summarize_array(x, max_items))
                .collect();
            format!(
                "[{}{}]",
                shown.join(", "),
                if v.len() > max_items { ", …" } else { "" }
            )
        }
    };
    format!("{}[{}] {}", a.elem_type(), a.len(), body)
}
