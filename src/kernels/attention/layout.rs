//! The GPU layout of a KV cache buffer (K or V of one layer), its exact size, and the conversion
//! between ggml blocks (what the CPU quantizer in `crate::reference::attention` produces and
//! `crate::quant::dequantize` reads) and GPU rows. The WGSL side is `shaders/common/kv_layout.wgsl`.
//!
//! A buffer holds `n_ctx * n_kv_heads` rows; row `(pos, head)` starts at byte
//! `(pos * n_kv_heads + head) * row_bytes`. One row = one head of one token, `head_dim` values
//! (`head_dim` a multiple of 32, at most 256), in u32 words:
//! - F16: `head_dim / 2` words, two f16 per word (low half first).
//! - Q8_0: the 32 i8 quants of each block in order (`head_dim / 4` words), then the f16 scales of
//!   the blocks, two per word (`ceil(head_dim / 64)` words).
//! - Q4_0: the 16 `qs` bytes of each ggml block in order (`head_dim / 8` words), then the scales
//!   as for Q8_0.
//!
//! Scales live apart from the quants so every quant word is aligned; for `head_dim % 64 == 0` a
//! row is exactly ggml's size (2, 34/32, 18/32 bytes per value).

use crate::gguf::GgmlType;
use crate::gpu::GpuError;

/// Element type of a KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvType {
    F16,
    Q8_0,
    Q4_0,
}

/// Largest supported head dimension (the attention kernels' workgroup tiles).
pub const MAX_HEAD_DIM: u32 = 256;

fn bad(what: &str, expected: &str, actual: impl ToString) -> GpuError {
    GpuError::BadInput {
        what: what.to_string(),
        expected: expected.to_string(),
        actual: actual.to_string(),
    }
}

impl KvType {
    pub const ALL: [KvType; 3] = [KvType::F16, KvType::Q8_0, KvType::Q4_0];

    pub fn ggml_type(self) -> GgmlType {
        match self {
            KvType::F16 => GgmlType::F16,
            KvType::Q8_0 => GgmlType::Q8_0,
            KvType::Q4_0 => GgmlType::Q4_0,
        }
    }

    /// The cache type for a ggml type (`--cache-type-k q8_0` and friends).
    pub fn from_ggml(ty: GgmlType) -> Result<KvType, GpuError> {
        match ty {
            GgmlType::F16 => Ok(KvType::F16),
            GgmlType::Q8_0 => Ok(KvType::Q8_0),
            GgmlType::Q4_0 => Ok(KvType::Q4_0),
            other => Err(GpuError::UnsupportedType {
                op: "KV cache".to_string(),
                ty: other,
            }),
        }
    }

    /// The WGSL define selecting this type (`common/kv_layout.wgsl`).
    pub fn define(self) -> &'static str {
        match self {
            KvType::F16 => "KV_F16",
            KvType::Q8_0 => "KV_Q8_0",
            KvType::Q4_0 => "KV_Q4_0",
        }
    }

    /// The defines of a variant reading caches of this type: [`KvType::define`], plus
    /// `USE_F16` when `use_f16` and the type is [`KvType::F16`] (caches bound as
    /// `array<vec2<f16>>`). Also returns whether `USE_F16` is set (the variant needs f16).
    pub(super) fn cache_defines(self, use_f16: bool) -> (Vec<(&'static str, String)>, bool) {
        let use_f16 = use_f16 && self == KvType::F16;
        let mut defines = vec![(self.define(), String::new())];
        if use_f16 {
            defines.push(("USE_F16", String::new()));
        }
        (defines, use_f16)
    }

    /// Values per quant word.
    pub fn word_dims(self) -> u32 {
        match self {
            KvType::F16 => 2,
            KvType::Q8_0 => 4,
            KvType::Q4_0 => 8,
        }
    }

    /// `Ok` when the kernels support `head_dim` (a multiple of 32 in 32..=256).
    pub fn check_head_dim(head_dim: u32) -> Result<(), GpuError> {
        if head_dim == 0 || !head_dim.is_multiple_of(32) || head_dim > MAX_HEAD_DIM {
            return Err(bad("KV head_dim", "a multiple of 32 in 32..=256", head_dim));
        }
        Ok(())
    }

    /// Quant words of one row (f16 words for F16).
    pub fn quant_words(self, head_dim: u32) -> u32 {
        head_dim / self.word_dims()
    }

    /// Scale words of one row (0 for F16).
    pub fn scale_words(self, head_dim: u32) -> u32 {
        match self {
            KvType::F16 => 0,
            KvType::Q8_0 | KvType::Q4_0 => (head_dim / 32).div_ceil(2),
        }
    }

    /// Words of one row `(pos, head)`.
    pub fn row_words(self, head_dim: u32) -> u32 {
        self.quant_words(head_dim) + self.scale_words(head_dim)
    }

    /// Bytes of one row `(pos, head)`.
    pub fn row_bytes(self, head_dim: u32) -> u64 {
        4 * u64::from(self.row_words(head_dim))
    }

    /// Bytes of a ggml row of `head_dim` values of this type (the CPU quantizer's output).
    fn ggml_row_bytes(self, head_dim: u32) -> usize {
        let blocks = head_dim as usize / 32;
        match self {
            KvType::F16 => 2 * head_dim as usize,
            KvType::Q8_0 => 34 * blocks,
            KvType::Q4_0 => 18 * blocks,
        }
    }

    /// ggml blocks of one row (`[ggml_row_bytes]`) → the GPU row (`[row_bytes]`).
    pub fn pack_row(self, head_dim: u32, ggml: &[u8]) -> Result<Vec<u8>, GpuError> {
        Self::check_head_dim(head_dim)?;
        let want = self.ggml_row_bytes(head_dim);
        if ggml.len() != want {
            return Err(bad("ggml KV row", &format!("{want} bytes"), ggml.len()));
        }
        let block = match self {
            KvType::F16 => return Ok(ggml.to_vec()),
            KvType::Q8_0 => 34,
            KvType::Q4_0 => 18,
        };
        let mut quants = Vec::with_capacity(self.row_bytes(head_dim) as usize);
        let mut scales = Vec::new();
        for b in ggml.chunks_exact(block) {
            let (d, qs) = b.split_at(2);
            scales.extend_from_slice(d);
            quants.extend_from_slice(qs);
        }
        quants.extend(scales);
        quants.resize(self.row_bytes(head_dim) as usize, 0);
        Ok(quants)
    }

    /// A GPU row (`[row_bytes]`) → ggml blocks (`[ggml_row_bytes]`), the inverse of
    /// [`KvType::pack_row`] (padding dropped).
    pub fn unpack_row(self, head_dim: u32, row: &[u8]) -> Result<Vec<u8>, GpuError> {
        Self::check_head_dim(head_dim)?;
        let want = self.row_bytes(head_dim) as usize;
        if row.len() != want {
            return Err(bad("GPU KV row", &format!("{want} bytes"), row.len()));
        }
        let qbytes = 4 * self.quant_words(head_dim) as usize;
        let (quants, scales) = row.split_at(qbytes);
        let per_block = match self {
            KvType::F16 => return Ok(row.to_vec()),
            KvType::Q8_0 => 32,
            KvType::Q4_0 => 16,
        };
        let mut out = Vec::with_capacity(self.ggml_row_bytes(head_dim));
        for (qs, d) in quants.chunks_exact(per_block).zip(scales.chunks_exact(2)) {
            out.extend_from_slice(d);
            out.extend_from_slice(qs);
        }
        Ok(out)
    }
}

/// Shape of one KV cache buffer (K or V of one layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    pub ty: KvType,
    /// Capacity in tokens (positions `0..n_ctx`; a ring: rows, position p in row `p % n_ctx`).
    pub n_ctx: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    /// A ring (a sliding-window layer's cache holding only its last `n_ctx` positions):
    /// positions stay absolute, the kernels read and write row `p % n_ctx` (`KV_RING`
    /// override of `common/kv_layout.wgsl`).
    pub ring: bool,
}

impl KvLayout {
    /// A checked layout (head_dim supported, counts non-zero, size fits u32 word indices).
    pub fn new(ty: KvType, n_ctx: u32, n_kv_heads: u32, head_dim: u32) -> Result<Self, GpuError> {
        KvType::check_head_dim(head_dim)?;
        if n_ctx == 0 || n_kv_heads == 0 {
            return Err(bad(
                "KV layout",
                "n_ctx > 0 and n_kv_heads > 0",
                format!("n_ctx {n_ctx}, n_kv_heads {n_kv_heads}"),
            ));
        }
        let layout = KvLayout {
            ty,
            n_ctx,
            n_kv_heads,
            head_dim,
            ring: false,
        };
        let words = layout.buffer_bytes() / 4;
        if words > u64::from(u32::MAX) {
            return Err(bad("KV buffer", "fewer than 2^32 words", words));
        }
        Ok(layout)
    }

    /// The same layout as a ring of its `n_ctx` rows.
    pub fn as_ring(self) -> Self {
        KvLayout { ring: true, ..self }
    }

    /// `variant` reading or writing caches of this layout: a ring sets the `KV_RING` override
    /// to its rows.
    pub fn variant(&self, mut variant: crate::gpu::ShaderVariant) -> crate::gpu::ShaderVariant {
        if self.ring {
            variant.overrides.push(("KV_RING", f64::from(self.n_ctx)));
        }
        variant
    }

    /// Words of one row `(pos, head)`.
    pub fn row_words(&self) -> u32 {
        self.ty.row_words(self.head_dim)
    }

    /// Bytes of this buffer: `n_ctx * n_kv_heads * row_bytes`.
    pub fn buffer_bytes(&self) -> u64 {
        u64::from(self.n_ctx) * u64::from(self.n_kv_heads) * self.ty.row_bytes(self.head_dim)
    }

    /// Byte offset of row `(pos, head)`.
    pub fn row_offset(&self, pos: u32, head: u32) -> u64 {
        (u64::from(pos) * u64::from(self.n_kv_heads) + u64::from(head))
            * self.ty.row_bytes(self.head_dim)
    }
}

/// Bytes per token per layer, K and V together: `2 * n_kv_heads * row_bytes(ty, head_dim)`.
pub fn kv_bytes_per_token(ty: KvType, n_kv_heads: u32, head_dim: u32) -> u64 {
    2 * u64::from(n_kv_heads) * ty.row_bytes(head_dim)
}

/// Bytes of one layer's K and V caches for `n_ctx` tokens (what the memory planner reserves).
pub fn kv_bytes(ty: KvType, n_ctx: u32, n_kv_heads: u32, head_dim: u32) -> u64 {
    u64::from(n_ctx) * kv_bytes_per_token(ty, n_kv_heads, head_dim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_ggml_for_multiples_of_64() {
        assert_eq!(KvType::F16.row_bytes(64), 128);
        assert_eq!(KvType::Q8_0.row_bytes(64), 68);
        assert_eq!(KvType::Q4_0.row_bytes(128), 72);
        assert_eq!(KvType::Q8_0.row_bytes(96), 104); // 3 blocks: one padded scale half
                                                     // SmolLM2: 3 KV heads × 64, 2048 tokens, f16: 2 × 3 × 128 B per token.
        assert_eq!(kv_bytes(KvType::F16, 2048, 3, 64), 2048 * 768);
    }

    #[test]
    fn pack_and_unpack_are_inverse() {
        for ty in KvType::ALL {
            for hd in [32u32, 64, 96, 128] {
                let n = ty.ggml_row_bytes(hd);
                let ggml: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
                let row = ty.pack_row(hd, &ggml).unwrap();
                assert_eq!(row.len() as u64, ty.row_bytes(hd));
                assert_eq!(ty.unpack_row(hd, &row).unwrap(), ggml, "{ty:?} {hd}");
            }
        }
        assert!(KvType::F16.pack_row(48, &[0; 96]).is_err());
    }
}
