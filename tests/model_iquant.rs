//! Whole models in the i-quant and MXFP4 weight types, end to end: a tiny Qwen3 whose matrices,
//! LM head and token embeddings are all one type (IQ4_NL and MXFP4 at d = 288, so their rows
//! are 162 and 153 bytes, not multiples of 4; IQ4_XS at d = 256), and a mixed-type file as
//! unsloth's "UD" files are (k-quants beside IQ4_XS and IQ4_NL tensors), written with random
//! blocks by the generator `flint gguf preset --weights random` uses.
//!
//! The GPU forward runs a prefill and greedy decode steps; its logits are held to the CPU oracle
//! (flint::reference, a float forward over the dequantized weights; the dequantizers are held
//! bit for bit to gguf-py's in tests/quant_vectors.rs), and its greedy tokens to the oracle's
//! except where the oracle's own top-2 margin is a near-tie. Every weight buffer the load
//! creates is held to the memory plan's byte count. The same check runs on files written by
//! gguf-py's own GGUFWriter (scripts/gen_iquant_model.py), one per type.

use crate::common;

use flint::gguf::{GgmlType, GgufFile, GgufWriter, MetaValue};
use flint::memory::Owner;
use flint::model::{weights, Hparams};
use flint::reference::forward::RefModel;

/// Logits NMSE against the oracle (f32 sums in other orders than the oracle's f64 ones, through
/// two layers and an f16 KV cache whose roundings can differ). Measured worst on lavapipe over 8
/// steps, flint-written files: IQ4_NL 1.5e-10, MXFP4 2.0e-10, IQ4_XS 5.8e-9, IQ3_XXS 3.0e-12,
/// IQ3_S 2.7e-10, IQ2_XXS 9.4e-10, IQ2_XS 2.0e-10, IQ2_S 1.1e-8, IQ1_S 3.7e-9, IQ1_M 1.4e-9,
/// mixed 7.3e-10; gguf-py-written files: IQ4_NL 1.7e-9, IQ4_XS 4.8e-11, MXFP4 2.2e-10, IQ3_XXS
/// 2.7e-12, IQ3_S 9.4e-8, IQ2_XXS 2.7e-11, IQ2_XS 2.2e-11, IQ2_S 7.8e-10, IQ1_S 1.1e-9, IQ1_M
/// 4.8e-8. The IQ3_S file's every matrix matches the oracle at 1.3e-14 to 2.9e-14
/// (`matrices_match_the_oracle`), so its 5e-8 to 9e-8 at every step is the forward amplifying
/// rounding (heavy-tailed random weights: 4-bit sub-scales times grid values up to 15), not a
/// decoder error. The bound is ~5x the worst.
const LOGITS_NMSE: f64 = 5e-7;
/// A step whose oracle top-1 / top-2 margin is below this is a near-tie.
const NEAR_TIE: f32 = 0.1;

/// The type of each tensor of the tiny model (`None`: norms, F32).
type TypeOf = dyn Fn(&str) -> GgmlType;

/// 2 layers, width `d`, 4 / 2 heads of 64, FFN 512, vocabulary 160; tensor types by `ty_of`.
fn write(d: u64, ty_of: &TypeOf, path: &std::path::Path) {
    let (nh, nkv, hd, ff, nv) = (4u64, 2u64, 64u64, 512u64, 160u64);
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("qwen3".into()));
    for (k, v) in [
        ("block_count", 2),
        ("embedding_length", d),
        ("attention.head_count", nh),
        ("attention.head_count_kv", nkv),
        ("feed_forward_length", ff),
        ("vocab_size", nv),
        ("context_length", 256),
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
    let mut add = |name: &str, shape: &[u64]| {
        let ty = if shape.len() == 1 {
            GgmlType::F32
        } else {
            ty_of(name)
        };
        w.add_tensor_shape(name, shape, ty).unwrap();
    };
    add("token_embd.weight", &[d, nv]);
    for i in 0..2 {
        let p = |s: &str| format!("blk.{i}.{s}");
        add(&p("attn_norm.weight"), &[d]);
        add(&p("attn_q.weight"), &[d, nh * hd]);
        add(&p("attn_k.weight"), &[d, nkv * hd]);
        add(&p("attn_v.weight"), &[d, nkv * hd]);
        add(&p("attn_output.weight"), &[nh * hd, d]);
        add(&p("attn_q_norm.weight"), &[hd]);
        add(&p("attn_k_norm.weight"), &[hd]);
        add(&p("ffn_norm.weight"), &[d]);
        add(&p("ffn_gate.weight"), &[d, ff]);
        add(&p("ffn_up.weight"), &[d, ff]);
        add(&p("ffn_down.weight"), &[ff, d]);
    }
    add("output_norm.weight", &[d]);
    add("output.weight", &[d, nv]);
    let header = w.to_bytes().unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    flint::model::random_weights::write_random(&header, &mut out, 13).unwrap();
}

/// Top-1 and its margin over the runner-up.
fn top2(logits: &[f32]) -> (u32, f32) {
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    (idx[0] as u32, logits[idx[0]] - logits[idx[1]])
}

/// Every weight buffer the load records has the bytes the plan gives it.
fn weights_match_the_plan(ctx: &flint::gpu::GpuContext, file: &GgufFile, label: &str) {
    let params = common::forward::params(64, 16);
    let plan = common::forward::plan(ctx, file, &params);
    let hp = Hparams::from_gguf(file).unwrap();
    let w = weights::load(ctx, file, &hp, false).unwrap();
    let mut checked = 0;
    for (name, bytes) in &w.allocations {
        let planned = plan
            .get(name)
            .unwrap_or_else(|| panic!("{label}: {name} is not in the plan"));
        assert_eq!(planned.owner, Owner::Target, "{label}: {name}");
        assert_eq!(
            *bytes, planned.bytes,
            "{label}: {name}: allocated vs planned"
        );
        checked += 1;
    }
    assert!(checked > 20, "{label}: {checked} weights recorded");
}

/// Runs the file `label` (written by `write(d, ty_of)`): GPU logits and greedy tokens against
/// the oracle. `expect`: (tensor, type) pairs the parser must read back.
fn run(label: &str, d: u64, ty_of: &TypeOf, expect: &[(&str, GgmlType)]) {
    let tmp = common::temp_dir("iquant");
    let path = tmp.path().join(format!("{label}.gguf"));
    write(d, ty_of, &path);
    check_file(label, &path, expect);
}

/// The GPU forward of the file at `path` against the oracle (see [`run`]).
fn check_file(label: &str, path: &std::path::Path, expect: &[(&str, GgmlType)]) {
    let file = GgufFile::open(path).unwrap();
    for &(name, ty) in expect {
        assert_eq!(file.tensor(name).unwrap().ty, ty, "{label}: {name}");
    }
    let ctx = common::gpu::ctx();
    weights_match_the_plan(&ctx, &file, label);
    let params = common::forward::params(64, 16);
    let mut fwd = common::forward::gpu_forward(&ctx, &file, &params);
    let oracle = RefModel::load(&file).unwrap();
    let mut cache = oracle.new_cache(GgmlType::F16).unwrap();
    let mut tokens = vec![3u32, 17, 90, 0, 42, 5, 77, 150];
    let (mut pos, mut worst, mut ties) = (0, 0f64, 0);
    for step in 0..8 {
        fwd.step(&ctx, &tokens, 1).unwrap();
        let gpu = fwd.logits(&ctx).unwrap();
        let cpu = oracle.forward_last(&mut cache, &tokens, pos).unwrap();
        let e = common::gpu::nmse(&gpu, &cpu);
        worst = worst.max(e);
        assert!(e <= LOGITS_NMSE, "{label} step {step}: NMSE {e:e}");
        let (want, margin) = top2(&cpu);
        let got = fwd.argmax(&ctx).unwrap()[0];
        ties += usize::from(margin < NEAR_TIE);
        assert!(
            got == want || margin < NEAR_TIE,
            "{label} step {step}: GPU token {got}, oracle {want} (margin {margin})"
        );
        pos += tokens.len();
        tokens = vec![want];
    }
    eprintln!("{label}: worst logits NMSE {worst:.2e}, {ties} near-tie steps of 8");
    common::gpu::assert_clean(&ctx);
}

/// One type for every matrix, embeddings and LM head included.
fn run_single(ty: GgmlType, d: u64) {
    let expect = [
        ("token_embd.weight", ty),
        ("blk.1.ffn_down.weight", ty),
        ("output.weight", ty),
    ];
    run(ty.name(), d, &move |_| ty, &expect);
}

#[test]
fn iq4_nl_model_with_162_byte_rows_matches_the_oracle() {
    run_single(GgmlType::IQ4_NL, 288);
}

#[test]
fn iq4_xs_model_matches_the_oracle() {
    run_single(GgmlType::IQ4_XS, 256);
}

#[test]
fn mxfp4_model_with_153_byte_rows_matches_the_oracle() {
    run_single(GgmlType::MXFP4, 288);
}

#[test]
fn iq3_models_match_the_oracle() {
    run_single(GgmlType::IQ3_XXS, 256);
    run_single(GgmlType::IQ3_S, 256);
}

#[test]
fn iq2_models_match_the_oracle() {
    run_single(GgmlType::IQ2_XXS, 256);
    run_single(GgmlType::IQ2_XS, 256);
    run_single(GgmlType::IQ2_S, 256);
}

#[test]
fn iq1_models_match_the_oracle() {
    run_single(GgmlType::IQ1_S, 256);
    run_single(GgmlType::IQ1_M, 256);
}

/// Every matrix of the file at `path` through the device family's matmul (M = 1 and 9) against
/// the oracle, with the kernel tests' bound (tests/kernels_matmul_data.rs: 1e-11).
fn matrices_match_the_oracle(path: &std::path::Path) {
    use flint::kernels::matmul::{matmul_now, Family, GpuWeight};
    let file = GgufFile::open(path).unwrap();
    let ctx = common::gpu::ctx();
    let family = Family::for_context(&ctx);
    for t in file.tensors.iter().filter(|t| t.shape.len() == 2) {
        let (info, bytes) = file.tensor_data(&t.name).unwrap();
        let (k, n) = (info.row_len() as usize, info.n_rows() as usize);
        let w = GpuWeight::upload(&ctx, &t.name, info.ty, [k as u64, n as u64], bytes).unwrap();
        for m in [1usize, 9] {
            let mut rng = common::Rng::new(m as u64);
            let x: Vec<f32> = (0..m * k).map(|_| rng.f32()).collect();
            let want = flint::reference::matmul::matmul(info.ty, bytes, k, n, &x, m).unwrap();
            let got = matmul_now(&ctx, family, &w, &x, m as u32).unwrap();
            let e = common::gpu::nmse(&got, &want);
            eprintln!("{} {}: matmul M={m} NMSE {e:.2e}", info.ty, t.name);
            assert!(e <= 1e-11, "{} {}: M={m}: NMSE {e:e}", info.ty, t.name);
        }
    }
}

/// Mixture-of-experts files whose experts (and every other matrix) are MXFP4 or IQ4_NL: the
/// expert mat-vec by device ids runs the same decoders (`qwen3moe-tiny-*` presets, random
/// weights).
#[test]
fn moe_models_with_mxfp4_and_iq4_nl_experts_match_the_oracle() {
    for (preset, ty) in [
        ("qwen3moe-tiny-mxfp4", GgmlType::MXFP4),
        ("qwen3moe-tiny-iq4_nl", GgmlType::IQ4_NL),
    ] {
        let tmp = common::temp_dir("iquant-moe");
        let path = common::random_preset(tmp.path(), preset, 3);
        let expect = [
            ("blk.0.ffn_gate_exps.weight", ty),
            ("blk.3.ffn_down_exps.weight", ty),
        ];
        check_file(preset, &path, &expect);
    }
}

/// Files written by gguf-py's `GGUFWriter` (scripts/gen_iquant_model.py: random blocks scaled by
/// gguf-py's own dequantization), one per type, matrices, embeddings and LM head included.
/// Without python3 and the PyPI package `gguf` the test fails naming them.
#[test]
fn gguf_py_written_models_match_the_oracle() {
    use GgmlType::*;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gen_iquant_model.py");
    let tmp = common::temp_dir("iquant-py");
    for ty in [
        IQ4_NL, IQ4_XS, MXFP4, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M,
    ] {
        let path = tmp.path().join(format!("{}.gguf", ty.name()));
        let out = common::gguf_py::python(script)
            .arg(ty.name())
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install python3"));
        assert!(
            out.status.success(),
            "{script} {ty} failed (gguf-py and numpy from common::gguf_py):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expect = [("token_embd.weight", ty), ("output.weight", ty)];
        matrices_match_the_oracle(&path);
        check_file(&format!("gguf-py {ty}"), &path, &expect);
    }
}

/// A "UD"-style file: k-quants beside IQ4_XS and IQ4_NL, the type changing per tensor and per
/// layer.
#[test]
fn mixed_kquant_iq4_file_matches_the_oracle() {
    use GgmlType::*;
    let ty_of = |name: &str| -> GgmlType {
        let odd = name.starts_with("blk.1.");
        match name.rsplit('.').nth(1).unwrap_or_default() {
            "token_embd" => IQ4_NL,
            "output" => Q6_K,
            "attn_q" => {
                if odd {
                    IQ4_XS
                } else {
                    Q4_K
                }
            }
            "attn_k" => IQ4_NL,
            "attn_v" => Q6_K,
            "attn_output" => {
                if odd {
                    Q5_K
                } else {
                    IQ4_XS
                }
            }
            "ffn_gate" | "ffn_up" => {
                if odd {
                    Q4_K
                } else {
                    IQ4_XS
                }
            }
            _ => IQ4_NL, // ffn_down
        }
    };
    let expect = [
        ("token_embd.weight", IQ4_NL),
        ("blk.0.attn_q.weight", Q4_K),
        ("blk.1.attn_q.weight", IQ4_XS),
        ("blk.0.ffn_down.weight", IQ4_NL),
        ("output.weight", Q6_K),
    ];
    run("mixed", 256, &ty_of, &expect);
}

/// `flint info` names the types of a file that holds them all.
#[test]
fn info_names_the_types() {
    use GgmlType::*;
    let tmp = common::temp_dir("iquant-info");
    let path = tmp.path().join("info.gguf");
    let ty_of = |name: &str| -> GgmlType {
        match name.rsplit('.').nth(1).unwrap_or_default() {
            "token_embd" => IQ4_NL,
            "attn_q" => IQ4_XS,
            "attn_k" => MXFP4,
            _ => Q8_0,
        }
    };
    write(256, &ty_of, &path);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flint"))
        .arg("info")
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for name in ["IQ4_NL", "IQ4_XS", "MXFP4"] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
}
