//! A whole model in each 1-bit / ternary weight type, end to end: a tiny Qwen3 (widths that
//! divide 256, the largest block) whose matrices and embeddings are Q1_0, Q2_0 (64-element),
//! Q2_0 in PrismML's 128-element layout, PQ2_0, TQ1_0 or TQ2_0, written with random blocks by
//! the generator `flint gguf preset --weights random` uses. The GPU forward runs a prefill and
//! greedy decode steps; its logits are held to the CPU oracle on the same file (whose
//! dequantizers are held bit for bit to ggml's in tests/quant_vectors.rs), and its greedy tokens
//! to the oracle's except where the oracle's own top-2 margin is a near-tie.

use crate::common;

use flint::gguf::{GgmlType, GgufFile, GgufWriter, MetaValue};
use flint::reference::forward::RefModel;

/// Logits NMSE against the oracle (f32 rounding through two layers and an f16 KV cache against
/// the oracle's f64 sums): measured worst on lavapipe 2.5e-9 (Q2_0), 1.5e-9 (128-element
/// Q2_0, PQ2_0), 1.2e-9 (TQ1_0), 1.1e-11 (TQ2_0), 1.9e-13 (Q1_0); the bound is 4x the worst,
/// the tiny-model bound of tests/model_arch.rs.
const LOGITS_NMSE: f64 = 1e-8;
/// A step whose oracle top-1 / top-2 margin is below this is a near-tie.
const NEAR_TIE: f32 = 0.1;

/// 2 layers, d 256, 4 / 2 heads of 64, FFN 512, vocabulary 160; matrices and embeddings `ty`.
fn write(ty: GgmlType, path: &std::path::Path) {
    let (d, nh, nkv, hd, ff, nv) = (256u64, 4u64, 2u64, 64u64, 512u64, 160u64);
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
    let f32 = GgmlType::F32;
    let mut add = |name: &str, shape: &[u64], t: GgmlType| {
        w.add_tensor_shape(name, shape, t).unwrap();
    };
    add("token_embd.weight", &[d, nv], ty);
    for i in 0..2 {
        let p = |s: &str| format!("blk.{i}.{s}");
        add(&p("attn_norm.weight"), &[d], f32);
        add(&p("attn_q.weight"), &[d, nh * hd], ty);
        add(&p("attn_k.weight"), &[d, nkv * hd], ty);
        add(&p("attn_v.weight"), &[d, nkv * hd], ty);
        add(&p("attn_output.weight"), &[nh * hd, d], ty);
        add(&p("attn_q_norm.weight"), &[hd], f32);
        add(&p("attn_k_norm.weight"), &[hd], f32);
        add(&p("ffn_norm.weight"), &[d], f32);
        add(&p("ffn_gate.weight"), &[d, ff], ty);
        add(&p("ffn_up.weight"), &[d, ff], ty);
        add(&p("ffn_down.weight"), &[ff, d], ty);
    }
    add("output_norm.weight", &[d], f32);
    add("output.weight", &[d, nv], ty);
    let header = w.to_bytes().unwrap();
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    flint::model::random_weights::write_random(&header, &mut out, 11).unwrap();
}

/// Top-1 and its margin over the runner-up.
fn top2(logits: &[f32]) -> (u32, f32) {
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    (idx[0] as u32, logits[idx[0]] - logits[idx[1]])
}

fn run(ty: GgmlType) {
    let tmp = common::temp_dir("ternary");
    let path = tmp.path().join(format!("{}.gguf", ty.name()));
    write(ty, &path);
    let file = GgufFile::open(&path).unwrap();
    let t = file.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(t.ty, ty, "the parser reads the layout written");
    let ctx = common::gpu::ctx();
    let params = common::forward::params(64, 16);
    let mut fwd = common::forward::gpu_forward(&ctx, &file, &params);
    let oracle = RefModel::load(&file).unwrap();
    let mut cache = oracle.new_cache(GgmlType::F16).unwrap();
    let mut tokens = vec![3u32, 17, 90, 0, 42, 5, 77, 150];
    let (mut pos, mut worst) = (0, 0f64);
    for step in 0..6 {
        fwd.step(&ctx, &tokens, 1).unwrap();
        let gpu = fwd.logits(&ctx).unwrap();
        let cpu = oracle.forward_last(&mut cache, &tokens, pos).unwrap();
        let e = common::gpu::nmse(&gpu, &cpu);
        worst = worst.max(e);
        assert!(e <= LOGITS_NMSE, "{ty} step {step}: NMSE {e:e}");
        let (want, margin) = top2(&cpu);
        let got = fwd.argmax(&ctx).unwrap()[0];
        assert!(
            got == want || margin < NEAR_TIE,
            "{ty} step {step}: GPU token {got}, oracle {want} (margin {margin})"
        );
        pos += tokens.len();
        tokens = vec![want];
    }
    eprintln!(
        "{ty} ({:?}): worst logits NMSE {worst:.2e}",
        ty.layout_note()
    );
    common::gpu::assert_clean(&ctx);
}

#[test]
fn q1_0_model_matches_the_oracle() {
    run(GgmlType::Q1_0);
}

#[test]
fn q2_0_models_in_both_layouts_match_the_oracle() {
    run(GgmlType::Q2_0);
    run(GgmlType::Q2_0_G128);
    run(GgmlType::PQ2_0);
}

#[test]
fn tq_models_match_the_oracle() {
    run(GgmlType::TQ1_0);
    run(GgmlType::TQ2_0);
}
