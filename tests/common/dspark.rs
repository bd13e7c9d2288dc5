//! DSpark test helpers: a tiny llama target (f32, any vocabulary size), a GGUF rewriter that
//! replaces metadata keys and tensors (to build drafters that do not fit their target), and a
//! tensor reader.

use flint::gguf::{GgmlType, Gguf, GgufWriter, MetaArray, MetaValue, TensorInfo};
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::model::DrafterMeta;
use flint::reference::dspark::{DsparkRefError, RefDrafter};

use super::Rng;

/// Tiny target: 4 layers, d 64, 4 heads / 2 KV heads of 16, FFN 96, `n_vocab` tokens, f32.
pub const TINY_LAYERS: u32 = 4;
pub const TINY_D: u64 = 64;

/// A tiny llama target with random f32 weights (no tokenizer: `llama.vocab_size`).
pub fn tiny_target(n_vocab: u64, seed: u64) -> Vec<u8> {
    let (d, ff, kv) = (TINY_D, 96u64, 32u64);
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("llama".into()));
    let u = MetaValue::U32;
    w.set("llama.block_count", u(TINY_LAYERS));
    w.set("llama.context_length", u(2048));
    w.set("llama.embedding_length", u(d as u32));
    w.set("llama.feed_forward_length", u(ff as u32));
    w.set("llama.attention.head_count", u(4));
    w.set("llama.attention.head_count_kv", u(2));
    w.set("llama.rope.freq_base", MetaValue::F32(10000.0));
    w.set(
        "llama.attention.layer_norm_rms_epsilon",
        MetaValue::F32(1e-5),
    );
    w.set("llama.vocab_size", u(n_vocab as u32));
    let mut rng = Rng::new(seed);
    let mut add = |w: &mut GgufWriter, name: &str, shape: &[u64], norm: bool| {
        let n: u64 = shape.iter().product();
        let data: Vec<u8> = (0..n)
            .flat_map(|_| {
                let x = rng.f32();
                (if norm { 1.0 + 0.1 * x } else { 0.2 * x }).to_le_bytes()
            })
            .collect();
        w.add_tensor(name, shape, GgmlType::F32, data).unwrap();
    };
    add(&mut w, "token_embd.weight", &[d, n_vocab], false);
    for i in 0..TINY_LAYERS {
        let p = |s: &str| format!("blk.{i}.{s}");
        add(&mut w, &p("attn_norm.weight"), &[d], true);
        add(&mut w, &p("attn_q.weight"), &[d, d], false);
        add(&mut w, &p("attn_k.weight"), &[d, kv], false);
        add(&mut w, &p("attn_v.weight"), &[d, kv], false);
        add(&mut w, &p("attn_output.weight"), &[d, d], false);
        add(&mut w, &p("ffn_norm.weight"), &[d], true);
        add(&mut w, &p("ffn_gate.weight"), &[d, ff], false);
        add(&mut w, &p("ffn_up.weight"), &[d, ff], false);
        add(&mut w, &p("ffn_down.weight"), &[ff, d], false);
    }
    add(&mut w, "output_norm.weight", &[d], true);
    w.to_bytes().unwrap()
}

/// A replacement tensor: shape, type, data.
pub type Replacement = (Vec<u64>, GgmlType, Vec<u8>);

/// A copy of the GGUF `bytes` with the metadata keys of `set` replaced (or added) and every
/// tensor for which `replace` returns `Some` replaced.
pub fn rewrite(
    bytes: &[u8],
    set: &[(&str, MetaValue)],
    mut replace: impl FnMut(&TensorInfo) -> Option<Replacement>,
) -> Vec<u8> {
    let g = Gguf::parse(bytes).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata.iter() {
        w.set(k, v.clone());
    }
    for (k, v) in set {
        w.set(k, v.clone());
    }
    for t in &g.tensors {
        match replace(t) {
            Some((shape, ty, data)) => w.add_tensor(&t.name, &shape, ty, data).unwrap(),
            None => {
                let data = g.tensor_data(bytes, t).unwrap().to_vec();
                w.add_tensor(&t.name, &t.shape, t.ty, data).unwrap()
            }
        };
    }
    w.to_bytes().unwrap()
}

/// `n` zero f32 values as tensor data.
pub fn zeros_f32(n: u64) -> Vec<u8> {
    vec![0u8; n as usize * 4]
}

/// Tensor `name` of the GGUF `bytes` as f32 (any type `flint::quant` decodes).
pub fn tensor_f32(bytes: &[u8], name: &str) -> Vec<f32> {
    let g = Gguf::parse(bytes).unwrap();
    let t = g.tensor(name).unwrap_or_else(|| panic!("no tensor {name}"));
    let data = g.tensor_data(bytes, t).unwrap();
    flint::quant::dequantize(t.ty, data, t.n_elements() as usize).unwrap()
}

/// An i32 array key.
pub fn i32s(v: &[i32]) -> MetaValue {
    MetaValue::Array(MetaArray::I32(v.to_vec()))
}

/// A random drafter of `target`, as file bytes.
pub fn init(target: &[u8], opts: &InitOptions) -> Vec<u8> {
    let g = Gguf::parse(target).unwrap();
    random_drafter(&g, opts).unwrap().to_bytes().unwrap()
}

/// The oracle of `drafter` for `target`, with an f16 cache.
pub fn load(drafter: &[u8], target: &[u8]) -> Result<RefDrafter, DsparkRefError> {
    let (d, t) = (Gguf::parse(drafter).unwrap(), Gguf::parse(target).unwrap());
    RefDrafter::from_gguf(&d, drafter, &t, target, GgmlType::F16)
}

/// What `bytes` declares as a drafter.
pub fn meta(bytes: &[u8]) -> DrafterMeta {
    DrafterMeta::from_gguf(&Gguf::parse(bytes).unwrap()).unwrap()
}
