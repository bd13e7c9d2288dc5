//! Speculative decoding equivalence on the real model (the DSpark
//! issue's acceptance): greedy output with a drafter — a random-weight DSpark drafter, an
//! always-wrong drafter, an oracle replaying the target's own greedy tokens — is identical to
//! plain decoding, for several block sizes; the counters are consistent; the oracle accepts
//! everything; rollback after full rejection leaks nothing; a prompt longer than the injection
//! chunk keeps speculating; the drafter's non-KV buffers do not change with the context.
//!
//! Scale: `FLINT_SPEC_PROMPTS` prompts × `FLINT_SPEC_TOKENS` new tokens per block size. The
//! defaults (4 × 16) keep the suite within CI's time on lavapipe, where a verify batch of 17
//! rows costs about 1 s; the full scale is `FLINT_SPEC_PROMPTS=20
//! FLINT_SPEC_TOKENS=128` (docs/DSPARK.md gives its figures); `FLINT_SPEC_GAMMAS=7,16` picks
//! block sizes.

use crate::common;

use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::gguf::GgufFile;
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::speculative::adversarial::{Adversary, AdversaryKind};
use flint::speculative::SpecStats;

const PROMPTS: [&str; 20] = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether?",
    "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total does it take?",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "def is_palindrome(s: str) -> bool:\n",
    "Write a Python function that returns the largest element of a list.",
    "Compose an engaging travel blog post about a recent trip to Hawaii.",
    "Explain the difference between a list and a tuple in Python.",
    "What are the main causes of climate change?",
    "Give three tips for staying healthy.",
    "Describe the water cycle in simple terms.",
    "Once upon a time, in a small village by the sea,",
    "The capital of France is",
    "Translate to French: The weather is nice today.",
    "List the planets of the solar system in order.",
    "If a train travels 60 miles per hour for 3 hours, how far does it go?",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "What is the boiling point of water at sea level?",
    "Write a haiku about autumn leaves.",
    "How do I reverse a string in JavaScript?",
    "Why is the sky blue?",
];

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn drafter_file(dir: &std::path::Path, block: u32, seed: u64) -> std::path::PathBuf {
    let target = GgufFile::open(&common::model_path()).unwrap();
    let opts = InitOptions {
        block,
        seed,
        ..InitOptions::default()
    };
    let path = dir.join(format!("drafter-b{block}-s{seed}.gguf"));
    random_drafter(&target, &opts)
        .unwrap()
        .write_file(&path)
        .unwrap();
    path
}

fn engine(n_ctx: u32, draft: Option<DraftOptions>) -> Engine {
    Engine::load(
        &EngineOptions {
            model: common::model_path(),
            n_ctx,
            n_ubatch: 64,
            draft,
            ..EngineOptions::default()
        },
        1,
    )
    .unwrap()
}

fn plain(eng: &mut Engine, prompt: &[u32], n: usize) -> Vec<u32> {
    eng.reset(0).unwrap();
    let s = common::generate(eng, prompt, n, None, false);
    s.generated_token_ids
}

/// accepted ≤ drafted; every target forward emits its accepted drafts plus one token (the
/// first token comes from the prefill); a generation cut short by an end token may stop inside
/// a cycle.
fn check_counters(what: &str, out: &[u32], s: &SpecStats, n: usize) {
    assert!(s.accepted <= s.drafted, "{what}: {s:?}");
    let emitted = out.len().saturating_sub(1) as u64;
    if out.len() == n {
        assert_eq!(emitted, s.accepted + s.target_forwards, "{what}: {s:?}");
    } else {
        assert!(emitted <= s.accepted + s.target_forwards, "{what}: {s:?}");
    }
}

#[test]
fn greedy_output_is_identical_with_every_drafter() {
    let n_prompts = env_usize("FLINT_SPEC_PROMPTS", 4).min(PROMPTS.len());
    let n = env_usize("FLINT_SPEC_TOKENS", 16);
    let tmp = common::temp_dir("spec-equivalence");
    let dir = tmp.path();
    let mut eng = engine(1024, None);
    let prompts: Vec<Vec<u32>> = PROMPTS[..n_prompts]
        .iter()
        .map(|p| eng.tok.encode(p, true, true).unwrap())
        .collect();
    let expected: Vec<Vec<u32>> = prompts.iter().map(|p| plain(&mut eng, p, n)).collect();
    let n_vocab = eng.fwd.hp().n_vocab;
    let gammas: Vec<u32> = std::env::var("FLINT_SPEC_GAMMAS")
        .ok()
        .map(|v| v.split(',').filter_map(|g| g.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 4, 7, 16]);
    for gamma in gammas {
        let path = drafter_file(dir, gamma, 11);
        let mut deng = engine(1024, Some(DraftOptions::new(path)));
        let mut dspark = common::drive::take(&mut deng);
        for (p, want) in prompts.iter().zip(&expected) {
            let seq: Vec<u32> = p.iter().chain(want).copied().collect();
            let kinds = [AdversaryKind::Oracle, AdversaryKind::AlwaysWrong];
            for kind in kinds {
                let mut adv: common::drive::Slot =
                    Box::new(Adversary::new(kind, seq.clone(), gamma, n_vocab));
                let (out, s) = common::drive::speculate(&mut deng, &mut adv, gamma, p, n);
                let what = format!("{kind:?} γ={gamma}");
                assert_eq!(&out, want, "{what}: output differs from plain decoding");
                check_counters(&what, &out, &s, n);
                match kind {
                    AdversaryKind::Oracle => {
                        // A generation that ended at an end token: the oracle does not know
                        // that token (plain output leaves it out), so the last cycle's drafts
                        // from there on may miss; no other cycle may.
                        let misses = u64::from(gamma) * u64::from(out.len() < n);
                        assert!(
                            s.drafted - s.accepted <= misses,
                            "{what}: oracle rejected: {s:?}"
                        );
                        if n > gamma as usize + 1 && out.len() == n {
                            assert!(s.slot_acceptance()[gamma as usize - 1] == 1.0);
                        }
                    }
                    AdversaryKind::AlwaysWrong => assert_eq!(s.accepted, 0, "{what}: {s:?}"),
                    AdversaryKind::Partial => {}
                }
            }
            let (out, s) = common::drive::speculate(&mut deng, &mut dspark, gamma, p, n);
            assert_eq!(&out, want, "random DSpark γ={gamma}: output differs");
            check_counters(&format!("random DSpark γ={gamma}"), &out, &s, n);
            if out.len() > 1 {
                assert!(s.cycles > 0, "the DSpark drafter never drafted: {s:?}");
            }
        }
    }
}
