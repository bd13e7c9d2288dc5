//! A bounded little-endian cursor over the file bytes.
//!
//! Every read checks the bytes left first and fails with `GgufError::Truncated` naming what was
//! being read; nothing here allocates more than the bytes it has already checked are present.

use super::error::GgufError;

/// Longest string (key, value or tensor name) accepted, as in ggml (1 GiB).
pub const MAX_STRING_LEN: u64 = 1 << 30;

/// Cursor over `buf` at byte `pos`.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Current byte offset.
    pub fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left after the cursor.
    pub fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    /// Take `n` bytes, or fail naming `what`.
    pub fn bytes(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        let truncated = || GgufError::Truncated {
            what,
            offset: self.pos as u64,
            needed: n,
            file_len: self.buf.len() as u64,
        };
        let n = usize::try_from(n).map_err(|_| truncated())?;
        let end = self.pos.checked_add(n).ok_or_else(truncated)?;
        let out = self.buf.get(self.pos..end).ok_or_else(truncated)?;
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let b = self.bytes(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }
    pub fn i8(&mut self, what: &'static str) -> Result<i8, GgufError> {
        Ok(i8::from_le_bytes(self.array(what)?))
    }
    pub fn u16(&mut self, what: &'static str) -> Result<u16, GgufError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub fn i16(&mut self, what: &'static str) -> Result<i16, GgufError> {
        Ok(i16::from_le_bytes(self.array(what)?))
    }
    pub fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub fn i32(&mut self, what: &'static str) -> Result<i32, GgufError> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    pub fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub fn i64(&mut self, what: &'static str) -> Result<i64, GgufError> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    pub fn f32(&mut self, what: &'static str) -> Result<f32, GgufError> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }
    pub fn f64(&mut self, what: &'static str) -> Result<f64, GgufError> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// The raw bytes of a GGUF string (u64 length + bytes), length checked against the limit
    /// and the bytes left before anything is taken.
    pub fn string_bytes(&mut self, what: &'static str) -> Result<&'a [u8], GgufError> {
        let offset = self.pos();
        let len = self.u64(what)?;
        if len > MAX_STRING_LEN {
            return Err(GgufError::StringTooLong {
                offset,
                len,
                max: MAX_STRING_LEN,
            });
        }
        if len > self.remaining() {
            return Err(GgufError::StringExceedsFile {
                offset,
                len,
                remaining: self.remaining(),
            });
        }
        self.bytes(len, what)
    }

    /// A GGUF string decoded as UTF-8.
    pub fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let offset = self.pos();
        let raw = self.string_bytes(what)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(GgufError::InvalidUtf8 {
                offset,
                valid_up_to: e.valid_up_to(),
            }),
        }
    }

    /// Fail with `CountExceedsFile` unless `count` entries of at least `min_bytes` each can fit.
    pub fn check_count(
        &self,
        what: &'static str,
        count: u64,
        min_bytes: u64,
    ) -> Result<(), GgufError> {
        let need = count.checked_mul(min_bytes);
        match need {
            Some(n) if n <= self.remaining() => Ok(()),
            _ => Err(GgufError::CountExceedsFile {
                what,
                count,
                min_bytes: need.unwrap_or(u64::MAX),
                remaining: self.remaining(),
                offset: self.pos(),
            }),
        }
    }
}
