//! The recurrent state's log on a hybrid (`qwen35`) target with steps of more than 4096 rows
//! (the most rows a rollback replays), ubatches of 4160 rows:
//! - a rollback to the checkpoint (a verify batch all rejected, or a prefix reuse that ends at
//!   it) then one step of 4100 rows: the state is restored before that step, so every layer's
//!   output for every row is bit-identical to a fresh pass over the same tokens;
//! - a refused step leaves the log as it was: its rows never join those a later rollback
//!   replays, and a restore waiting for the next step (a long step refused right after a
//!   rollback to the checkpoint) is still done by that next step;
//! - the engine with a drafter injecting chunks of 4160 rows (`--spec-draft-ubatch`): a second
//!   turn that keeps the prefix up to the checkpoint the speculation left, then a prompt of
//!   4100 rows in one step, leaves the logits of a fresh engine running the whole sequence.
//!
//! The rows the long step runs after the rollback decide the outcome: a recurrent state that
//! was not restored shows in the first of them (the decay wipes it out before the last), so
//! the checks read every row (each layer's output), or the attention over all of them.

mod common;

use std::path::Path;

use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::gguf::GgufFile;
use flint::gpu::GpuContext;
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::model::forward::Forward;

/// Rows of one ubatch: above the 4096 rows a rollback replays.
const UBATCH: u32 = 4160;
/// Rows of the long step.
const LONG: usize = 4100;
/// Context rows: a short prefix and the long step.
const N_CTX: u32 = 4352;

/// A forward with ubatches of [`UBATCH`] rows and verify batches of 8.
fn forward(ctx: &GpuContext, file: &GgufFile) -> Forward {
    let params = flint::memory::RunParams {
        verify_rows: 8,
        ..common::forward::params(N_CTX, UBATCH)
    };
    let fwd = common::forward::gpu_forward(ctx, file, &params);
    assert!(fwd.is_recurrent() && fwd.max_rows() == UBATCH);
    fwd
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The first row where two captures of every layer's output differ, `None` if none does.
fn first_difference(a: &[Vec<f32>], b: &[Vec<f32>], d: usize) -> Option<(usize, usize)> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).enumerate().find_map(|(il, (x, y))| {
        let row = x
            .chunks(d)
            .zip(y.chunks(d))
            .position(|(p, q)| bits(p) != bits(q))?;
        Some((il, row))
    })
}

#[test]
fn a_long_step_after_a_rollback_to_the_checkpoint_starts_from_the_checkpoint() {
    let ctx = common::gpu::ctx();
    let tmp = common::temp_dir("rlog-long");
    let file = GgufFile::open(&common::qwen35_tiny(tmp.path(), 7)).unwrap();
    let mut fwd = forward(&ctx, &file);
    let d = fwd.hp.n_embd as usize;
    let ids = common::random_tokens(11, 16 + 5 + LONG, fwd.hp.n_vocab);
    let (prompt, rest) = ids.split_at(16);
    let (rejected, long) = rest.split_at(5);
    fwd.step(&ctx, prompt, 1).unwrap();
    // A verify batch whose rows are all rejected: back to the checkpoint, nothing to replay.
    fwd.checkpoint().unwrap();
    fwd.step(&ctx, rejected, 5).unwrap();
    fwd.truncate(&ctx, 16).unwrap();
    let t = std::time::Instant::now();
    let got = fwd.step_captured(&ctx, long, 1).unwrap();
    eprintln!("{LONG} rows: {:.1} s", t.elapsed().as_secs_f64());
    let got_logits = fwd.logits(&ctx).unwrap();
    let mut fresh = forward(&ctx, &file);
    fresh.step(&ctx, prompt, 1).unwrap();
    let want = fresh.step_captured(&ctx, long, 1).unwrap();
    assert_eq!(
        first_difference(&got, &want, d),
        None,
        "(layer, row) after the rollback"
    );
    assert_eq!(bits(&got_logits), bits(&fresh.logits(&ctx).unwrap()));
    assert_eq!(fwd.kv.len(0).unwrap(), fresh.kv.len(0).unwrap());
    // Past the replay limit the checkpoint is dropped: only the whole sequence or row 0 remain.
    let len = fwd.kv.len(0).unwrap();
    assert!(!fwd.can_truncate(16) && fwd.can_truncate(len) && fwd.can_truncate(0));
    common::gpu::assert_clean(&ctx);
}

#[test]
fn a_refused_step_never_joins_the_replay() {
    let ctx = common::gpu::ctx();
    let tmp = common::temp_dir("rlog-refused");
    let file = GgufFile::open(&common::qwen35_tiny(tmp.path(), 3)).unwrap();
    let mut fwd = forward(&ctx, &file);
    let mut fresh = forward(&ctx, &file);
    let d = fwd.hp.n_embd as usize;
    let v = fwd.hp.n_vocab;
    let ids = common::random_tokens(5, 16 + 4 + 3, v);
    let (prompt, rest) = ids.split_at(16);
    let (verify, next) = rest.split_at(4);
    let junk = common::random_tokens(77, 2, v);
    // A step refused after the checkpoint (more logit rows than rows) runs no row, so a
    // rollback into the next step's rows replays that step's rows, not the refused ones.
    fwd.step(&ctx, prompt, 1).unwrap();
    fwd.checkpoint().unwrap();
    fwd.step(&ctx, verify, 4).unwrap();
    assert!(fwd.step(&ctx, &junk, 3).is_err());
    fwd.step(&ctx, next, 3).unwrap();
    fwd.truncate(&ctx, 16 + 4 + 1).unwrap();
    let got = fwd.step_captured(&ctx, &next[1..], 2).unwrap();
    fresh.step(&ctx, prompt, 1).unwrap();
    fresh.step(&ctx, verify, 4).unwrap();
    fresh.step(&ctx, &next[..1], 1).unwrap();
    let want = fresh.step_captured(&ctx, &next[1..], 2).unwrap();
    assert_eq!(first_difference(&got, &want, d), None, "after the replay");
    assert_eq!(
        bits(&fwd.logits(&ctx).unwrap()),
        bits(&fresh.logits(&ctx).unwrap())
    );
    common::gpu::assert_clean(&ctx);
}

#[test]
fn a_restore_waits_through_a_refused_step() {
    let ctx = common::gpu::ctx();
    let tmp = common::temp_dir("rlog-restore");
    let file = GgufFile::open(&common::qwen35_tiny(tmp.path(), 4)).unwrap();
    let (mut fwd, mut fresh) = (forward(&ctx, &file), forward(&ctx, &file));
    let d = fwd.hp.n_embd as usize;
    let v = fwd.hp.n_vocab;
    let ids = common::random_tokens(6, 16 + 4 + 3, v);
    let (prompt, rest) = ids.split_at(16);
    let (verify, next) = rest.split_at(4);
    // A step of more than the replay limit refused right after a rollback to the checkpoint:
    // the restore waiting for the next step is still done by it.
    fwd.step(&ctx, prompt, 1).unwrap();
    fwd.checkpoint().unwrap();
    fwd.step(&ctx, verify, 4).unwrap();
    fwd.truncate(&ctx, 16).unwrap();
    let long = common::random_tokens(9, LONG, v);
    assert!(fwd.step(&ctx, &long, LONG as u32).is_err());
    let got = fwd.step_captured(&ctx, next, 3).unwrap();
    fresh.step(&ctx, prompt, 1).unwrap();
    let want = fresh.step_captured(&ctx, next, 3).unwrap();
    assert_eq!(
        first_difference(&got, &want, d),
        None,
        "after the refused step"
    );
    assert_eq!(
        bits(&fwd.logits(&ctx).unwrap()),
        bits(&fresh.logits(&ctx).unwrap())
    );
    common::gpu::assert_clean(&ctx);
}

fn engine(model: &Path, draft: Option<DraftOptions>) -> Engine {
    Engine::load(
        &EngineOptions {
            model: model.to_path_buf(),
            n_ctx: N_CTX,
            n_ubatch: UBATCH,
            verify_rows: 8,
            draft,
            ..EngineOptions::default()
        },
        1,
    )
    .unwrap()
}

#[test]
fn a_long_prompt_after_prefix_reuse_at_the_checkpoint_with_a_drafter() {
    let tmp = common::temp_dir("rlog-engine");
    let model = common::qwen35_tiny(tmp.path(), 21);
    let dpath = tmp.path().join("drafter.gguf");
    let opts = InitOptions {
        block: 4,
        seed: 5,
        ..InitOptions::default()
    };
    random_drafter(&GgufFile::open(&model).unwrap(), &opts)
        .unwrap()
        .write_file(&dpath)
        .unwrap();
    let mut d = DraftOptions::new(dpath);
    d.inject_chunk = UBATCH;
    d.window = false;
    d.bypass = false;
    let mut eng = engine(&model, Some(d));
    assert_eq!(eng.fwd.max_rows(), UBATCH);
    // A first turn, speculating: every verify batch checkpoints the state.
    let first = eng.tok.encode("first turn of a chat", true, true).unwrap();
    let s = common::generate(&mut eng, &first, 12, None, true);
    assert!(s.spec.as_ref().is_some_and(|s| s.cycles > 0), "{s:?}");
    let mut cached = Vec::new();
    flint::engine::solo::note_cached(
        &mut cached,
        &first,
        &s.generated_token_ids,
        eng.fwd.kv().len(0).unwrap(),
    );
    let len = eng.fwd.kv().len(0).unwrap();
    assert_eq!(len as usize, cached.len());
    // The checkpoint: the first row the state can go back to (any row from it on can).
    let ckpt = (1..len)
        .find(|&p| eng.fwd.can_truncate(0, p))
        .expect("a checkpoint inside the cached rows") as usize;
    // The next prompt diverges right at the checkpoint and runs 4100 rows in one step.
    let mut tail = common::random_tokens(13, LONG, eng.fwd.hp().n_vocab);
    if let Some(&c) = cached.get(ckpt) {
        if tail[0] == c {
            tail[0] = (c + 1) % eng.fwd.hp().n_vocab;
        }
    }
    let next: Vec<u32> = cached[..ckpt].iter().chain(&tail).copied().collect();
    let kept = flint::engine::solo::keep_prefix(&mut eng, &mut cached, &next).unwrap();
    assert_eq!(kept, ckpt);
    let s = common::continue_with(&mut eng, &next, kept, 1, None, true);
    let got = eng.fwd.logits(&eng.ctx).unwrap();
    // A fresh engine without a drafter, the same rows in the same steps.
    let mut fresh = engine(&model, None);
    fresh.prefill(0, &next[..kept]).unwrap();
    let f = common::continue_with(&mut fresh, &next, kept, 1, None, true);
    assert_eq!(s.generated_token_ids, f.generated_token_ids);
    let want = fresh.fwd.logits(&fresh.ctx).unwrap();
    let e = common::gpu::nmse(&got, &want);
    assert!(e == 0.0, "logits NMSE {e:e} against a fresh engine");
}
