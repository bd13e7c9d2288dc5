//! The device MoE block (`flint::kernels::ops::moe`: router, expert mat-vec by device ids,
//! weighted sum, qwen35moe's gated shared expert) held to the CPU oracle's MoE block
//! (`flint::reference::forward::moe`, itself held to llama.cpp in `tests/moe_reference.rs`) on
//! every layer of llama.cpp's fixtures `tests/data/moe/*.gguf` (F32, Q8_0 and Q4_0 experts),
//! and batch invariance:
//!
//! - the experts the device picks for 8 random rows are the oracle's, in its order;
//! - the outputs are within [`MAX_REL`] of the largest |output| (measured: printed);
//! - each row run alone (a 1-row block) gives bits identical to the same row in the batch of 8,
//!   whose rows route to other experts (checked: more than one expert set in the batch).

use crate::common;

use std::path::Path;

use flint::gguf::GgufFile;
use flint::kernels::launch::submit;
use flint::kernels::matmul::Family;
use flint::kernels::ops::moe::{MoeBlock, MoeGpuWeights, MoeScratch};
use flint::model::moe::upload_layer;
use flint::model::Hparams;
use flint::reference::forward::moe::MoeWeights;
use flint::reference::forward::RefModel;
use flint::reference::hybrid::RefHybridModel;

/// Largest |device − oracle| over the largest |output| (f32 sums against the oracle's f64).
const MAX_REL: f32 = 1e-5;
const ROWS: usize = 8;

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/moe")
}

/// 8 rows of `d` values like a normed residual (seeded, N(0,1)-ish).
fn rows(d: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..ROWS * d)
        .map(|_| {
            let mut acc = 0f32;
            for _ in 0..4 {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                acc += ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5;
            }
            acc * 1.7
        })
        .collect()
}

/// The device block's output and ids for rows `x` `[m, d]`.
fn device(
    ctx: &flint::gpu::GpuContext,
    w: &MoeGpuWeights,
    x: &[f32],
    d: usize,
) -> (Vec<f32>, Vec<u32>) {
    let m = (x.len() / d) as u32;
    let family = Family::for_context(ctx);
    let s = MoeScratch::new(ctx, w, d as u32, m).unwrap();
    let xb = common::gpu::upload_f32(ctx, "x", x);
    let out = flint::gpu::buffers::create_storage(ctx, "out", (x.len() * 4) as u64).unwrap();
    let block = MoeBlock::new(ctx, family, w, &s, &xb, &out, m).unwrap();
    submit(ctx, "moe", &block.dispatches()).unwrap();
    let y = common::gpu::read_f32(ctx, &out, x.len());
    let ids = flint::gpu::buffers::read_back(ctx, &s.ids, 0, u64::from(m * w.n_used) * 4).unwrap();
    let ids = ids
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (y, ids)
}

fn oracle_layers(name: &str, file: &GgufFile) -> Vec<MoeWeights> {
    if name.starts_with("qwen35moe") {
        let m = RefHybridModel::load(file).unwrap();
        m.weights
            .layers
            .into_iter()
            .map(|l| l.moe.unwrap())
            .collect()
    } else {
        let m = RefModel::load(file).unwrap();
        m.weights
            .layers
            .into_iter()
            .map(|l| l.moe.unwrap())
            .collect()
    }
}

#[test]
fn device_moe_block_matches_the_oracle_and_is_batch_invariant() {
    let ctx = common::gpu::ctx();
    for name in [
        "qwen3moe-a",
        "qwen3moe-a-q8",
        "qwen3moe-a-q4",
        "qwen35moe-a",
    ] {
        let file = GgufFile::open(&dir().join(format!("{name}.gguf"))).unwrap();
        let hp = Hparams::from_gguf(&file.gguf).unwrap();
        let moe = hp.moe.clone().expect("a MoE model");
        let d = hp.n_embd as usize;
        let oracle = oracle_layers(name, &file);
        let mut worst = 0f32;
        for (il, o) in oracle.iter().enumerate() {
            let w = upload_layer(&ctx, &file, il as u32, hp.n_embd, &moe, &|_| false).unwrap();
            assert_eq!(w.shared.is_some(), o.shared.is_some(), "{name} layer {il}");
            let x = rows(d, 41 + il as u64);
            let (want, want_ids) = o.apply(&x, d);
            let (got, ids) = device(&ctx, &w, &x, d);
            let want_ids: Vec<u32> = want_ids.iter().map(|&e| e as u32).collect();
            assert_eq!(ids, want_ids, "{name} layer {il}: experts");
            let k = moe.n_expert_used as usize;
            let sets: std::collections::BTreeSet<_> = ids.chunks(k).map(<[u32]>::to_vec).collect();
            assert!(
                sets.len() > 1,
                "{name} layer {il}: every row took the same experts"
            );
            let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
            let diff = got
                .iter()
                .zip(&want)
                .fold(0f32, |a, (g, w)| a.max((g - w).abs()));
            worst = worst.max(diff / scale);
            for r in 0..ROWS {
                let (alone, alone_ids) = device(&ctx, &w, &x[r * d..(r + 1) * d], d);
                assert_eq!(
                    alone_ids,
                    ids[r * k..(r + 1) * k],
                    "{name} layer {il} row {r}"
                );
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&alone),
                    bits(&got[r * d..(r + 1) * d]),
                    "{name} layer {il} row {r}: alone vs in a batch of {ROWS}"
                );
            }
        }
        println!("{name}: max |device − oracle| / max |out| = {worst:.2e}");
        assert!(worst <= MAX_REL, "{name}: {worst} > {MAX_REL}");
    }
}
