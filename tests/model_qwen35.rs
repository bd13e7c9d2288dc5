//! The hybrid `qwen35` forward on the device (Gated DeltaNet + gated attention): batch
//! invariance through a speculative rollback, and rollbacks that leak nothing.
//!
//! - A verify batch of 7 rows, rolled back to 2 of them, then 5 single decode steps: each decode
//!   step's logits are bit-identical to the verify batch's row for the same position (the
//!   recurrence runs token by token inside the dispatch; the rollback restores the checkpoint
//!   and replays the kept rows).
//! - 20 verify steps whose drafts are all rejected leave the model exactly where plain
//!   decoding of the same tokens leaves it: same logits at every step, same KV length, and no
//!   buffer created after load.
//! - The state cannot be cut where no checkpoint covers; back to 0 always works.
//!
//! The three rollback checks run the engine (one sequence of the batched forward, whose
//! kernels checkpoint, restore and replay the state); the oracle checks run the
//! single-sequence forward.
//! - Against the CPU oracle (`reference::hybrid`, f16 K/V rounded as the device rounds them):
//!   every layer's output and the logits, on the random presets (head_k 16 ≠ head_v 32, n_k 2 ≠
//!   n_v 4, partial rotary; F32, Q8_0, Q1_0 and legacy Q2_0 matrices) and on the llama.cpp fixtures (tied head, MTP
//!   block, Q1_0). Logits NMSE bound 1e-8 as for the dense archs (measured worst on lavapipe
//!   2.9e-9, tiny-b; the DeltaNet-only paths are near 1e-12); each layer's output, relative to
//!   its scale, 1e-3 as in `tests/model_forward.rs` (measured worst 1.0e-4, attention layers:
//!   f16 K/V rounding).

use crate::common;

use std::path::Path;
use std::process::Command;

use flint::engine::{Engine, EngineOptions};
use flint::gguf::GgmlType;
use flint::gguf::GgufFile;
use flint::gpu::GpuContext;
use flint::model::forward::{Forward, SeqSteps};
use flint::reference::forward::{Capture, Rows};
use flint::reference::hybrid::RefHybridModel;

/// A forward with room for verify batches of 8 rows (ubatch 16).
fn forward(ctx: &GpuContext, file: &GgufFile) -> Forward {
    let params = flint::memory::RunParams {
        verify_rows: 8,
        ..common::forward::params(256, 16)
    };
    common::forward::gpu_forward(ctx, file, &params)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The engine of one sequence on `path` (16-row ubatches, verify batches of 8 rows): its
/// rollback is the batched forward's in-kernel checkpoint, restore and replay.
fn engine(path: &Path) -> Engine {
    let opts = EngineOptions {
        model: path.to_path_buf(),
        n_ctx: 256,
        n_ubatch: 16,
        verify_rows: 8,
        ..EngineOptions::default()
    };
    Engine::load(&opts, 1).unwrap()
}

/// Runs `tokens` on sequence 0; the logits of the last `n_logits` rows.
fn step(eng: &mut Engine, tokens: &[u32], n_logits: u32) -> Vec<f32> {
    let ctx = std::sync::Arc::clone(&eng.ctx);
    eng.seq(0).step(&ctx, tokens, n_logits).unwrap();
    eng.fwd.logits(&ctx).unwrap()
}

#[test]
fn a_verify_batch_rolled_back_matches_decoding_bit_for_bit() {
    let tmp = common::temp_dir("qwen35-verify");
    let path = common::qwen35_tiny(tmp.path(), 7);
    let mut eng = engine(&path);
    assert!(eng.fwd.is_recurrent());
    let v = eng.fwd.hp().n_vocab as usize;
    let ids = common::random_tokens(11, 12, eng.fwd.hp().n_vocab);
    let (prompt, rows) = ids.split_at(5);
    step(&mut eng, prompt, 1);
    eng.fwd.checkpoint(0).unwrap();
    let batch = step(&mut eng, &rows[..7], 7);
    assert_eq!(batch.len(), 7 * v);
    assert!(batch.iter().all(|x| x.is_finite()));
    // Keep 2 of the 7 rows (as a verify accepting one draft does), then decode the other 5.
    eng.fwd.truncate(0, 5 + 2).unwrap();
    assert_eq!(eng.fwd.kv().len(0).unwrap(), 7);
    for (i, &t) in rows[2..7].iter().enumerate() {
        let one = step(&mut eng, &[t], 1);
        let want = &batch[(2 + i) * v..(3 + i) * v];
        assert_eq!(bits(&one), bits(want), "row {} after the rollback", 2 + i);
    }
    // Rows 0 and 1 too: a fresh pass decoding one token at a time.
    let mut fresh = engine(&path);
    step(&mut fresh, prompt, 1);
    for (i, &t) in rows[..2].iter().enumerate() {
        let one = step(&mut fresh, &[t], 1);
        assert_eq!(bits(&one), bits(&batch[i * v..(i + 1) * v]), "row {i}");
    }
    common::gpu::assert_clean(&eng.ctx);
}

#[test]
fn twenty_forced_rejections_leak_nothing() {
    let tmp = common::temp_dir("qwen35-reject");
    let path = common::qwen35_tiny(tmp.path(), 3);
    let mut spec = engine(&path);
    let mut plain = engine(&path);
    let v = spec.fwd.hp().n_vocab as usize;
    let ids = common::random_tokens(5, 26, spec.fwd.hp().n_vocab);
    let (prompt, rest) = ids.split_at(6);
    step(&mut spec, prompt, 1);
    step(&mut plain, prompt, 1);
    let mut junk = common::Rng::new(99);
    for (i, &t) in rest.iter().enumerate() {
        let pos = spec.fwd.kv().len(0).unwrap();
        // x0 = t plus 4 drafts that are all rejected: only x0 stays.
        let mut rows = vec![t];
        rows.extend((0..4).map(|_| junk.below(u64::from(spec.fwd.hp().n_vocab)) as u32));
        spec.fwd.checkpoint(0).unwrap();
        let first = step(&mut spec, &rows, 5)[..v].to_vec();
        spec.fwd.truncate(0, pos + 1).unwrap();
        let want = step(&mut plain, &[t], 1);
        assert_eq!(bits(&first), bits(&want), "cycle {i}");
    }
    assert_eq!(
        spec.fwd.kv().len(0).unwrap(),
        plain.fwd.kv().len(0).unwrap()
    );
    // The state left behind is the plain one: the next token gives the same logits.
    let (a, b) = (step(&mut spec, &[1], 1), step(&mut plain, &[1], 1));
    assert_eq!(bits(&a), bits(&b), "after 20 rollbacks");
    common::gpu::assert_clean(&spec.ctx);
}

#[test]
fn the_state_cannot_be_cut_where_no_checkpoint_covers() {
    let tmp = common::temp_dir("qwen35-cut");
    let path = common::qwen35_tiny(tmp.path(), 5);
    let mut eng = engine(&path);
    let ids = common::random_tokens(8, 10, eng.fwd.hp().n_vocab);
    step(&mut eng, &ids[..6], 1);
    step(&mut eng, &ids[6..], 1);
    let f = &eng.fwd;
    assert!(f.can_truncate(0, 10) && f.can_truncate(0, 0) && !f.can_truncate(0, 6));
    let err = eng.fwd.truncate(0, 6).unwrap_err().to_string();
    assert!(err.contains("row 10") && err.contains("row 6"), "{err}");
    // Back to 0 always works, and starts the sequence over.
    eng.fwd.truncate(0, 0).unwrap();
    let again = step(&mut eng, &ids[..6], 1);
    let mut fresh = engine(&path);
    let want = step(&mut fresh, &ids[..6], 1);
    assert_eq!(bits(&again), bits(&want));
}

/// Logits NMSE against the oracle (as `tests/model_arch.rs`).
const LOGITS_NMSE: f64 = 1e-8;
/// Each layer's output: max |Δ| over the layer's max |x|, the bound of the dense archs'
/// `tests/model_forward.rs` (a k element one f32 ulp apart can round to the next f16 in the
/// cache, moving an attention layer's output by ~1e-5 of its scale).
const LAYER_REL: f32 = 1e-3;

fn against_oracle(ctx: &GpuContext, path: &Path) {
    let file = GgufFile::open(path).unwrap();
    let mut fwd = forward(ctx, &file);
    let oracle = RefHybridModel::load(&file).unwrap();
    let mut state = oracle.new_state(GgmlType::F16).unwrap();
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let d = fwd.hp.n_embd as usize;
    let mut tokens = common::random_tokens(31, 6, fwd.hp.n_vocab);
    let mut pos = 0;
    let (mut worst_logits, mut worst_layer) = (0f64, 0f32);
    for step in 0..4 {
        let layers = fwd.step_captured(ctx, &tokens, 1).unwrap();
        let gpu = fwd.logits(ctx).unwrap();
        let capture = Capture {
            rows: Rows::Last,
            taps: Vec::new(),
            named: true,
        };
        let out = oracle.forward(&mut state, &tokens, pos, &capture).unwrap();
        let e = common::gpu::nmse(&gpu, &out.logits);
        worst_logits = worst_logits.max(e);
        assert!(e <= LOGITS_NMSE, "{name} step {step}: logits NMSE {e:e}");
        for (il, got) in layers.iter().enumerate().take(fwd.hp.n_layer as usize) {
            let want = &out.get(&format!("l_out-{il}")).unwrap().data;
            let n = tokens.len() * d;
            let scale = want[..n].iter().fold(0f32, |m, x| m.max(x.abs()));
            let diff = got[..n]
                .iter()
                .zip(&want[..n])
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            worst_layer = worst_layer.max(diff / scale);
            assert!(
                diff <= LAYER_REL * scale,
                "{name} step {step} layer {il}: {diff} of {scale}"
            );
        }
        pos += tokens.len();
        tokens = vec![fwd.argmax(ctx).unwrap()[0]];
    }
    eprintln!("{name}: logits NMSE {worst_logits:.2e}, layers {worst_layer:.2e}");
}

#[test]
fn every_layer_and_the_logits_match_the_cpu_oracle() {
    let ctx = common::gpu::ctx();
    let tmp = common::temp_dir("qwen35-oracle");
    against_oracle(&ctx, &common::qwen35_tiny(tmp.path(), 9));
    // Q8_0, and the seed's 1-bit / ternary types (Q1_0, PrismML's legacy 128-element Q2_0).
    for preset in [
        "qwen35-tiny-q8_0",
        "qwen35-tiny-q1_0",
        "qwen35-tiny-q2_0-g128",
    ] {
        let path = tmp.path().join(format!("{preset}.gguf"));
        let st = Command::new(env!("CARGO_BIN_EXE_flint"))
            .args(["gguf", "preset", preset])
            .arg(&path)
            .args(["--weights", "random", "--seed", "4"])
            .output()
            .unwrap();
        assert!(st.status.success());
        against_oracle(&ctx, &path);
    }
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/qwen35");
    for name in ["tiny-a", "tiny-b", "tiny-c", "tiny-a-q1"] {
        against_oracle(&ctx, &data.join(format!("{name}.gguf")));
    }
    common::gpu::assert_clean(&ctx);
}

/// Every buffer the hybrid forward creates is planned with exactly its bytes, and every planned
/// buffer is created: weights (the gated attention's q | k | v stacked where the family stacks
/// them, recorded as `a+b+c`), KV for the attention layers only, the DeltaNet scratch, the
/// recurrent state and its rollback copy.
#[test]
fn the_hybrid_allocates_exactly_its_plan() {
    use flint::memory::{self, Budget, DeviceLimits, Kind, TargetShape};
    use flint::model::forward::Allocator;
    use flint::model::{weights, Hparams};
    let ctx = common::gpu::ctx();
    let tmp = common::temp_dir("qwen35-plan");
    let file = GgufFile::open(&common::qwen35_tiny(tmp.path(), 2)).unwrap();
    let hp = Hparams::from_gguf(&file).unwrap();
    let params = flint::memory::RunParams {
        verify_rows: 8,
        ..common::forward::params(256, 16)
    };
    let target = TargetShape {
        hp: &hp,
        tensors: &file.tensors,
    };
    let budget = Budget::resolve(None, Some(&ctx));
    let plan = memory::forward_plan(
        target,
        None,
        &params,
        budget,
        DeviceLimits::from_context(&ctx),
    );
    assert_eq!(
        plan.buffers.iter().filter(|b| b.kind == Kind::Kv).count(),
        4
    );
    assert_eq!(
        plan.buffers
            .iter()
            .filter(|b| b.kind == Kind::Recurrent)
            .count(),
        12
    );
    let w = weights::load(&ctx, &file, &hp, false).unwrap();
    let mut records = w.allocations.clone();
    let mut alloc = Allocator::new(&ctx, &plan);
    let fwd = Forward::new(&ctx, hp, w, &params, &mut alloc).unwrap();
    records.extend(alloc.records.iter().cloned());
    let mut seen = std::collections::HashSet::new();
    for (name, bytes) in &records {
        let parts: Vec<&str> = name.split('+').collect();
        let planned: u64 = parts
            .iter()
            .map(|p| {
                plan.get(p)
                    .unwrap_or_else(|| panic!("{p} allocated, not planned"))
                    .bytes
            })
            .sum();
        assert_eq!(*bytes, planned, "{name}: allocated vs planned");
        seen.extend(parts);
    }
    for b in &plan.buffers {
        assert!(
            seen.contains(b.name.as_str()),
            "{} planned, not allocated",
            b.name
        );
    }
    drop(fwd);
}
