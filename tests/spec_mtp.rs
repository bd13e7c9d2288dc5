//! Drafting with a `qwen35` file's own MTP (`nextn`) block (`--spec-type draft-mtp`), held to
//! llama.cpp b11434: `tests/data/mtp/tiny-mtp.gguf` and `tiny-mtp-moe.gguf` (`qwen35moe`)
//! (gguf-py, F32, one MTP block; written by `scripts/llamacpp_mtp/gen_tiny_mtp.py`) and what
//! llama-server generated from 6 prompts of
//! token ids, greedily, with `--spec-type draft-mtp --spec-draft-n-max N` for N = 1, 2, 3 and
//! without speculation (`scripts/llamacpp_mtp/run_oracle.py`, tests/data/mtp/README.md).
//!
//! - greedy tokens with MTP drafting are flint's plain greedy tokens, and llama.cpp's;
//! - the drafted and accepted counts of each prompt equal llama.cpp's (`timings.draft_n`,
//!   `draft_n_accepted`): the outside oracle for the MTP step itself (pairing each row's token
//!   with the target's h of the row before, the block with its own K/V rows, the chained
//!   drafts), since a draft that differs from llama.cpp's changes the accepted count where the
//!   target's token differs.

use std::collections::HashMap;
use std::path::Path;

use crate::common::stats::{chi_square, p_value};

use crate::common::batch::Req;
use flint::engine::batch_run::{settle, step, Ended, SeqState};
use flint::engine::solo::{generate, Request};
use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::sampling::{Sampler, SamplerParams};
use serde_json::Value;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mtp");

fn engine(model: &Path, draft: Option<DraftOptions>) -> Engine {
    engine_n(model, draft, 1)
}

fn engine_n(model: &Path, draft: Option<DraftOptions>, n_seq: u32) -> Engine {
    let opts = EngineOptions {
        model: model.to_path_buf(),
        n_ctx: 512,
        n_ubatch: 16,
        draft,
        ..EngineOptions::default()
    };
    Engine::load(&opts, n_seq).unwrap()
}

/// Greedy tokens of `prompt` (every one of `n`, end tokens included, as llama.cpp's
/// `ignore_eos`) and the (drafted, accepted) counts.
fn run(eng: &mut Engine, prompt: &[u32], n: usize) -> (Vec<u32>, u64, u64) {
    eng.reset(0).unwrap();
    let req = Request {
        prompt,
        keep: 0,
        n_predict: n,
        sampler: None,
        grammar: &mut None,
        ignore_eos: true,
        draft: true,
    };
    let s = generate(eng, req, |_| Ok(true)).unwrap();
    let (d, a) = s.spec.map_or((0, 0), |s| (s.drafted, s.accepted));
    (s.generated_token_ids, d, a)
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn fixture() -> Value {
    fixture_of("tiny-mtp")
}

fn fixture_of(name: &str) -> Value {
    let path = Path::new(DATA).join(format!("{name}.llama_cpp.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn prompts(fx: &Value) -> Vec<Vec<u32>> {
    fx["prompts"].as_array().unwrap().iter().map(ids).collect()
}

#[test]
fn greedy_tokens_with_mtp_drafting_are_the_plain_tokens() {
    let model = Path::new(DATA).join("tiny-mtp.gguf");
    let fx = fixture();
    let n = fx["n_predict"].as_u64().unwrap() as usize;
    let prompts = prompts(&fx);
    let mut eng = engine(&model, None);
    let plain: Vec<Vec<u32>> = prompts.iter().map(|p| run(&mut eng, p, n).0).collect();
    drop(eng);
    for n_max in [1, 2, 3, 5] {
        let mut eng = engine(&model, Some(DraftOptions::mtp(model.clone(), n_max)));
        let (mut drafted, mut accepted) = (0, 0);
        for (i, p) in prompts.iter().enumerate() {
            let (tokens, d, a) = run(&mut eng, p, n);
            assert_eq!(tokens, plain[i], "n_max {n_max} prompt {i}");
            assert!(
                a <= d && d > 0,
                "n_max {n_max} prompt {i}: {d} drafted, {a} accepted"
            );
            eprintln!("n_max {n_max} prompt {i}: drafted {d} accepted {a}");
            (drafted, accepted) = (drafted + d, accepted + a);
        }
        // The file's MTP block is a drafter that is right part of the time.
        assert!(
            accepted > 0 && accepted < drafted,
            "n_max {n_max}: {accepted}/{drafted}"
        );
    }
}

/// `name`.gguf's plain and MTP greedy tokens and (drafted, accepted) counts against
/// llama.cpp's (`name`.llama_cpp.json).
fn held_to_llama_cpp(name: &str) {
    let model = Path::new(DATA).join(format!("{name}.gguf"));
    let fx = fixture_of(name);
    let n = fx["n_predict"].as_u64().unwrap() as usize;
    let prompts = prompts(&fx);
    let plain_llama: Vec<Vec<u32>> = fx["plain"].as_array().unwrap().iter().map(ids).collect();
    let mut eng = engine(&model, None);
    let plain: Vec<Vec<u32>> = prompts.iter().map(|p| run(&mut eng, p, n).0).collect();
    drop(eng);
    assert_eq!(
        plain, plain_llama,
        "plain greedy tokens against llama.cpp's"
    );
    for (n_max, rows) in fx["mtp"].as_object().unwrap() {
        let n_max: u32 = n_max.parse().unwrap();
        let d = DraftOptions::mtp(model.clone(), n_max);
        let mut eng = engine(&model, Some(d));
        for (i, (p, want)) in prompts.iter().zip(rows.as_array().unwrap()).enumerate() {
            let (tokens, drafted, accepted) = run(&mut eng, p, n);
            eprintln!("n_max {n_max} prompt {i}: drafted {drafted} accepted {accepted}");
            assert_eq!(
                tokens, plain[i],
                "n_max {n_max} prompt {i}: tokens with MTP"
            );
            assert_eq!(
                tokens,
                ids(&want["tokens"]),
                "n_max {n_max} prompt {i}: llama.cpp's"
            );
            let llama = (
                want["drafted"].as_u64().unwrap(),
                want["accepted"].as_u64().unwrap(),
            );
            assert_eq!(
                (drafted, accepted),
                llama,
                "n_max {n_max} prompt {i}: (drafted, accepted)"
            );
        }
    }
}

#[test]
fn greedy_mtp_drafts_and_accepts_what_llama_cpp_does() {
    held_to_llama_cpp("tiny-mtp");
}

/// The same on `qwen35moe` (the MTP block's FFN is experts and a shared expert).
#[test]
fn greedy_mtp_on_qwen35moe_drafts_and_accepts_what_llama_cpp_does() {
    held_to_llama_cpp("tiny-mtp-moe");
}

/// `prompts` batched on `eng` (request `i` on sequence `i`, admitted at step `2 i`), greedy,
/// `n` tokens each: (tokens, drafted, accepted) per request.
fn batched(eng: &mut Engine, prompts: &[Vec<u32>], n: usize) -> Vec<(Vec<u32>, u64, u64)> {
    let mut active: Vec<Req> = Vec::new();
    let mut got = vec![(Vec::new(), 0, 0); prompts.len()];
    let (mut steps, mut admitted) = (0usize, 0usize);
    while admitted < prompts.len() || !active.is_empty() {
        while admitted < prompts.len() && admitted * 2 <= steps {
            eng.reset(admitted).unwrap();
            let st = SeqState::new(admitted, prompts[admitted].clone(), 0, n, None, true);
            active.push(Req {
                st,
                eog: Vec::new(),
                fail_at: None,
            });
            admitted += 1;
        }
        let mut ended = step(eng, &mut active).unwrap();
        steps += 1;
        ended.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        for (i, end) in ended {
            assert!(matches!(end, Ended::End(())), "request {i}: {end:?}");
            let mut r = active.remove(i);
            settle(eng, &mut r.st).unwrap();
            let p = r.st.pending.as_ref().unwrap();
            got[r.st.seq] = (r.st.generated.clone(), p.spec.drafted, p.spec.accepted);
        }
    }
    got
}

/// What `serve -np 3 --spec-type draft-mtp` runs: concurrent greedy requests in one engine,
/// each sequence with its own MTP drafter (the weights once), give what each gives alone.
#[test]
fn concurrent_greedy_requests_with_mtp_give_their_solo_tokens_and_counts() {
    let model = Path::new(DATA).join("tiny-mtp.gguf");
    let fx = fixture();
    let n = fx["n_predict"].as_u64().unwrap() as usize;
    let prompts: Vec<Vec<u32>> = prompts(&fx).into_iter().take(3).collect();
    let d = DraftOptions::mtp(model.clone(), 2);
    let mut eng = engine(&model, Some(d.clone()));
    let alone: Vec<_> = prompts.iter().map(|p| run(&mut eng, p, n)).collect();
    drop(eng);
    let mut eng = engine_n(&model, Some(d), 3);
    assert_eq!(eng.drafters.len(), 3);
    let got = batched(&mut eng, &prompts, n);
    for (i, (g, w)) in got.iter().zip(&alone).enumerate() {
        assert_eq!(
            g, w,
            "request {i}: (tokens, drafted, accepted), batched vs alone"
        );
    }
}

/// Sampled runs of `prompt`, 3 tokens each (the first decode step drafts one token, verified
/// by rejection sampling; an accepted one brings the third): how often each (t1, t2, t3) came,
/// and (drafted, accepted) over all runs.
fn triples(
    eng: &mut Engine,
    prompt: &[u32],
    runs: u64,
    seed0: u64,
) -> (HashMap<Vec<u32>, f64>, u64, u64) {
    let mut counts = HashMap::new();
    let (mut drafted, mut accepted) = (0, 0);
    for r in 0..runs {
        let params = SamplerParams {
            temp: 1.0,
            top_k: 3,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: seed0 + r,
        };
        let mut sampler = Sampler::new(params, eng.fwd.hp().n_vocab).unwrap();
        eng.reset(0).unwrap();
        let req = Request {
            prompt,
            keep: 0,
            n_predict: 3,
            sampler: Some(&mut sampler),
            grammar: &mut None,
            ignore_eos: true,
            draft: true,
        };
        let s = generate(eng, req, |_| Ok(true)).unwrap();
        if let Some(sp) = s.spec {
            (drafted, accepted) = (drafted + sp.drafted, accepted + sp.accepted);
        }
        *counts.entry(s.generated_token_ids).or_insert(0.0) += 1.0;
    }
    (counts, drafted, accepted)
}

/// Rejection sampling with MTP drafts keeps the target's distribution: the (t1, t2, t3)
/// frequencies of sampled runs with MTP drafting and of plain sampled runs are one
/// distribution (chi-square test of homogeneity, p ≥ 0.001; cells of expected count < 5
/// merged).
#[test]
fn rejection_sampling_with_mtp_drafts_keeps_the_target_distribution() {
    const RUNS: u64 = 1000;
    let model = Path::new(DATA).join("tiny-mtp.gguf");
    let prompt = &prompts(&fixture())[1];
    let mut eng = engine(&model, None);
    let (plain, _, _) = triples(&mut eng, prompt, RUNS, 1);
    drop(eng);
    let mut eng = engine(&model, Some(DraftOptions::mtp(model.clone(), 1)));
    let (spec, drafted, accepted) = triples(&mut eng, prompt, RUNS, 100_000);
    eprintln!("{accepted} of {drafted} sampled MTP drafts accepted");
    assert!(drafted >= RUNS && accepted > 0 && accepted < drafted);
    let mut keys: Vec<&Vec<u32>> = plain.keys().chain(spec.keys()).collect();
    keys.sort();
    keys.dedup();
    let a: Vec<f64> = keys
        .iter()
        .map(|k| spec.get(*k).copied().unwrap_or(0.0))
        .collect();
    let b: Vec<f64> = keys
        .iter()
        .map(|k| plain.get(*k).copied().unwrap_or(0.0))
        .collect();
    let mean: Vec<f64> = a.iter().zip(&b).map(|(x, y)| (x + y) / 2.0).collect();
    let (chi_a, df) = chi_square(&a, &mean);
    let (chi_b, _) = chi_square(&b, &mean);
    let p = p_value(chi_a + chi_b, df);
    eprintln!(
        "{} cells, chi2 {:.1}, df {df}, p {p:.3}",
        keys.len(),
        chi_a + chi_b
    );
    assert!(p >= 0.001, "chi2 {:.1}, df {df}, p {p:.2e}", chi_a + chi_b);
}
