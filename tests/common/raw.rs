//! A raw GGUF byte builder with no checks, for handcrafting malformed files: every count,
//! length, type id and offset can be set to anything.

/// Little-endian byte sink.
#[derive(Default, Clone)]
pub struct Raw {
    pub buf: Vec<u8>,
}

impl Raw {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub fn f32(&mut self, v: f32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    /// A GGUF string: u64 length then bytes.
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// Header: magic, version, tensor count, kv count.
    pub fn header(&mut self, version: u32, n_tensors: u64, n_kv: u64) -> &mut Self {
        self.bytes(b"GGUF").u32(version).u64(n_tensors).u64(n_kv)
    }
    /// A key with a u32 value.
    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }
    /// A key with a string value.
    pub fn kv_str(&mut self, key: &str, v: &str) -> &mut Self {
        self.str(key).u32(8).str(v)
    }
    /// A tensor info.
    pub fn tensor(&mut self, name: &str, shape: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(shape.len() as u32);
        for d in shape {
            self.u64(*d);
        }
        self.u32(ty).u64(offset)
    }
    /// Zero padding up to a multiple of `align`.
    pub fn pad(&mut self, align: usize) -> &mut Self {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
        self
    }
    /// `n` zero bytes.
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.buf.resize(self.buf.len() + n, 0);
        self
    }
    pub fn build(&self) -> Vec<u8> {
        self.buf.clone()
    }
}
