//! Tiny GGUF files of the metadata tests: backbones with chosen keys and tensors.

use flint::gguf::{GgmlType, GgufWriter, MetaArray, MetaValue};

/// A backbone file of `arch`: 2 layers, d 64, 4 heads, FFN 96, eps 1e-6 (each overridable),
/// the `{arch}.`-prefixed `keys`, the global `globals`, and zero f32 `tensors` of these shapes.
pub fn backbone(
    arch: &str,
    keys: &[(&str, MetaValue)],
    globals: &[(&str, MetaValue)],
    tensors: &[(&str, &[u64])],
) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String(arch.into()));
    let base = [
        ("block_count", MetaValue::U32(2)),
        ("embedding_length", MetaValue::U32(64)),
        ("attention.head_count", MetaValue::U32(4)),
        ("feed_forward_length", MetaValue::U32(96)),
        ("attention.layer_norm_rms_epsilon", MetaValue::F32(1e-6)),
    ];
    for (k, v) in base.iter().chain(keys) {
        w.set(&format!("{arch}.{k}"), v.clone());
    }
    for (k, v) in globals {
        w.set(k, v.clone());
    }
    for (name, shape) in tensors {
        let n: u64 = shape.iter().product();
        w.add_tensor(name, shape, GgmlType::F32, vec![0u8; n as usize * 4])
            .unwrap();
    }
    w.to_bytes().unwrap()
}

pub fn tokens(n: usize) -> MetaValue {
    MetaValue::Array(MetaArray::String((0..n).map(|i| format!("t{i}")).collect()))
}
