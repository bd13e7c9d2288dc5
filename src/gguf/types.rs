//! ggml tensor types: the id stored in GGUF tensor infos, the block size (elements per block) and
//! the bytes per block, as llama.cpp's `ggml.c` type traits define them.
//!
//! An id that llama.cpp does not know (including the removed ids 4, 5, 31–33, 36–38) is an error
//! naming the id, never a panic.

use std::fmt;

/// One ggml tensor type. Discriminants are the on-disk ids.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
    NVFP4 = 40,
    /// 1-bit: `{f16 d; u8 qs[16]}` per 128 elements, `±d` by bit.
    Q1_0 = 41,
    /// 2-bit ternary-plus: `{f16 d; u8 qs[16]}` per 64 elements, `(q − 1)·d` (mainline ggml).
    Q2_0 = 42,
    /// PrismML's 128-element 2-bit type: `{f16 d; u8 qs[32]}`, the codec of [`GgmlType::Q2_0`].
    PQ2_0 = 142,
    /// Id 42 in PrismML's legacy files: the layout of [`GgmlType::PQ2_0`] under Q2_0's id. No
    /// file names it; the parser chooses it per tensor from the tensor's extent (its id is 42).
    Q2_0_G128 = 0x1_0000 + 42,
}

/// Every known type, in id order.
pub const ALL_TYPES: [GgmlType; 37] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ3_XXS,
    GgmlType::IQ1_S,
    GgmlType::IQ4_NL,
    GgmlType::IQ3_S,
    GgmlType::IQ2_S,
    GgmlType::IQ4_XS,
    GgmlType::I8,
    GgmlType::I16,
    GgmlType::I32,
    GgmlType::I64,
    GgmlType::F64,
    GgmlType::IQ1_M,
    GgmlType::BF16,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
    GgmlType::Q1_0,
    GgmlType::Q2_0,
    GgmlType::PQ2_0,
    GgmlType::Q2_0_G128,
];

/// Elements per block of the k-quants ("super-block").
pub const QK_K: usize = 256;

impl GgmlType {
    /// The type for an on-disk id, or `None` when neither llama.cpp nor PrismML's fork knows
    /// it. Id 42 reads as mainline [`GgmlType::Q2_0`]; the parser turns it into
    /// [`GgmlType::Q2_0_G128`] where the tensor's extent says so.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        ALL_TYPES
            .iter()
            .copied()
            .find(|t| *t as u32 == id && *t != GgmlType::Q2_0_G128)
    }

    /// The name of a type id that PrismML's llama.cpp fork defines and flint does not support
    /// yet (143: PTQ1_0), so that the error can say so rather than call the id unknown.
    pub fn unsupported_prism_type(id: u32) -> Option<&'static str> {
        match id {
            143 => Some("PTQ1_0"),
            _ => None,
        }
    }

    /// The on-disk id.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::Q2_0_G128 => 42,
            t => t as u32,
        }
    }

    /// The alternative layout a file may mean by this type's id (id 42: the legacy
    /// 128-element Q2_0 of PrismML's files), if any.
    pub fn alternative_layout(self) -> Option<GgmlType> {
        match self {
            GgmlType::Q2_0 => Some(GgmlType::Q2_0_G128),
            GgmlType::Q2_0_G128 => Some(GgmlType::Q2_0),
            _ => None,
        }
    }

    /// A note on the layout where one id has two (`info` prints it), else `None`.
    pub fn layout_note(self) -> Option<&'static str> {
        match self {
            GgmlType::Q2_0 => Some("g64 (mainline)"),
            GgmlType::Q2_0_G128 => Some("g128 (PrismML legacy)"),
            _ => None,
        }
    }

    /// `(elements per block, bytes per block)`.
    pub fn block_layout(self) -> (usize, usize) {
        use GgmlType::*;
        match self {
            F32 => (1, 4),
            F16 => (1, 2),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            // ggml's block_q8_1 holds d and s as two halves: 2 + 2 + 32.
            Q8_1 => (32, 36),
            Q2_K => (QK_K, 84),
            Q3_K => (QK_K, 110),
            Q4_K => (QK_K, 144),
            Q5_K => (QK_K, 176),
            Q6_K => (QK_K, 210),
            Q8_K => (QK_K, 292),
            IQ2_XXS => (QK_K, 66),
            IQ2_XS => (QK_K, 74),
            IQ3_XXS => (QK_K, 98),
            IQ1_S => (QK_K, 50),
            IQ4_NL => (32, 18),
            IQ3_S => (QK_K, 110),
            IQ2_S => (QK_K, 82),
            IQ4_XS => (QK_K, 136),
            I8 => (1, 1),
            I16 => (1, 2),
            I32 => (1, 4),
            I64 => (1, 8),
            F64 => (1, 8),
            IQ1_M => (QK_K, 56),
            BF16 => (1, 2),
            TQ1_0 => (QK_K, 54),
            TQ2_0 => (QK_K, 66),
            MXFP4 => (32, 17),
            NVFP4 => (64, 36),
            Q1_0 => (128, 18),
            Q2_0 => (64, 18),
            PQ2_0 | Q2_0_G128 => (128, 34),
        }
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        self.block_layout().0
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        self.block_layout().1
    }

    /// True for block-quantized types (block size > 1).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes of a row of `n_elements` elements, or `None` when `n_elements` is not a multiple of
    /// the block size or the product overflows.
    pub fn row_bytes(self, n_elements: u64) -> Option<u64> {
        let (bs, ts) = self.block_layout();
        if !n_elements.is_multiple_of(bs as u64) {
            return None;
        }
        (n_elements / bs as u64).checked_mul(ts as u64)
    }

    /// The name as llama.cpp spells it (`Q4_1`, `F32`, …).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
            NVFP4 => "NVFP4",
            Q1_0 => "Q1_0",
            Q2_0 | Q2_0_G128 => "Q2_0",
            PQ2_0 => "PQ2_0",
        }
    }

    /// Parse a llama.cpp type name (case-insensitive): `q4_1`, `F16`, …
    pub fn from_name(name: &str) -> Option<GgmlType> {
        ALL_TYPES
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name) && *t != GgmlType::Q2_0_G128)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_unknown_ids_are_none() {
        for t in ALL_TYPES {
            // The legacy Q2_0 layout shares Q2_0's id and name.
            let want = if t == GgmlType::Q2_0_G128 {
                GgmlType::Q2_0
            } else {
                t
            };
            assert_eq!(GgmlType::from_id(t.id()), Some(want));
            assert_eq!(GgmlType::from_name(t.name()), Some(want));
        }
        assert_eq!(GgmlType::Q2_0_G128.id(), 42);
        for removed in [4, 5, 31, 32, 33, 36, 37, 38, 143, u32::MAX] {
            assert_eq!(GgmlType::from_id(removed), None);
        }
    }

    #[test]
    fn row_bytes_checks_block_multiples() {
        assert_eq!(GgmlType::Q4_1.row_bytes(576), Some(18 * 20));
        assert_eq!(GgmlType::Q4_1.row_bytes(577), None);
        assert_eq!(GgmlType::F32.row_bytes(3), Some(12));
        assert_eq!(GgmlType::F64.row_bytes(u64::MAX), None);
    }
}
