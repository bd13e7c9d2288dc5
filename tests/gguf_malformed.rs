//! Reliability checklist A1–A2: one handcrafted file per malformed class, each rejected with its
//! own `GgufError` variant, never a panic, and never allocating more than the file length plus
//! 16 MiB while parsing.

mod common;

use common::alloc::{peak_during, Counting};
use common::raw::Raw;
use flint::gguf::{GgmlType, Gguf, GgufError as E, GgufWriter, MetaArray, MetaValue};
use flint::tokenizer::Tokenizer;

#[global_allocator]
static ALLOC: Counting = Counting;

/// Parse `bytes`, require an error matching `pat`, and check the allocation bound (A2).
macro_rules! rejects {
    ($name:ident, $bytes:expr, $pat:pat) => {
        #[test]
        fn $name() {
            let bytes: Vec<u8> = $bytes;
            let (res, peak) = peak_during(|| Gguf::parse(&bytes));
            match res {
                Err($pat) => {}
                other => panic!("expected {}, got {:?}", stringify!($pat), other),
            }
            let bound = bytes.len() + (16 << 20);
            assert!(peak <= bound, "parse allocated {peak} bytes, bound {bound}");
            // The message names something and is one line.
            let msg = res.unwrap_err().to_string();
            assert!(!msg.is_empty() && !msg.contains('\n'), "{msg}");
        }
    };
}

/// Header with one kv `key: u32 = v`, and nothing else.
fn one_kv(key: &str, ty: u32, value: &[u8]) -> Vec<u8> {
    let mut r = Raw::new();
    r.header(3, 0, 1).str(key).u32(ty).bytes(value);
    r.zeros(8).build()
}

/// Header with `general.alignment` (if any) and the given tensor infos, padded, plus `data` bytes.
fn with_tensors(tensors: &[(&str, &[u64], u32, u64)], data: usize) -> Vec<u8> {
    let mut r = Raw::new();
    r.header(3, tensors.len() as u64, 0);
    for (name, shape, ty, off) in tensors {
        r.tensor(name, shape, *ty, *off);
    }
    r.pad(32).zeros(data).build()
}

/// A file written by our writer after `edit` sets tokenizer keys.
fn vocab_file(edit: impl FnOnce(&mut GgufWriter)) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("llama".into()));
    let tokens: Vec<String> = ["<unk>", "<s>", "</s>", "<0x0A>", "a"]
        .map(String::from)
        .to_vec();
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(tokens)),
    );
    w.set(
        "tokenizer.ggml.scores",
        MetaValue::Array(MetaArray::F32(vec![0.0; 5])),
    );
    w.set(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(vec![2, 3, 3, 6, 1])),
    );
    edit(&mut w);
    w.to_bytes().unwrap()
}

const F32: u32 = 0;
const Q4_0: u32 = 2;
const F64: u32 = 28;

// ── header ──────────────────────────────────────────────────────────────────────────────────
rejects!(empty_file, vec![], E::TooSmall { file_len: 0 });
rejects!(short_header, b"GGUF\x03\0\0\0".to_vec(), E::TooSmall { .. });
rejects!(
    bad_magic,
    {
        let mut r = Raw::new();
        r.bytes(b"GGML").u32(3).u64(0).u64(0);
        r.build()
    },
    E::BadMagic { .. }
);
rejects!(
    version_0,
    Raw::new().header(0, 0, 0).build(),
    E::UnsupportedVersion { version: 0 }
);
rejects!(
    version_1,
    Raw::new().header(1, 0, 0).build(),
    E::UnsupportedVersion { version: 1 }
);
rejects!(
    version_future,
    Raw::new().header(4, 0, 0).build(),
    E::UnsupportedVersion { version: 4 }
);
rejects!(
    big_endian,
    Raw::new().header(0x0300_0000, 0, 0).build(),
    E::BigEndian { .. }
);
rejects!(
    n_tensors_minus_one,
    Raw::new().header(3, u64::MAX, 0).build(),
    E::TooManyTensors { .. }
);
rejects!(
    n_kv_minus_one,
    Raw::new().header(3, 0, u64::MAX).build(),
    E::TooManyKeys { .. }
);
rejects!(
    n_kv_exceeds_file,
    Raw::new().header(3, 0, 1000).zeros(64).build(),
    E::CountExceedsFile { .. }
);
rejects!(
    n_tensors_exceeds_file,
    Raw::new().header(3, 1000, 0).zeros(64).build(),
    E::CountExceedsFile { .. }
);

// ── keys and values ─────────────────────────────────────────────────────────────────────────
rejects!(
    key_length_minus_one,
    {
        let mut r = Raw::new();
        r.header(3, 0, 1).u64(u64::MAX).zeros(16);
        r.build()
    },
    E::StringTooLong { .. }
);
rejects!(
    key_length_exceeds_file,
    {
        let mut r = Raw::new();
        r.header(3, 0, 1).u64(1000).zeros(16);
        r.build()
    },
    E::StringExceedsFile { .. }
);
rejects!(
    empty_key,
    one_kv("", 4, &1u32.to_le_bytes()),
    E::EmptyKey { index: 0 }
);
rejects!(
    key_too_long,
    one_kv(&"k".repeat(70_000), 4, &1u32.to_le_bytes()),
    E::KeyTooLong { .. }
);
rejects!(
    key_not_utf8,
    {
        let mut r = Raw::new();
        r.header(3, 0, 1).u64(2).bytes(&[0xff, 0xfe]).u32(4).u32(1);
        r.build()
    },
    E::InvalidUtf8 { .. }
);
rejects!(
    duplicate_key,
    {
        let mut r = Raw::new();
        r.header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
        r.build()
    },
    E::DuplicateKey { .. }
);
rejects!(
    bad_value_type,
    one_kv("a", 13, &[0; 8]),
    E::UnknownValueType { type_id: 13, .. }
);
rejects!(
    bad_array_elem_type,
    one_kv(
        "a",
        9,
        &[&99u32.to_le_bytes()[..], &1u64.to_le_bytes()].concat()
    ),
    E::UnknownValueType { type_id: 99, .. }
);
rejects!(
    bool_not_0_or_1,
    one_kv("a", 7, &[2]),
    E::InvalidBool { value: 2, .. }
);
rejects!(
    value_truncated,
    {
        let mut r = Raw::new();
        r.header(3, 0, 1).str("a").u32(10).bytes(&[1, 2, 3]);
        r.build()
    },
    E::Truncated { .. }
);
rejects!(
    string_value_too_long,
    one_kv("a", 8, &(u64::MAX - 1).to_le_bytes()),
    E::StringTooLong { .. }
);
rejects!(
    array_too_long,
    one_kv(
        "a",
        9,
        &[&0u32.to_le_bytes()[..], &((1u64 << 30) + 1).to_le_bytes()].concat()
    ),
    E::ArrayTooLong { .. }
);
rejects!(
    array_exceeds_file,
    one_kv(
        "a",
        9,
        &[&4u32.to_le_bytes()[..], &1_000_000u64.to_le_bytes()].concat()
    ),
    E::ArrayExceedsFile { .. }
);
rejects!(
    string_array_exceeds_file,
    one_kv(
        "a",
        9,
        &[&8u32.to_le_bytes()[..], &100_000u64.to_le_bytes()].concat()
    ),
    E::ArrayExceedsFile { .. }
);
rejects!(
    array_nested_too_deep,
    {
        // array[array[array[u8]]]
        let mut v = Vec::new();
        v.extend_from_slice(&9u32.to_le_bytes());
        v.extend_from_slice(&1u64.to_le_bytes());
        v.extend_from_slice(&9u32.to_le_bytes());
        v.extend_from_slice(&1u64.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&1u64.to_le_bytes());
        v.push(0);
        one_kv("a", 9, &v)
    },
    E::NestedArrayTooDeep { .. }
);

// ── alignment ───────────────────────────────────────────────────────────────────────────────
rejects!(
    alignment_wrong_type,
    one_kv("general.alignment", 10, &32u64.to_le_bytes()),
    E::AlignmentType { .. }
);
rejects!(
    alignment_zero,
    one_kv("general.alignment", 4, &0u32.to_le_bytes()),
    E::AlignmentNotPowerOfTwo { alignment: 0 }
);
rejects!(
    alignment_not_power_of_two,
    one_kv("general.alignment", 4, &48u32.to_le_bytes()),
    E::AlignmentNotPowerOfTwo { alignment: 48 }
);
rejects!(
    alignment_too_large,
    one_kv("general.alignment", 4, &(1u32 << 21).to_le_bytes()),
    E::AlignmentTooLarge { .. }
);

// ── tensor infos ────────────────────────────────────────────────────────────────────────────
rejects!(
    tensor_name_empty,
    with_tensors(&[("", &[32], F32, 0)], 128),
    E::EmptyTensorName { .. }
);
rejects!(
    tensor_name_too_long,
    with_tensors(&[(&"t".repeat(64), &[32], F32, 0)], 128),
    E::TensorNameTooLong { .. }
);
rejects!(
    tensor_name_not_utf8,
    {
        let mut r = Raw::new();
        r.header(3, 1, 0)
            .u64(1)
            .u8(0xC0)
            .u32(1)
            .u64(8)
            .u32(0)
            .u64(0)
            .pad(32)
            .zeros(32);
        r.build()
    },
    E::InvalidUtf8 { .. }
);
rejects!(
    tensor_duplicate,
    with_tensors(&[("a", &[8], F32, 0), ("a", &[8], F32, 32)], 64),
    E::DuplicateTensor { .. }
);
rejects!(
    tensor_zero_dims,
    with_tensors(&[("a", &[], F32, 0)], 64),
    E::BadDimCount { n_dims: 0, .. }
);
rejects!(
    tensor_five_dims,
    with_tensors(&[("a", &[1, 1, 1, 1, 1], F32, 0)], 64),
    E::BadDimCount { n_dims: 5, .. }
);
rejects!(
    tensor_zero_dim,
    with_tensors(&[("a", &[8, 0], F32, 0)], 64),
    E::ZeroDim { axis: 1, .. }
);
rejects!(
    tensor_negative_dim,
    with_tensors(&[("a", &[8, u64::MAX], F32, 0)], 64),
    E::DimTooLarge { axis: 1, .. }
);
rejects!(
    tensor_element_count_overflow,
    with_tensors(&[("a", &[1 << 32, 1 << 32, 1 << 32], F32, 0)], 64),
    E::ElementCountOverflow { .. }
);
rejects!(
    tensor_unknown_type,
    with_tensors(&[("a", &[32], 100, 0)], 64),
    E::UnknownTensorType { type_id: 100, .. }
);
rejects!(
    tensor_removed_type,
    with_tensors(&[("a", &[32], 4, 0)], 64),
    E::UnknownTensorType { type_id: 4, .. }
);
rejects!(
    tensor_not_block_multiple,
    with_tensors(&[("a", &[33], Q4_0, 0)], 64),
    E::NotBlockMultiple { ne0: 33, .. }
);
rejects!(
    tensor_byte_size_overflow,
    with_tensors(&[("a", &[1 << 61], F64, 0)], 64),
    E::ByteSizeOverflow { .. }
);
rejects!(
    tensor_over_shader_range,
    with_tensors(&[("a", &[1 << 31, 4], F32, 0)], 64),
    E::TensorTooLargeForShaders { .. }
);
rejects!(
    tensor_misaligned_offset,
    with_tensors(&[("a", &[8], F32, 4)], 64),
    E::MisalignedOffset { offset: 4, .. }
);
rejects!(
    tensor_overlapping_offset,
    with_tensors(&[("a", &[64], F32, 0), ("b", &[8], F32, 0)], 512),
    E::UnexpectedOffset { .. }
);
rejects!(
    tensor_gap_offset,
    with_tensors(&[("a", &[8], F32, 0), ("b", &[8], F32, 64)], 512),
    E::UnexpectedOffset { expected: 32, .. }
);
rejects!(
    tensor_data_missing,
    with_tensors(&[("a", &[1024], F32, 0)], 100),
    E::DataExceedsFile { .. }
);
rejects!(
    tensor_info_truncated,
    {
        let mut r = Raw::new();
        r.header(3, 1, 0)
            .str("abcdefgh")
            .u32(1)
            .u64(8)
            .u32(0)
            .zeros(4);
        r.build()
    },
    E::Truncated { .. }
);

// ── tokenizer metadata ──────────────────────────────────────────────────────────────────────
rejects!(
    tokens_not_strings,
    vocab_file(|w| {
        w.set(
            "tokenizer.ggml.tokens",
            MetaValue::Array(MetaArray::I32(vec![1; 5])),
        );
    }),
    E::TokensType { .. }
);
rejects!(
    scores_not_f32,
    vocab_file(|w| {
        w.set(
            "tokenizer.ggml.scores",
            MetaValue::Array(MetaArray::U8(vec![0; 5])),
        );
    }),
    E::ScoresType { .. }
);
rejects!(
    token_type_not_i32,
    vocab_file(|w| {
        w.set(
            "tokenizer.ggml.token_type",
            MetaValue::Array(MetaArray::F32(vec![1.0; 5])),
        );
    }),
    E::TokenTypesType { .. }
);
rejects!(
    merges_not_strings,
    vocab_file(|w| {
        w.set(
            "tokenizer.ggml.merges",
            MetaValue::Array(MetaArray::U32(vec![1])),
        );
    }),
    E::MergesType { .. }
);
rejects!(
    scores_length_mismatch,
    vocab_file(|w| {
        w.set(
            "tokenizer.ggml.scores",
            MetaValue::Array(MetaArray::F32(vec![0.0; 4])),
        );
    }),
    E::TokenArrayLength {
        len: 4,
        n_tokens: 5,
        ..
    }
);
rejects!(
    token_type_length_mismatch,
    vocab_file(|w| {
        w.set(
            "tokenizer.ggml.token_type",
            MetaValue::Array(MetaArray::I32(vec![1; 6])),
        );
    }),
    E::TokenArrayLength { len: 6, .. }
);
rejects!(
    vocab_size_mismatch,
    vocab_file(|w| {
        w.set("llama.vocab_size", MetaValue::U32(6));
    }),
    E::VocabSizeMismatch { .. }
);
rejects!(
    embedding_rows_mismatch,
    vocab_file(|w| {
        w.add_tensor("token_embd.weight", &[8, 4], GgmlType::F32, vec![0; 128])
            .unwrap();
    }),
    E::VocabSizeMismatch { value: 4, .. }
);
rejects!(
    bos_out_of_range,
    vocab_file(|w| {
        w.set("tokenizer.ggml.bos_token_id", MetaValue::U32(5));
    }),
    E::SpecialTokenOutOfRange { id: 5, .. }
);
rejects!(
    eos_negative,
    vocab_file(|w| {
        w.set("tokenizer.ggml.eos_token_id", MetaValue::I32(-7));
    }),
    E::SpecialTokenOutOfRange { id: -7, .. }
);
rejects!(
    pad_not_integer,
    vocab_file(|w| {
        w.set(
            "tokenizer.ggml.padding_token_id",
            MetaValue::String("0".into()),
        );
    }),
    E::WrongType { .. }
);
rejects!(
    byte_token_signed_hex,
    vocab_file(|w| {
        w.set(
            "tokenizer.ggml.tokens",
            MetaValue::Array(MetaArray::String(
                ["<unk>", "<s>", "</s>", "<0x-1>", "a"]
                    .map(String::from)
                    .to_vec(),
            )),
        );
    }),
    E::BadByteToken { index: 3, .. }
);

#[test]
fn valid_vocab_file_parses() {
    let g = Gguf::parse(&vocab_file(|_| {})).unwrap();
    assert_eq!(
        g.metadata.str_array("tokenizer.ggml.tokens").unwrap().len(),
        5
    );
}

/// Every key holding a special token id.
const SPECIAL_ID_KEYS: [&str; 8] = [
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.separator_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.mask_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
];

/// -1 is llama.cpp's "no such token": in every special-id key and at every signed width it
/// parses, while -2 is refused with an error naming the key, the id and the vocabulary size; and
/// the tokenizer reads it as "none given", the special ids of a file without the key (where an
/// id in range, 4, is taken, so the comparison sees the key).
#[test]
fn minus_one_special_id_means_none() {
    for key in SPECIAL_ID_KEYS {
        for v in [
            MetaValue::I8(-1),
            MetaValue::I16(-1),
            MetaValue::I32(-1),
            MetaValue::I64(-1),
        ] {
            let bytes = vocab_file(|w| {
                w.set(key, v.clone());
            });
            if let Err(e) = Gguf::parse(&bytes) {
                panic!("{key} = {v:?} must parse: {e}");
            }
        }
        let bytes = vocab_file(|w| {
            w.set(key, MetaValue::I32(-2));
        });
        match Gguf::parse(&bytes) {
            Err(e)
                if matches!(&e, E::SpecialTokenOutOfRange { key: named, id: -2, n_tokens: 5 }
                    if named == key) =>
            {
                let msg = e.to_string();
                assert!(
                    msg.contains(key) && msg.contains("-2") && msg.contains(" 5 "),
                    "{msg}"
                );
            }
            other => panic!("{key} = -2: want SpecialTokenOutOfRange, got {other:?}"),
        }
    }

    let special = |edit: Option<(&str, i32)>| {
        let bytes = vocab_file(|w| {
            w.set("tokenizer.ggml.model", MetaValue::String("llama".into()));
            if let Some((key, id)) = edit {
                w.set(key, MetaValue::I32(id));
            }
        });
        let g = Gguf::parse(&bytes).unwrap_or_else(|e| panic!("{edit:?}: {e}"));
        Tokenizer::from_gguf(&g)
            .unwrap_or_else(|e| panic!("{edit:?}: {e}"))
            .special_ids()
    };
    let absent = special(None);
    assert_eq!(absent.pad, None, "no padding token without the key");
    for key in SPECIAL_ID_KEYS {
        assert_eq!(special(Some((key, -1))), absent, "{key} = -1");
        assert_ne!(special(Some((key, 4))), absent, "{key} = 4 is read");
    }
    assert_eq!(
        special(Some(("tokenizer.ggml.padding_token_id", 4))).pad,
        Some(4)
    );
}

#[path = "gguf_malformed/q2_0.rs"]
mod q2_0;

/// `split.count = u32::MAX` on a file whose name numbers that many shards: refused before any
/// allocation sized by it (it used to reach `Vec::with_capacity(u32::MAX - 1)` of shards).
#[test]
fn split_count_is_capped_before_allocation() {
    let dir = common::temp_dir("split-count");
    let path = dir.path().join("m-00001-of-4294967295.gguf");
    std::fs::write(&path, one_kv("split.count", 4, &u32::MAX.to_le_bytes())).unwrap();
    let (res, peak) = peak_during(|| flint::gguf::GgufFile::open(&path).map(|_| ()));
    match res {
        Err(E::Split { reason, .. }) => assert!(reason.contains("99999"), "{reason}"),
        other => panic!("expected a split error, got {other:?}"),
    }
    assert!(peak <= 16 << 20, "open allocated {peak} bytes");
}
