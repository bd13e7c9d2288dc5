//! Batched attention's split-KV path (`model::forward::batch_attn`): sequences whose decode rows
//! see more than one 256-key split, batched beside a short one, give exactly their solo greedy
//! tokens through the single-sequence engine (held to the CPU oracle and llama.cpp elsewhere)
//! with the split path forced for every eligible segment (`FLINT_ATTN_PARALLELISM` large) and
//! with it off (`0`: the fused kernel everywhere), and the forced run did take it.
//!
//! One test: the override is read when a forward is built, so the runs set it in turn.

mod common;

use common::batch::Req;
use flint::engine::batch_run::{step, Ended, SeqState};
use flint::engine::{Engine, EngineOptions};
use flint::model::forward::batch_attn::{split_calls, PARALLELISM_ENV};

const N_PREDICT: usize = 8;

fn opts() -> EngineOptions {
    EngineOptions {
        model: common::model_path(),
        n_ctx: 512,
        n_ubatch: 64,
        ..EngineOptions::default()
    }
}

/// `n` token ids in 100..10100 from a fixed LCG (random text: greedy equality needs no meaning).
fn prompt(n: usize, seed: u64) -> Vec<u32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            100 + ((x >> 33) % 10000) as u32
        })
        .collect()
}

fn alone(prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let mut eng = Engine::load(&opts(), 1).unwrap();
    prompts
        .iter()
        .map(|p| {
            eng.reset(0).unwrap();
            let stats = common::generate(&mut eng, p, N_PREDICT, None, false);
            stats.generated_token_ids
        })
        .collect()
}

/// Every prompt admitted at step 0 and run by the batched scheduler (`engine::batch_run`, what
/// `flint serve` runs): prompts in chunks under the row budget beside the decode rows, greedy,
/// no end-of-generation stop (random text).
fn batched(prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let n = prompts.len();
    let mut eng = Engine::load(&opts(), n as u32).unwrap();
    let mut active: Vec<Req> = prompts
        .iter()
        .enumerate()
        .map(|(seq, p)| Req {
            st: SeqState::new(seq, p.clone(), 0, N_PREDICT, None, false),
            eog: Vec::new(),
            fail_at: None,
        })
        .collect();
    let mut out = vec![Vec::new(); n];
    while !active.is_empty() {
        let mut ended = step(&mut eng, &mut active).unwrap();
        ended.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        for (i, end) in ended {
            assert!(matches!(end, Ended::End(())), "request {i}: {end:?}");
            let r = active.remove(i);
            out[r.st.seq] = r.st.generated;
        }
    }
    out
}

#[test]
fn split_path_gives_the_solo_tokens() {
    // 20 prompt rows: never more than one split; 262 and 270: every decode row sees 2, and
    // their decode rows share steps (the later one at a row0 past 0).
    let prompts = vec![prompt(20, 2), prompt(262, 1), prompt(270, 3)];
    let want = alone(&prompts);
    for (parallelism, splits) in [("0", false), ("1000000", true)] {
        std::env::set_var(PARALLELISM_ENV, parallelism);
        let before = split_calls();
        let got = batched(&prompts);
        let taken = split_calls() - before;
        for (s, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(w.len(), N_PREDICT);
            assert_eq!(g, w, "sequence {s}, {PARALLELISM_ENV}={parallelism}");
        }
        // Forced: each long sequence's decode rows, at every attention layer, took it.
        if splits {
            assert!(taken >= 2 * (N_PREDICT as u64 - 1), "{taken} split calls");
        } else {
            assert_eq!(taken, 0);
        }
    }
    std::env::remove_var(PARALLELISM_ENV);
}
