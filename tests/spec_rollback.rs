//! Rollback, chunked injection and memory of speculative decoding on the real model
//! (the DSpark issue's acceptance):
//! - forced 100 % rejection (an always-wrong drafter, γ = 16) over 20 sequential generations at
//!   `-c 512`: each output equals plain decoding, the target's and the drafter's rows stay in
//!   step, and both are empty after a reset (nothing leaks from one request to the next);
//! - a prompt of `n_ctx − 8` tokens with γ = 16 runs to the end of the context without a write
//!   past it (the forward pass refuses rows past its cache, so such a write is an error);
//! - a prompt longer than the injection chunk `U` is injected in chunks and speculation goes on;
//! - the drafter's non-KV buffers are the same at `-c 1024` and `-c 8192`.
//!
//! Scale: `FLINT_SPEC_ROLLBACK_TOKENS` (default 8) new tokens per sequential generation.

use crate::common;

use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::gguf::GgufFile;
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::speculative::adversarial::{Adversary, AdversaryKind};
use flint::speculative::{SpecOptions, VerifyPolicy};

fn engine(n_ctx: u32, n_ubatch: u32, draft: Option<DraftOptions>) -> Engine {
    Engine::load(
        &EngineOptions {
            model: common::model_path(),
            n_ctx,
            n_ubatch,
            draft,
            ..EngineOptions::default()
        },
        1,
    )
    .unwrap()
}

fn drafter_path(dir: &std::path::Path, block: u32) -> std::path::PathBuf {
    let target = GgufFile::open(&common::model_path()).unwrap();
    let path = dir.join(format!("drafter-b{block}.gguf"));
    let opts = InitOptions {
        block,
        seed: 21,
        ..InitOptions::default()
    };
    random_drafter(&target, &opts)
        .unwrap()
        .write_file(&path)
        .unwrap();
    path
}

fn fixed(n_max: u32) -> SpecOptions {
    SpecOptions {
        n_max,
        policy: VerifyPolicy::Fixed,
        bypass: None,
    }
}

fn plain(eng: &mut Engine, prompt: &[u32], n: usize) -> Vec<u32> {
    eng.reset(0).unwrap();
    let s = common::generate(eng, prompt, n, None, false);
    s.generated_token_ids
}

#[test]
fn full_rejection_over_sequential_requests_leaks_nothing() {
    let n = std::env::var("FLINT_SPEC_ROLLBACK_TOKENS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8usize);
    // A target planned for verify batches of 17 rows.
    let tmp = common::temp_dir("spec-rollback");
    let dir = tmp.path();
    let mut eng = engine(512, 64, Some(DraftOptions::new(drafter_path(dir, 16))));
    let texts = [
        "Once upon a time, in a small village by the sea, there lived",
        "The history of the printing press begins in the fifteenth century, when",
    ];
    let prompts: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| eng.tok.encode(t, true, true).unwrap())
        .collect();
    let want: Vec<Vec<u32>> = prompts.iter().map(|p| plain(&mut eng, p, n)).collect();
    let n_vocab = eng.fwd.hp().n_vocab;
    assert_eq!(flint::memory::batch::logit_rows(eng.params()), 17);
    for i in 0..20 {
        let (p, w) = (&prompts[i % 2], &want[i % 2]);
        let seq: Vec<u32> = p.iter().chain(w).copied().collect();
        let mut adv: common::drive::Slot =
            Box::new(Adversary::new(AdversaryKind::AlwaysWrong, seq, 16, n_vocab));
        eng.reset(0).unwrap();
        assert_eq!(
            eng.fwd.kv().len(0).unwrap(),
            0,
            "request {i}: cache not empty"
        );
        let s = common::drive::run_spec(&mut eng, &mut adv, fixed(16), p, n, None);
        assert_eq!(&s.generated_token_ids, w, "request {i}: output differs");
        let spec = s.spec.unwrap();
        assert_eq!(spec.accepted, 0);
        // The target holds the prompt and every generated token but the last (not yet run);
        // the drafter holds exactly the same rows.
        // (An end token stops after its row ran.)
        let rows = (p.len() + w.len() - usize::from(w.len() == n)) as u32;
        assert_eq!(eng.fwd.kv().len(0).unwrap(), rows, "request {i}");
        assert_eq!(
            adv.next_position(),
            rows,
            "request {i}: drafter out of step"
        );
    }
}

#[test]
fn a_prompt_near_the_context_end_never_writes_past_it() {
    let tmp = common::temp_dir("spec-ctx-end");
    let dir = tmp.path();
    let mut d = DraftOptions::new(drafter_path(dir, 16));
    d.inject_chunk = 128;
    let mut eng = engine(512, 128, Some(d));
    let words = "one two three four five six seven eight nine ten ".repeat(60);
    let mut prompt = eng.tok.encode(&words, true, true).unwrap();
    prompt.truncate(512 - 8);
    let spec = eng.spec.clone().unwrap();
    let mut ds = common::drive::take(&mut eng);
    let want = plain(&mut eng, &prompt, 64);
    eng.reset(0).unwrap();
    ds.reset();
    let s = common::drive::run_spec(&mut eng, &mut ds, spec, &prompt, 64, None);
    assert_eq!(s.generated_token_ids, want);
    assert!(eng.fwd.kv().len(0).unwrap() <= 512);
    assert_eq!(ds.next_position(), eng.fwd.kv().len(0).unwrap());
    let spec = s.spec.unwrap();
    assert!(spec.cycles > 0, "{spec:?}");
}

#[test]
fn a_prompt_longer_than_the_chunk_is_injected_in_chunks_and_speculation_goes_on() {
    let tmp = common::temp_dir("spec-chunks");
    let dir = tmp.path();
    let mut d = DraftOptions::new(drafter_path(dir, 4));
    d.inject_chunk = 16;
    d.bypass = false;
    let mut eng = engine(512, 512, Some(d));
    // The target's ubatch is capped to U so each step's tap rows fit the staging buffer.
    assert_eq!(eng.fwd.max_rows(), 16);
    let prompt = eng
        .tok
        .encode(
            "The history of the printing press begins in the fifteenth century, when \
             Johannes Gutenberg combined movable metal type, oil-based inks and a wooden \
             press adapted from wine making. Within fifty years",
            true,
            true,
        )
        .unwrap();
    assert!(prompt.len() > 16, "prompt of {} tokens", prompt.len());
    let spec = eng.spec.clone().unwrap();
    let mut ds = common::drive::take(&mut eng);
    let want = plain(&mut eng, &prompt, 12);
    assert!(want.len() > 4, "the prompt must not end at once: {want:?}");
    eng.reset(0).unwrap();
    let s = common::drive::run_spec(&mut eng, &mut ds, spec, &prompt, 12, None);
    assert_eq!(s.generated_token_ids, want);
    let spec = s.spec.unwrap();
    assert!(
        spec.cycles > 0,
        "speculation fell back to plain decoding: {spec:?}"
    );
    assert_eq!(spec.bypassed, 0);
    assert_eq!(ds.next_position(), eng.fwd.kv().len(0).unwrap());
}

#[test]
fn drafter_compute_buffers_do_not_grow_with_the_context() {
    let tmp = common::temp_dir("spec-memory");
    let dir = tmp.path();
    let path = drafter_path(dir, 7);
    let drafter_bufs = |n_ctx: u32| {
        let eng = engine(n_ctx, 512, Some(DraftOptions::new(path.clone())));
        let all: Vec<(String, u64)> = eng
            .allocated
            .iter()
            .filter(|(name, _)| name.starts_with("drafter."))
            .cloned()
            .collect();
        let (kv, rest): (Vec<_>, Vec<_>) = all
            .into_iter()
            .partition(|(name, _)| name.starts_with("drafter.kv."));
        (kv, rest)
    };
    let (kv_small, small) = drafter_bufs(1024);
    let (kv_large, large) = drafter_bufs(8192);
    assert!(!small.is_empty());
    assert_eq!(small, large, "drafter non-KV buffers changed with -c");
    let total = |v: &[(String, u64)]| v.iter().map(|b| b.1).sum::<u64>();
    assert!(
        total(&kv_large) > total(&kv_small),
        "the drafter's KV grows with -c"
    );
}
