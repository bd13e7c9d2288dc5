//! The metadata table: keys in file order with typed accessors.
//!
//! Accessor errors name the key, the type asked for and the type found. Integer accessors accept
//! any integer type whose value fits (writers differ: `context_length` is u32 in one file and
//! u64 in another), and fail with `ValueOutOfRange` when it does not.

use std::collections::HashMap;

use super::error::GgufError;
use super::value::{MetaArray, MetaValue};

/// Metadata key/value pairs in file order, with an index by key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, MetaValue)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    pub fn new() -> Self {
        Self::default()
    }

    /// Insert a key; returns `DuplicateKey` if it is present.
    pub fn insert(&mut self, key: String, value: MetaValue) -> Result<(), GgufError> {
        if self.index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key });
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(())
    }

    /// Set a key, replacing any previous value.
    pub fn set(&mut self, key: &str, value: MetaValue) {
        match self.index.get(key) {
            Some(&i) => {
                if let Some(e) = self.entries.get_mut(i) {
                    e.1 = value;
                }
            }
            None => {
                self.index.insert(key.to_string(), self.entries.len());
                self.entries.push((key.to_string(), value));
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.index
            .get(key)
            .and_then(|&i| self.entries.get(i))
            .map(|e| &e.1)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    fn require(&self, key: &str) -> Result<&MetaValue, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })
    }

    fn integer(&self, key: &str, expected: &'static str) -> Result<i128, GgufError> {
        let v = self.require(key)?;
        v.as_i128().ok_or_else(|| wrong(key, expected, v))
    }

    /// An unsigned integer that fits in u32.
    pub fn u32(&self, key: &str) -> Result<u32, GgufError> {
        let i = self.integer(key, "u32")?;
        u32::try_from(i).map_err(|_| out_of_range(key, "u32", i))
    }

    /// An unsigned integer that fits in u64.
    pub fn u64(&self, key: &str) -> Result<u64, GgufError> {
        let i = self.integer(key, "u64")?;
        u64::try_from(i).map_err(|_| out_of_range(key, "u64", i))
    }

    /// A signed integer that fits in i64.
    pub fn i64(&self, key: &str) -> Result<i64, GgufError> {
        let i = self.integer(key, "i64")?;
        i64::try_from(i).map_err(|_| out_of_range(key, "i64", i))
    }

    /// An f32 (an f64 is narrowed; integers are not accepted).
    pub fn f32(&self, key: &str) -> Result<f32, GgufError> {
        match self.require(key)? {
            MetaValue::F32(x) => Ok(*x),
            MetaValue::F64(x) => Ok(*x as f32),
            v => Err(wrong(key, "f32", v)),
        }
    }

    pub fn bool(&self, key: &str) -> Result<bool, GgufError> {
        match self.require(key)? {
            MetaValue::Bool(b) => Ok(*b),
            v => Err(wrong(key, "bool", v)),
        }
    }

    pub fn str(&self, key: &str) -> Result<&str, GgufError> {
        match self.require(key)? {
            MetaValue::String(s) => Ok(s),
            v => Err(wrong(key, "string", v)),
        }
    }

    pub fn array(&self, key: &str) -> Result<&MetaArray, GgufError> {
        match self.require(key)? {
            MetaValue::Array(a) => Ok(a),
            v => Err(wrong(key, "array", v)),
        }
    }

    pub fn str_array(&self, key: &str) -> Result<&[String], GgufError> {
        match self.require(key)? {
            MetaValue::Array(MetaArray::String(v)) => Ok(v),
            v => Err(wrong(key, "array[string]", v)),
        }
    }

    pub fn f32_array(&self, key: &str) -> Result<&[f32], GgufError> {
        match self.require(key)? {
            MetaValue::Array(MetaArray::F32(v)) => Ok(v),
            v => Err(wrong(key, "array[f32]", v)),
        }
    }

    pub fn i32_array(&self, key: &str) -> Result<&[i32], GgufError> {
        match self.require(key)? {
            MetaValue::Array(MetaArray::I32(v)) => Ok(v),
            v => Err(wrong(key, "array[i32]", v)),
        }
    }

    /// `Ok(None)` when the key is absent, else the accessor's result.
    pub fn opt<'a, T>(
        &'a self,
        key: &str,
        get: impl FnOnce(&'a Self, &str) -> Result<T, GgufError>,
    ) -> Result<Option<T>, GgufError> {
        if self.contains(key) {
            get(self, key).map(Some)
        } else {
            Ok(None)
        }
    }

    /// `general.architecture`, the prefix of the model's own keys.
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.str("general.architecture")
    }
}

fn wrong(key: &str, expected: &'static str, found: &MetaValue) -> GgufError {
    GgufError::WrongType {
        key: key.to_string(),
        expected,
        found: found.type_name(),
    }
}

fn out_of_range(key: &str, expected: &'static str, value: i128) -> GgufError {
    GgufError::ValueOutOfRange {
        key: key.to_string(),
        expected,
        value: value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_access_names_key_and_types() {
        let mut m = Metadata::new();
        m.insert("a".into(), MetaValue::U64(7)).unwrap();
        m.insert("neg".into(), MetaValue::I32(-1)).unwrap();
        m.insert("s".into(), MetaValue::String("x".into())).unwrap();
        assert_eq!(m.u32("a").unwrap(), 7);
        assert!(matches!(
            m.u32("neg"),
            Err(GgufError::ValueOutOfRange { .. })
        ));
        match m.f32("s") {
            Err(GgufError::WrongType {
                key,
                expected,
                found,
            }) => {
                assert_eq!(
                    (key.as_str(), expected, found.as_str()),
                    ("s", "f32", "string")
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(m.str("zz"), Err(GgufError::MissingKey { .. })));
        assert!(matches!(
            m.insert("a".into(), MetaValue::U8(1)),
            Err(GgufError::DuplicateKey { .. })
        ));
        assert_eq!(m.opt("zz", Metadata::u32).unwrap(), None);
    }
}
