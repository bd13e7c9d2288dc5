//! Models quantized by ggml's own quantizers, end to end through `flint generate`: the
//! 1-bit / ternary types of tests/model_ternary.rs, but written by the C code llama.cpp runs
//! (scripts/quantize_ggml.c, built against the pinned llama.cpp sdist by
//! scripts/build_quantize_ggml.sh into target/tmp/, once) instead of random blocks.
//!
//! - SmolLM2-135M, dequantized (flint::quant) and every matrix (widths 576 and 1536, token
//!   embeddings included; tied head) re-quantized to Q2_0 (64-element, the only one of these
//!   types that divides 576), norms F32, metadata (tokenizer included) copied;
//! - a tiny Qwen3 (d 256, FFN 512, 4 / 2 heads of 64, 2 layers, byte-level vocabulary of 288)
//!   with Gaussian f32 weights of std 1/√K, quantized to each of Q1_0, Q2_0, Q2_0_G128 (PrismML's
//!   legacy 128-element Q2_0 under id 42), PQ2_0, TQ1_0 and TQ2_0.
//!
//! Each file runs `flint generate -n 16 --temp 0 --no-spec` (greedy tokens from
//! `--stats-json`); then, in process, the GPU forward and the CPU oracle (flint::reference) run
//! the prompt and those tokens: the GPU logits are held to the oracle's at every step, and every
//! token `generate` printed must be the oracle's top-1 for the same prefix, or within
//! [`NEAR_TIE`] of it (the oracle's own near-tie). The quantized files live in a temp dir and are
//! never committed. No gcc, or no pip / PyPI on the first run, FAILS the test (the message says
//! what to install); it never skips.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use flint::gguf::{GgmlType, GgufFile, GgufWriter, MetaValue};
use flint::reference::forward::RefModel;
use flint::tokenizer::Tokenizer;

/// A token of `generate` that is not the oracle's top-1 must be within this of it.
const NEAR_TIE: f32 = 0.1;
/// Logits NMSE of the tiny models against the oracle: tests/model_ternary.rs's bound for the
/// same model shape in the same types. Measured worst here on lavapipe (16 steps each): Q1_0
/// 9.4e-10, Q2_0 4.2e-10, Q2_0_G128 and PQ2_0 3.9e-10, TQ1_0 2.0e-9, TQ2_0 2.1e-9; the bound is
/// ~5x the worst.
const TINY_NMSE: f64 = 1e-8;
/// Logits NMSE of the Q2_0 SmolLM2 against the oracle. Measured worst on lavapipe: 2.9e-6 (16
/// steps); the bound is ~10x. Not in the tiny models' range: 30 layers of f32 sums in orders
/// other than the oracle's, with f16 K/V on both sides, each layer's difference feeding the
/// next (tests/model_forward.rs bounds the same path per layer at 1e-3 relative).
const SMOL_NMSE: f64 = 3e-5;
/// Tokens generated per file.
const N_PREDICT: usize = 16;

/// The quantizer, built once per target dir (a second run finds the build and reuses it).
fn tool() -> &'static Path {
    static TOOL: OnceLock<PathBuf> = OnceLock::new();
    TOOL.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("quantize_ggml");
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/build_quantize_ggml.sh"
        );
        let t0 = Instant::now();
        let out = Command::new("bash")
            .arg(script)
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run bash ({e}): install bash"));
        assert!(
            out.status.success(),
            "{script} failed: it needs gcc, and on the first run python3 with pip and access to \
             PyPI (install them; see the script):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "{} ({:.1} s)",
            String::from_utf8_lossy(&out.stdout).trim(),
            t0.elapsed().as_secs_f64()
        );
        dir.join("quantize_ggml")
    })
}

/// The tool's name for `ty`.
fn tool_type(ty: GgmlType) -> &'static str {
    match ty {
        GgmlType::Q1_0 => "q1_0",
        GgmlType::Q2_0 => "q2_0",
        GgmlType::Q2_0_G128 => "q2_0_g128",
        GgmlType::PQ2_0 => "pq2_0",
        GgmlType::TQ1_0 => "tq1_0",
        GgmlType::TQ2_0 => "tq2_0",
        t => panic!("quantize_ggml has no {t}"),
    }
}

/// `data` (rows of `n_per_row`) quantized to `ty` by ggml's quantizer.
fn quantize(ty: GgmlType, n_per_row: u64, data: &[f32]) -> Vec<u8> {
    let mut child = Command::new(tool())
        .args([tool_type(ty), &n_per_row.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run quantize_ggml");
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&bytes));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "quantize_ggml {ty}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = data.len() as u64 / n_per_row;
    assert_eq!(
        out.stdout.len() as u64,
        rows * ty.row_bytes(n_per_row).unwrap()
    );
    out.stdout
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// SmolLM2-135M with every matrix in Q2_0 (64-element blocks), norms in F32. Returns the
/// weight NMSE of the re-quantization (against the original's dequantized values).
fn write_smollm2_q2_0(path: &Path) -> f64 {
    let src = GgufFile::open(&common::model_path()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata.iter() {
        // The alignment is the writer's; the file type would name the original's Q4_1.
        if k != "general.alignment" && k != "general.file_type" {
            w.set(k, v.clone());
        }
    }
    let (mut num, mut den) = (0f64, 0f64);
    for t in &src.tensors {
        let (info, bytes) = src.tensor_data(&t.name).unwrap();
        let f = flint::quant::dequantize(info.ty, bytes, info.n_elements() as usize).unwrap();
        if info.shape.len() == 2 {
            let q = quantize(GgmlType::Q2_0, info.row_len(), &f);
            let back = flint::quant::dequantize(GgmlType::Q2_0, &q, f.len()).unwrap();
            for (a, b) in back.iter().zip(&f) {
                num += f64::from(a - b).powi(2);
                den += f64::from(*b).powi(2);
            }
            w.add_tensor(&t.name, &t.shape, GgmlType::Q2_0, q).unwrap();
        } else {
            w.add_tensor(&t.name, &t.shape, GgmlType::F32, f32_bytes(&f))
                .unwrap();
        }
    }
    w.write_file(path).unwrap();
    num / den
}

/// Gaussian samples (Box–Muller on the shared SplitMix64).
struct Gauss(common::Rng);

impl Gauss {
    fn next(&mut self) -> f32 {
        let u = |r: &mut common::Rng| ((r.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let (u1, u2) = (u(&mut self.0), u(&mut self.0));
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }
    fn vec(&mut self, n: u64, std: f32, mean: f32) -> Vec<f32> {
        (0..n).map(|_| mean + std * self.next()).collect()
    }
}

/// The tiny Qwen3's dimensions: d, heads, KV heads, head dim, FFN, vocabulary.
const TINY: (u64, u64, u64, u64, u64, u64) = (256, 4, 2, 64, 512, 288);

/// The tiny Qwen3 with its matrices and embeddings quantized to `ty` (the same f32 weights for
/// every type: one seed). Returns the weight NMSE of the quantization.
fn write_tiny(ty: GgmlType, path: &Path) -> f64 {
    let (d, nh, nkv, hd, ff, nv) = TINY;
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("qwen3".into()));
    for (k, v) in [
        ("block_count", 2),
        ("embedding_length", d),
        ("attention.head_count", nh),
        ("attention.head_count_kv", nkv),
        ("feed_forward_length", ff),
        ("vocab_size", nv),
        ("context_length", 4096),
        ("attention.key_length", hd),
        ("attention.value_length", hd),
    ] {
        w.set(&format!("qwen3.{k}"), MetaValue::U32(v as u32));
    }
    w.set(
        "qwen3.attention.layer_norm_rms_epsilon",
        MetaValue::F32(1e-6),
    );
    w.set("qwen3.rope.freq_base", MetaValue::F32(1e6));
    flint::model::byte_vocab::set_byte_tokenizer(&mut w, nv as u32);
    let mut g = Gauss(common::Rng::new(0x0051_5745_4e33));
    let (mut num, mut den) = (0f64, 0f64);
    // `[k, n]`: n rows of k, std 1/√k.
    let mut mat = |w: &mut GgufWriter, g: &mut Gauss, name: &str, k: u64, n: u64| {
        let f = g.vec(k * n, 1.0 / (k as f32).sqrt(), 0.0);
        let q = quantize(ty, k, &f);
        let back = flint::quant::dequantize(ty, &q, f.len()).unwrap();
        for (a, b) in back.iter().zip(&f) {
            num += f64::from(a - b).powi(2);
            den += f64::from(*b).powi(2);
        }
        w.add_tensor(name, &[k, n], ty, q).unwrap();
    };
    let norm = |w: &mut GgufWriter, g: &mut Gauss, name: &str, n: u64| {
        w.add_tensor(name, &[n], GgmlType::F32, f32_bytes(&g.vec(n, 0.1, 1.0)))
            .unwrap();
    };
    mat(&mut w, &mut g, "token_embd.weight", d, nv);
    for i in 0..2 {
        let p = |s: &str| format!("blk.{i}.{s}");
        norm(&mut w, &mut g, &p("attn_norm.weight"), d);
        mat(&mut w, &mut g, &p("attn_q.weight"), d, nh * hd);
        mat(&mut w, &mut g, &p("attn_k.weight"), d, nkv * hd);
        mat(&mut w, &mut g, &p("attn_v.weight"), d, nkv * hd);
        mat(&mut w, &mut g, &p("attn_output.weight"), nh * hd, d);
        norm(&mut w, &mut g, &p("attn_q_norm.weight"), hd);
        norm(&mut w, &mut g, &p("attn_k_norm.weight"), hd);
        norm(&mut w, &mut g, &p("ffn_norm.weight"), d);
        mat(&mut w, &mut g, &p("ffn_gate.weight"), d, ff);
        mat(&mut w, &mut g, &p("ffn_up.weight"), d, ff);
        mat(&mut w, &mut g, &p("ffn_down.weight"), ff, d);
    }
    norm(&mut w, &mut g, "output_norm.weight", d);
    mat(&mut w, &mut g, "output.weight", d, nv);
    w.write_file(path).unwrap();
    num / den
}

/// The greedy tokens `flint generate` prints for `prompt` (from `--stats-json`).
fn generate(model: &Path, prompt: &str) -> Vec<u32> {
    let stats = model.with_extension("stats.json");
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .arg("generate")
        .arg("-m")
        .arg(model)
        .args(["-p", prompt, "-n", &N_PREDICT.to_string()])
        .args(["--temp", "0", "--no-spec", "--stats-json"])
        .arg(&stats)
        .output()
        .expect("run flint generate");
    assert!(
        out.status.success(),
        "flint generate -m {}: {}",
        model.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    v["generated_token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// What one file measured.
struct Figures {
    what: String,
    weight_nmse: f64,
    worst_nmse: f64,
    steps: usize,
    generated: usize,
    exact: usize,
    smallest_margin: f32,
    text: String,
}

/// Top-1 and its margin over the runner-up.
fn top2(logits: &[f32]) -> (u32, f32) {
    let (mut a, mut b) = ((0usize, f32::NEG_INFINITY), f32::NEG_INFINITY);
    for (i, &x) in logits.iter().enumerate() {
        if x > a.1 {
            b = a.1;
            a = (i, x);
        } else if x > b {
            b = x;
        }
    }
    (a.0 as u32, a.1 - b)
}

/// `generate` on `path`, then the GPU forward and the oracle over the prompt and its tokens.
fn check(path: &Path, what: String, weight_nmse: f64, prompt: &str, bound: f64) -> Figures {
    let generated = generate(path, prompt);
    assert!(!generated.is_empty(), "{what}: generate printed no token");
    let file = GgufFile::open(path).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    let prompt_ids = tok.encode(prompt, true, true).unwrap();
    let ctx = common::gpu::ctx();
    let params = common::forward::params(64, 64);
    let mut fwd = common::forward::gpu_forward(&ctx, &file, &params);
    let oracle = RefModel::load(&file).unwrap();
    let mut cache = oracle.new_cache(GgmlType::F16).unwrap();
    let mut f = Figures {
        what,
        weight_nmse,
        worst_nmse: 0.0,
        steps: 0,
        generated: generated.len(),
        exact: 0,
        smallest_margin: f32::INFINITY,
        text: tok.decode(&generated, false).unwrap(),
    };
    // Step i predicts generated[i]; one step more when generate stopped at an end of
    // generation before N_PREDICT.
    let n_steps = if generated.len() < N_PREDICT {
        generated.len() + 1
    } else {
        generated.len()
    };
    let (mut input, mut pos) = (prompt_ids, 0);
    for step in 0..n_steps {
        fwd.step(&ctx, &input, 1).unwrap();
        let gpu = fwd.logits(&ctx).unwrap();
        let cpu = oracle.forward_last(&mut cache, &input, pos).unwrap();
        let e = common::gpu::nmse(&gpu, &cpu);
        f.worst_nmse = f.worst_nmse.max(e);
        f.steps += 1;
        assert!(
            e <= bound,
            "{}: step {step}: logits NMSE {e:e} > {bound:e}",
            f.what
        );
        let (top, margin) = top2(&cpu);
        f.smallest_margin = f.smallest_margin.min(margin);
        let gap = match generated.get(step) {
            Some(&t) => {
                f.exact += usize::from(t == top);
                cpu[top as usize] - cpu[t as usize]
            }
            // generate stopped: its next token was an end of generation.
            None => {
                let best_eog = tok
                    .eog_ids()
                    .iter()
                    .map(|&t| cpu[t as usize])
                    .fold(f32::NEG_INFINITY, f32::max);
                cpu[top as usize] - best_eog
            }
        };
        assert!(
            gap < NEAR_TIE,
            "{}: step {step}: generate's token is {gap} under the oracle's top-1 {top} \
             (oracle margin {margin}; generated {generated:?})",
            f.what
        );
        pos += input.len();
        input = generated.get(step).map(|&t| vec![t]).unwrap_or_default();
    }
    common::gpu::assert_clean(&ctx);
    f
}

fn report(f: &Figures) {
    eprintln!(
        "{:<28} weight NMSE {:.3e} | logits NMSE worst {:.2e} over {} steps | generate: {} \
         tokens, {}/{} the oracle's top-1 (smallest oracle margin {:.3}): {:?}",
        f.what,
        f.weight_nmse,
        f.worst_nmse,
        f.steps,
        f.generated,
        f.exact,
        f.generated,
        f.smallest_margin,
        f.text
    );
}

#[test]
fn smollm2_requantized_to_q2_0_by_ggml_generates_like_the_oracle() {
    let t0 = Instant::now();
    tool();
    let tmp = common::temp_dir("ggml-quantized-smollm2");
    let path = tmp.path().join("SmolLM2-135M-Instruct.Q2_0.gguf");
    let wn = write_smollm2_q2_0(&path);
    let file = GgufFile::open(&path).unwrap();
    for name in [
        "token_embd.weight",
        "blk.0.attn_q.weight",
        "blk.0.ffn_down.weight",
    ] {
        assert_eq!(file.tensor(name).unwrap().ty, GgmlType::Q2_0, "{name}");
    }
    drop(file);
    let f = check(
        &path,
        "SmolLM2-135M Q2_0".into(),
        wn,
        "The capital of France is",
        SMOL_NMSE,
    );
    report(&f);
    eprintln!("SmolLM2 Q2_0: {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn a_tiny_qwen3_quantized_by_ggml_to_each_type_generates_like_the_oracle() {
    let t0 = Instant::now();
    tool();
    let tmp = common::temp_dir("ggml-quantized-tiny");
    for ty in [
        GgmlType::Q1_0,
        GgmlType::Q2_0,
        GgmlType::Q2_0_G128,
        GgmlType::PQ2_0,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
    ] {
        let path = tmp.path().join(format!("tiny-{}.gguf", tool_type(ty)));
        let wn = write_tiny(ty, &path);
        let file = GgufFile::open(&path).unwrap();
        let t = file.tensor("blk.0.ffn_down.weight").unwrap();
        assert_eq!(t.ty, ty, "the parser reads the layout written");
        drop(file);
        let f = check(
            &path,
            format!("tiny qwen3 {}", tool_type(ty)),
            wn,
            "Hello, world! The quick brown fox",
            TINY_NMSE,
        );
        report(&f);
    }
    eprintln!("tiny qwen3, 6 types: {:.1} s", t0.elapsed().as_secs_f64());
}
