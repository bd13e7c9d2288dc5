//! `GgufError`: one variant per class of malformed file, each naming the offending values.
//!
//! The malformed-file corpus (tests/gguf_malformed.rs) asserts the exact variant for every
//! class, so a new check gets a new variant rather than reusing a near one.

use super::value::ValueType;

/// Why a GGUF file was rejected, or why a metadata lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    // ── file access ─────────────────────────────────────────────────────────────────────────
    #[error("cannot open {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot map {path}: {source}")]
    Map {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("file is {file_len} bytes, shorter than the 24-byte GGUF header")]
    TooSmall { file_len: u64 },
    #[error("file ends at byte {file_len} while reading {what} at offset {offset} ({needed} bytes needed)")]
    Truncated {
        what: &'static str,
        offset: u64,
        needed: u64,
        file_len: u64,
    },

    // ── header ──────────────────────────────────────────────────────────────────────────────
    #[error("bad magic {found:02x?}: not a GGUF file (expected \"GGUF\")")]
    BadMagic { found: [u8; 4] },
    #[error("GGUF version {version} is not supported (flint reads versions 2 and 3)")]
    UnsupportedVersion { version: u32 },
    #[error("big-endian GGUF files are not supported (version field reads {raw:#010x})")]
    BigEndian { raw: u32 },
    #[error("tensor count {count} exceeds the limit {max}")]
    TooManyTensors { count: u64, max: u64 },
    #[error("metadata count {count} exceeds the limit {max}")]
    TooManyKeys { count: u64, max: u64 },
    #[error("{count} {what} need at least {min_bytes} bytes but only {remaining} remain at offset {offset}")]
    CountExceedsFile {
        what: &'static str,
        count: u64,
        min_bytes: u64,
        remaining: u64,
        offset: u64,
    },

    // ── strings and metadata ───────────────────────────────────────────────────────────────
    #[error("string at offset {offset} declares {len} bytes, over the limit {max}")]
    StringTooLong { offset: u64, len: u64, max: u64 },
    #[error("string at offset {offset} declares {len} bytes but only {remaining} remain")]
    StringExceedsFile {
        offset: u64,
        len: u64,
        remaining: u64,
    },
    #[error("string at offset {offset} is not valid UTF-8 (valid up to byte {valid_up_to})")]
    InvalidUtf8 { offset: u64, valid_up_to: usize },
    #[error("metadata key #{index} is empty")]
    EmptyKey { index: u64 },
    #[error("metadata key #{index} is {len} bytes, over the limit {max}")]
    KeyTooLong { index: u64, len: u64, max: u64 },
    #[error("metadata key '{key}' appears twice")]
    DuplicateKey { key: String },
    #[error("metadata key '{key}' has unknown value type {type_id}")]
    UnknownValueType { key: String, type_id: u32 },
    #[error("metadata key '{key}': bool byte {value} is neither 0 nor 1")]
    InvalidBool { key: String, value: u8 },
    #[error("metadata key '{key}': array of {len} elements exceeds the limit {max}")]
    ArrayTooLong { key: String, len: u64, max: u64 },
    #[error("metadata key '{key}': {len} array elements of at least {min_elem_bytes} bytes cannot fit in the {remaining} bytes left")]
    ArrayExceedsFile {
        key: String,
        len: u64,
        min_elem_bytes: u64,
        remaining: u64,
    },
    #[error("metadata key '{key}': arrays nested {depth} deep (at most 2 levels are allowed)")]
    NestedArrayTooDeep { key: String, depth: u32 },

    // ── general.alignment ──────────────────────────────────────────────────────────────────
    #[error("general.alignment must be u32, found {found}")]
    AlignmentType { found: ValueType },
    #[error("general.alignment {alignment} is not a non-zero power of two")]
    AlignmentNotPowerOfTwo { alignment: u64 },
    #[error("general.alignment {alignment} exceeds the limit {max}")]
    AlignmentTooLarge { alignment: u64, max: u64 },

    // ── tensor infos ───────────────────────────────────────────────────────────────────────
    #[error("tensor #{index} has an empty name")]
    EmptyTensorName { index: u64 },
    #[error("tensor name '{name}' is {len} bytes, over the limit {max}")]
    TensorNameTooLong { name: String, len: u64, max: u64 },
    #[error("tensor '{name}' appears twice")]
    DuplicateTensor { name: String },
    #[error("tensor '{name}' has {n_dims} dimensions (1 to {max} allowed)")]
    BadDimCount { name: String, n_dims: u32, max: u32 },
    #[error("tensor '{name}' dimension {axis} is zero")]
    ZeroDim { name: String, axis: usize },
    #[error("tensor '{name}' dimension {axis} is {value}, over the signed 64-bit range")]
    DimTooLarge {
        name: String,
        axis: usize,
        value: u64,
    },
    #[error("tensor '{name}' shape {shape:?}: element count overflows 64 bits")]
    ElementCountOverflow { name: String, shape: Vec<u64> },
    #[error("tensor '{name}' has unknown ggml type id {type_id}")]
    UnknownTensorType { name: String, type_id: u32 },
    #[error("tensor '{name}' has ggml type id {type_id} ({type_name}, from PrismML's llama.cpp fork), which flint does not support yet")]
    UnsupportedTensorType {
        name: String,
        type_id: u32,
        type_name: &'static str,
    },
    #[error("tensor '{name}' (type id 42, Q2_0) at data offset {offset}: its {extent}-byte extent fits neither layout: g64 (mainline) needs {g64_bytes} bytes, g128 (PrismML legacy) {g128_bytes}, with padding under the alignment {alignment}")]
    Q2_0LayoutFitsNeither {
        name: String,
        offset: u64,
        extent: u64,
        g64_bytes: u64,
        g128_bytes: String,
        alignment: u64,
    },
    #[error("type id 42 (Q2_0) tensors disagree on the layout: '{first}' fits only {first_layout} ({first_bytes} bytes), '{other}' only {other_layout} ({other_bytes} bytes)")]
    Q2_0LayoutsDisagree {
        first: String,
        first_layout: &'static str,
        first_bytes: u64,
        other: String,
        other_layout: &'static str,
        other_bytes: u64,
    },
    #[error("tensor '{name}' (type id 42, Q2_0): cannot tell g64 (mainline, {g64_bytes} bytes) from g128 (PrismML legacy, {g128_bytes}): {why}, and no other id-42 tensor decides")]
    Q2_0LayoutUndecidable {
        name: String,
        g64_bytes: u64,
        g128_bytes: String,
        why: String,
    },
    #[error("tensor '{name}': first dimension {ne0} is not a multiple of the {ty} block size {block_size}")]
    NotBlockMultiple {
        name: String,
        ty: super::GgmlType,
        ne0: u64,
        block_size: u64,
    },
    #[error("tensor '{name}' shape {shape:?} of {ty}: byte size overflows 64 bits")]
    ByteSizeOverflow {
        name: String,
        ty: super::GgmlType,
        shape: Vec<u64>,
    },
    #[error("tensor '{name}' has {elements} elements and {bytes} bytes: over the 32-bit index range of GPU shaders")]
    TensorTooLargeForShaders {
        name: String,
        elements: u64,
        bytes: u64,
    },
    #[error("tensor '{name}' offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedOffset {
        name: String,
        offset: u64,
        alignment: u64,
    },
    #[error("tensor '{name}' offset {offset} is not the expected {expected} (tensors must be contiguous and in order)")]
    UnexpectedOffset {
        name: String,
        offset: u64,
        expected: u64,
    },
    #[error("tensor data section size overflows 64 bits at tensor '{name}'")]
    DataSizeOverflow { name: String },
    #[error("tensor data needs {needed} bytes from offset {data_offset} but the file is {file_len} bytes")]
    DataExceedsFile {
        data_offset: u64,
        needed: u64,
        file_len: u64,
    },

    // ── tokenizer metadata ─────────────────────────────────────────────────────────────────
    #[error("tokenizer.ggml.tokens must be an array of strings, found {found}")]
    TokensType { found: String },
    #[error("tokenizer.ggml.scores must be an array of f32, found {found}")]
    ScoresType { found: String },
    #[error("tokenizer.ggml.token_type must be an array of i32, found {found}")]
    TokenTypesType { found: String },
    #[error("tokenizer.ggml.merges must be an array of strings, found {found}")]
    MergesType { found: String },
    #[error("tokenizer array '{key}' has {len} entries but there are {n_tokens} tokens")]
    TokenArrayLength {
        key: &'static str,
        len: u64,
        n_tokens: u64,
    },
    #[error("vocabulary of {n_tokens} tokens does not match {what} = {value}")]
    VocabSizeMismatch {
        n_tokens: u64,
        what: String,
        value: u64,
    },
    #[error("{key} = {id} is out of range for a vocabulary of {n_tokens} tokens")]
    SpecialTokenOutOfRange { key: String, id: i64, n_tokens: u64 },
    #[error("byte token #{index} is {text:?}, not exactly <0xHH>")]
    BadByteToken { index: u64, text: String },

    // ── typed metadata access ──────────────────────────────────────────────────────────────
    #[error("metadata key '{key}' is missing")]
    MissingKey { key: String },
    #[error("metadata key '{key}': expected {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("metadata key '{key}': value {value} does not fit in {expected}")]
    ValueOutOfRange {
        key: String,
        expected: &'static str,
        value: String,
    },
    #[error("tensor '{tensor}' has no data: this is a shape-only file (metadata and shapes, no weights)")]
    ShapeOnly { tensor: String },
    #[error("split GGUF {path}: {reason}")]
    Split { path: String, reason: String },
    #[error("tensor '{name}' not found")]
    MissingTensor { name: String },

    // ── writer ─────────────────────────────────────────────────────────────────────────────
    #[error("writer: {message}")]
    Write { message: String },
}
