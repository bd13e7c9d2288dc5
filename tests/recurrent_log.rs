//! A hybrid (`qwen35`) target's rollback with steps of more than 4096 rows (the most rows a
//! rollback replays), ubatches of 4160 rows, through the engine with a drafter injecting
//! chunks of 4160 rows (`--spec-draft-ubatch`): a second turn that keeps the prefix up to the
//! checkpoint the speculation left, then a prompt of 4100 rows in one step, leaves the logits
//! of a fresh engine running the whole sequence. A recurrent state that was not restored
//! shows in the first rows of the long step (the decay wipes it out before the last), which
//! the attention of the last row reads.

use crate::common;

use std::path::Path;

use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::gguf::GgufFile;
use flint::model::drafter_init::{random_drafter, InitOptions};

/// Rows of one ubatch: above the 4096 rows a rollback replays.
const UBATCH: u32 = 4160;
/// Rows of the long step.
const LONG: usize = 4100;
/// Context rows: a short prefix and the long step.
const N_CTX: u32 = 4352;

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
