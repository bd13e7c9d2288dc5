//! Batched attention's split-KV path (`model::forward::batch_attn`): sequences whose decode rows
//! see more than one 256-key split, batched beside a short one, give exactly their solo greedy
//! tokens through the single-sequence engine (held to the CPU oracle and llama.cpp elsewhere)
//! with the split path forced for every eligible segment (`FLINT_ATTN_PARALLELISM` large) and
//! with it off (`0`: the fused kernel everywhere), and the forced run did take it.
//!
//! One test: the override is read when a forward is built, so the runs set it in turn.

mod common;

use flint::engine::batch::BatchEngine;
use flint::engine::batching::{plan_step, Work};
use flint::engine::{Engine, EngineOptions};
use flint::model::forward::batch::Segment;
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
    let mut eng = Engine::load(&opts()).unwrap();
    prompts
        .iter()
        .map(|p| {
            eng.reset().unwrap();
            let stats = eng
                .generate_plain(p, N_PREDICT, None, |_| Ok(true))
                .unwrap();
            stats.generated_token_ids
        })
        .collect()
}

/// Every prompt admitted at step 0, prompts in chunks under the row budget beside the decode
/// rows, greedy from the step's argmax (no end-of-generation stop: random text).
fn batched(prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let n = prompts.len();
    let mut eng = BatchEngine::load(&opts(), n as u32).unwrap();
    let mut fed = vec![0usize; n];
    let mut next: Vec<Option<u32>> = vec![None; n];
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); n];
    while out.iter().any(|o| o.len() < N_PREDICT) {
        let work: Vec<Work> = (0..n)
            .filter(|&s| out[s].len() < N_PREDICT)
            .map(|s| Work {
                seq: s,
                prompt_left: prompts[s].len() - fed[s],
            })
            .collect();
        let rows = plan_step(&work, eng.fwd.max_rows() as usize);
        let mut segs = Vec::new();
        let mut logits_of = Vec::new();
        for &(s, m) in &rows {
            let (tokens, logits) = if fed[s] < prompts[s].len() {
                let part = &prompts[s][fed[s]..fed[s] + m];
                (part, fed[s] + m == prompts[s].len())
            } else {
                (std::slice::from_ref(next[s].as_ref().unwrap()), true)
            };
            segs.push(Segment {
                seq: s,
                tokens,
                n_logits: u32::from(logits),
            });
            if logits {
                logits_of.push(s);
            }
        }
        eng.step(&segs).unwrap();
        for &(s, m) in &rows {
            if fed[s] < prompts[s].len() {
                fed[s] += m;
            }
        }
        let ids = eng.fwd.argmax(&eng.ctx).unwrap();
        assert_eq!(ids.len(), logits_of.len());
        for (&s, &t) in logits_of.iter().zip(&ids) {
            out[s].push(t);
            next[s] = Some(t);
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
