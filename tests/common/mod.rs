//! Shared test helpers: a seeded RNG, a raw GGUF byte builder that can write malformed files,
//! a valid fixture file, and a per-thread counting allocator.

#![allow(dead_code)]

pub mod alloc;
pub mod batch;
pub mod drive;
pub mod dspark;
pub mod dspark_check;
pub mod forward;
pub mod gguf_py;
pub mod gpu;
pub mod raw;
pub mod stats;

use flint::gguf::{GgmlType, GgufWriter, MetaArray, MetaValue};

/// A new directory `flint-{what}-…` under the system's temp directory, removed with everything
/// in it when the returned guard drops (at the end of the test, pass or fail).
pub fn temp_dir(what: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("flint-{what}-"))
        .tempdir()
        .expect("create a temp directory")
}

/// SplitMix64: small, seeded, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// A valid ~100 KB llama-like file: metadata of every kind (tokenizer arrays included) and a
/// few tensors of several types.
pub fn fixture_bytes() -> Vec<u8> {
    let mut w = GgufWriter::new();
    let n_vocab = 256u64;
    let n_embd = 64u64;
    w.set("general.architecture", MetaValue::String("llama".into()));
    w.set("general.name", MetaValue::String("fixture".into()));
    w.set("llama.block_count", MetaValue::U32(1));
    w.set("llama.embedding_length", MetaValue::U32(n_embd as u32));
    w.set("llama.rope.freq_base", MetaValue::F32(10000.0));
    w.set("llama.vocab_size", MetaValue::U32(n_vocab as u32));
    let tokens: Vec<String> = (0..n_vocab)
        .map(|i| {
            if i < 3 {
                format!("<s{i}>")
            } else {
                format!("<0x{:02X}>", i - 3)
            }
        })
        .collect();
    let mut types = vec![1i32; n_vocab as usize];
    for t in types.iter_mut().skip(3) {
        *t = 6;
    }
    w.set("tokenizer.ggml.model", MetaValue::String("llama".into()));
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(tokens)),
    );
    w.set(
        "tokenizer.ggml.scores",
        MetaValue::Array(MetaArray::F32((0..n_vocab).map(|i| -(i as f32)).collect())),
    );
    w.set(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(types)),
    );
    let merges: Vec<String> = (0..300).map(|i| format!("m{} {}", i % 17, i)).collect();
    w.set(
        "tokenizer.ggml.merges",
        MetaValue::Array(MetaArray::String(merges)),
    );
    w.set("tokenizer.ggml.bos_token_id", MetaValue::U32(1));
    w.set("tokenizer.ggml.eos_token_id", MetaValue::U32(2));
    w.set(
        "test.nested",
        MetaValue::Array(MetaArray::Array(vec![
            MetaArray::U8(vec![1, 2, 3]),
            MetaArray::String(vec!["a".into(), "b".into()]),
        ])),
    );
    let mut rng = Rng::new(7);
    let q = |ty: GgmlType, ne0: u64, rows: u64, rng: &mut Rng| {
        let n = ty.row_bytes(ne0).unwrap() * rows;
        rng.bytes(n as usize)
    };
    let d = q(GgmlType::Q8_0, n_embd, n_vocab, &mut rng);
    w.add_tensor("token_embd.weight", &[n_embd, n_vocab], GgmlType::Q8_0, d)
        .unwrap();
    let d = q(GgmlType::F32, n_embd, 1, &mut rng);
    w.add_tensor("blk.0.attn_norm.weight", &[n_embd], GgmlType::F32, d)
        .unwrap();
    let d = q(GgmlType::Q4_1, n_embd, 1024, &mut rng);
    w.add_tensor("blk.0.ffn_up.weight", &[n_embd, 1024], GgmlType::Q4_1, d)
        .unwrap();
    let d = q(GgmlType::Q4_K, 256, n_embd, &mut rng);
    w.add_tensor("blk.0.ffn_down.weight", &[256, n_embd], GgmlType::Q4_K, d)
        .unwrap();
    let d = q(GgmlType::F16, n_embd, n_embd, &mut rng);
    w.add_tensor("blk.0.attn_q.weight", &[n_embd, n_embd], GgmlType::F16, d)
        .unwrap();
    w.to_bytes().unwrap()
}

/// Path of the real test model (fetched by `bash models/fetch.sh`).
pub fn model_path() -> std::path::PathBuf {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run `bash models/fetch.sh` first",
        p.display()
    );
    p
}

/// Runs `flint bench -m MODEL -md DRAFT --spec-prompts PROMPTS -n N -o json` as a process and
/// returns its rows; panics with flint's stderr when it fails.
pub fn spec_bench_rows(
    model: &std::path::Path,
    draft: &std::path::Path,
    prompts: &str,
    n: &str,
) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["bench", "-m", model.to_str().unwrap(), "-md"])
        .arg(draft)
        .args(["--spec-prompts", prompts, "-n", n, "-o", "json"])
        .output()
        .expect("run flint");
    assert!(
        out.status.success(),
        "flint bench -md failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a json array of objects")
}

/// A random `qwen35-tiny-f32` (d 64, 8 layers: DeltaNet but 3 and 7; n_k 2 ≠ n_v 4; 16 of 32
/// rotary dims; vocab 512) written into `dir` by `flint gguf preset`.
pub fn qwen35_tiny(dir: &std::path::Path, seed: u64) -> std::path::PathBuf {
    random_preset(dir, "qwen35-tiny-f32", seed)
}

/// Preset `preset` with seeded random weights, written into `dir` by `flint gguf preset`.
pub fn random_preset(dir: &std::path::Path, preset: &str, seed: u64) -> std::path::PathBuf {
    let out = dir.join(format!("{preset}-{seed}.gguf"));
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["gguf", "preset", preset])
        .arg(&out)
        .args(["--weights", "random", "--seed", &seed.to_string()])
        .output()
        .expect("run flint");
    assert!(
        st.status.success(),
        "flint gguf preset: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    out
}

/// `n` seeded random token ids below `vocab`.
pub fn random_tokens(seed: u64, n: usize, vocab: u32) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.below(u64::from(vocab)) as u32).collect()
}

/// An engine of one sequence on `model` with `n_ctx` context rows, 16-row ubatches and
/// `draft` (or none).
pub fn engine(
    model: &std::path::Path,
    n_ctx: u32,
    draft: Option<flint::engine::DraftOptions>,
) -> flint::engine::Engine {
    let opts = flint::engine::EngineOptions {
        model: model.to_path_buf(),
        n_ctx,
        n_ubatch: 16,
        draft,
        ..flint::engine::EngineOptions::default()
    };
    flint::engine::Engine::load(&opts, 1).unwrap()
}

/// One request on sequence 0 of `eng` from an empty cache (`engine::solo`): up to `n` tokens
/// after `prompt`, greedy without `sampler`, drafting with the engine's drafter when `draft`.
pub fn generate(
    eng: &mut flint::engine::Engine,
    prompt: &[u32],
    n: usize,
    sampler: Option<&mut flint::sampling::Sampler>,
    draft: bool,
) -> flint::engine::GenStats {
    eng.reset(0).unwrap();
    continue_with(eng, prompt, 0, n, sampler, draft)
}

/// [`generate`] on what sequence 0 holds: its first `keep` rows are `prompt`'s.
pub fn continue_with(
    eng: &mut flint::engine::Engine,
    prompt: &[u32],
    keep: usize,
    n: usize,
    sampler: Option<&mut flint::sampling::Sampler>,
    draft: bool,
) -> flint::engine::GenStats {
    let req = flint::engine::solo::Request {
        prompt,
        keep,
        n_predict: n,
        sampler,
        grammar: &mut None,
        ignore_eos: false,
        draft,
    };
    flint::engine::solo::generate(eng, req, |_| Ok(true)).unwrap()
}
