//! Hybrid (`qwen35`) sequences in batched steps, held to the single-sequence engine (which the
//! CPU oracle and llama.cpp's logits hold, `tests/model_qwen35*.rs`):
//! - 8 sequences admitted at different steps, with prompts chunked by a 16-row ubatch, give
//!   exactly their solo greedy tokens;
//! - the same 8 with a drafter per slot: each request's tokens and its (drafted, accepted)
//!   counts equal its solo speculative run (every rejected draft rolls that sequence's state back);
//! - rollbacks forced in one sequence leave its neighbour's logits bit for bit;
//! - a slot reused for a second turn keeps the prefix (and the rows recomputed are counted),
//!   comes back to its checkpoint when the prompt diverges after it, and starts over when the
//!   prompt diverges before it: the tokens are the solo run's each time.

use crate::common;

use std::path::{Path, PathBuf};

use common::batch::Req;
use flint::engine::batch_run::{settle, step, Ended, SeqState};
use flint::engine::Engine;
use flint::engine::{DraftOptions, EngineOptions};
use flint::gguf::GgufFile;
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::model::forward::batch::Segment;

const N_PREDICT: usize = 10;

fn opts(model: &Path, draft: Option<DraftOptions>) -> EngineOptions {
    EngineOptions {
        model: model.to_path_buf(),
        n_ctx: 256,
        n_ubatch: 16,
        draft,
        ..EngineOptions::default()
    }
}

fn model(tmp: &Path) -> PathBuf {
    common::random_preset(tmp, "qwen35-tiny-f32", 21)
}

/// A random drafter of block `gamma` for `model`, never bypassed.
fn drafter(tmp: &Path, model: &Path, gamma: u32) -> DraftOptions {
    let target = GgufFile::open(model).unwrap();
    let init = InitOptions {
        block: gamma,
        seed: 5,
        ..InitOptions::default()
    };
    let path = tmp.join(format!("drafter-{gamma}.gguf"));
    random_drafter(&target, &init)
        .unwrap()
        .write_file(&path)
        .unwrap();
    let mut d = DraftOptions::new(path);
    d.bypass = false;
    d
}

/// Prompts of 3 to 40 random tokens (several chunks of 16 for the longer ones).
fn prompts(n: usize, vocab: u32) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| common::random_tokens(100 + i as u64, 3 + (i * 37) % 38, vocab))
        .collect()
}

/// Each prompt alone on the single-sequence engine: (tokens, drafted, accepted).
fn solo(
    model: &Path,
    draft: Option<DraftOptions>,
    prompts: &[Vec<u32>],
) -> Vec<(Vec<u32>, u64, u64)> {
    let mut eng = common::engine(model, 256, draft);
    prompts
        .iter()
        .map(|p| {
            eng.reset(0).unwrap();
            let s = common::generate(&mut eng, p, N_PREDICT, None, true);
            let (d, a) = s.spec.map_or((0, 0), |s| (s.drafted, s.accepted));
            (s.generated_token_ids, d, a)
        })
        .collect()
}

/// Runs `prompts` batched, request `i` admitted at step `2 i`, until all end.
fn batched(eng: &mut Engine, prompts: &[Vec<u32>], eog: &[u32]) -> Vec<(Vec<u32>, u64, u64)> {
    let drafting = !eng.drafters.is_empty();
    let mut active: Vec<Req> = Vec::new();
    let mut got = vec![(Vec::new(), 0, 0); prompts.len()];
    let mut steps = 0usize;
    let mut admitted = 0usize;
    while admitted < prompts.len() || !active.is_empty() {
        while admitted < prompts.len() && admitted * 2 <= steps {
            let p = prompts[admitted].clone();
            eng.fwd.reset(admitted).unwrap();
            if let Some(d) = eng.drafters.get_mut(admitted) {
                d.reset();
            }
            active.push(Req {
                st: SeqState::new(admitted, p, 0, N_PREDICT, None, drafting),
                eog: eog.to_vec(),
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
            let (d, a) =
                r.st.pending
                    .as_ref()
                    .map_or((0, 0), |p| (p.spec.drafted, p.spec.accepted));
            got[r.st.seq] = (r.st.generated.clone(), d, a);
        }
    }
    got
}

fn eog_of(eng: &Engine) -> Vec<u32> {
    (0..eng.fwd.hp().n_vocab)
        .filter(|&t| eng.tok.is_eog(t))
        .collect()
}

#[test]
fn eight_sequences_admitted_apart_give_their_solo_tokens_plain_and_speculative() {
    let tmp = common::temp_dir("batch-hybrid");
    let model = model(tmp.path());
    let mut eng = Engine::load(&opts(&model, None), 8).unwrap();
    let prompts = prompts(8, eng.fwd.hp().n_vocab);
    let eog = eog_of(&eng);
    let want = solo(&model, None, &prompts);
    let got = batched(&mut eng, &prompts, &eog);
    for (s, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(g.0, w.0, "request {s}: tokens, batched vs alone");
    }
    drop(eng);

    let d = drafter(tmp.path(), &model, 4);
    let mut eng = Engine::load(&opts(&model, Some(d.clone())), 8).unwrap();
    let want = solo(&model, Some(d), &prompts);
    let got = batched(&mut eng, &prompts, &eog);
    for (s, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(g.0, w.0, "request {s}: tokens, batched vs alone");
        assert_eq!((g.1, g.2), (w.1, w.2), "request {s}: (drafted, accepted)");
    }
    let drafted: u64 = got.iter().map(|g| g.1).sum();
    let accepted: u64 = got.iter().map(|g| g.2).sum();
    assert!(
        drafted > accepted,
        "no draft was rejected: no rollback was tested"
    );
    eprintln!("8 hybrid requests: {accepted} of {drafted} drafts accepted, as each alone");
}

#[test]
fn rollbacks_in_one_sequence_leave_the_neighbours_bits() {
    let tmp = common::temp_dir("batch-hybrid-iso");
    let model = model(tmp.path());
    let mut eng = Engine::load(&opts(&model, None), 2).unwrap();
    let vocab = eng.fwd.hp().n_vocab;
    let p = common::random_tokens(7, 10, vocab);
    let q = common::random_tokens(8, 6, vocab);
    // (sequence 0 with rollbacks forced in between, sequence 1 decoding) or each plain.
    let mut run = |rollbacks: bool| -> (Vec<Vec<f32>>, Vec<u32>) {
        eng.fwd.reset(0).unwrap();
        eng.fwd.reset(1).unwrap();
        let segs = [
            Segment {
                seq: 0,
                tokens: &p,
                n_logits: 1,
            },
            Segment {
                seq: 1,
                tokens: &q,
                n_logits: 1,
            },
        ];
        eng.step(&segs).unwrap();
        let mut logits = Vec::new();
        let mut ids = eng.fwd.argmax(&eng.ctx).unwrap();
        for k in 0..6u32 {
            if rollbacks {
                // Four wrong drafts verified, then cut back to the anchor (a full rejection),
                // every other round with a second, shorter verify before the cut.
                eng.fwd.checkpoint(0).unwrap();
                let len = eng.fwd.kv().len(0).unwrap();
                let junk = [ids[0], (k * 31 + 5) % vocab, 9, 11, 13];
                let segs = [Segment {
                    seq: 0,
                    tokens: &junk,
                    n_logits: 1,
                }];
                eng.step(&segs).unwrap();
                if k % 2 == 1 {
                    eng.fwd.truncate(0, len + 2).unwrap();
                    let segs = [Segment {
                        seq: 0,
                        tokens: &junk[..1],
                        n_logits: 1,
                    }];
                    eng.step(&segs).unwrap();
                }
                eng.fwd.truncate(0, len).unwrap();
            }
            let (a, b) = (ids[0], ids[1]);
            let segs = [
                Segment {
                    seq: 0,
                    tokens: &[a],
                    n_logits: 1,
                },
                Segment {
                    seq: 1,
                    tokens: &[b],
                    n_logits: 1,
                },
            ];
            eng.step(&segs).unwrap();
            logits.push(eng.fwd.logits(&eng.ctx).unwrap());
            ids = eng.fwd.argmax(&eng.ctx).unwrap();
        }
        (logits, ids)
    };
    let (plain, plain_ids) = run(false);
    let (rolled, rolled_ids) = run(true);
    assert_eq!(plain_ids, rolled_ids);
    for (k, (a, b)) in plain.iter().zip(&rolled).enumerate() {
        let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(
            same,
            "step {k}: logits differ after rollbacks (both sequences' rows)"
        );
    }
}

#[test]
fn a_reused_slot_keeps_its_prefix_comes_back_to_its_checkpoint_or_starts_over() {
    let tmp = common::temp_dir("batch-hybrid-reuse");
    let model = model(tmp.path());
    let mut eng = Engine::load(&opts(&model, None), 2).unwrap();
    let vocab = eng.fwd.hp().n_vocab;
    let eog = eog_of(&eng);
    let first = common::random_tokens(31, 24, vocab);
    // Turn 1 on slot 1 (beside an idle slot 0).
    let got = run_one(&mut eng, 1, &first, 0, &eog);
    // The rows in the cache: every token run (the last one too when an end token followed it).
    let in_cache = first.len() + got.len() - usize::from(got.len() == N_PREDICT);
    assert_eq!(eng.fwd.kv().len(1).unwrap() as usize, in_cache);
    let cached: Vec<u32> = first.iter().chain(&got).take(in_cache).copied().collect();
    let tail = common::random_tokens(32, 6, vocab);
    // (prompt, rows the slot keeps, rows run again from the checkpoint)
    let extend: Vec<u32> = cached.iter().chain(&tail).copied().collect();
    let mut after_ckpt = cached[..first.len() + 3].to_vec();
    after_ckpt.extend(&tail);
    let mut before_ckpt = first[..first.len() - 4].to_vec();
    before_ckpt.extend(&tail);
    let cases = [
        (extend, cached.len(), 0),
        (after_ckpt, first.len() + 3, 3),
        (before_ckpt, 0, 0),
    ];
    for (k, (prompt, keep_want, replay)) in cases.into_iter().enumerate() {
        // Back to the end of turn 1 first: the slot holds `cached` again.
        restore_turn1(&mut eng, &first, &eog);
        let common = cached
            .iter()
            .zip(&prompt)
            .take_while(|(a, b)| a == b)
            .count();
        let mut keep = common.min(prompt.len() - 1);
        if !eng.fwd.can_truncate(1, keep as u32) {
            keep = 0;
        }
        assert_eq!(keep, keep_want, "case {k}: rows kept");
        eng.fwd.truncate(1, keep as u32).unwrap();
        assert_eq!(eng.fwd.replay_rows(1), replay, "case {k}: rows to replay");
        let before = eng.fwd.rows_run();
        let got = run_one(&mut eng, 1, &prompt, keep, &eog);
        let rows = eng.fwd.rows_run() - before;
        let sampled = got.len() + usize::from(got.len() < N_PREDICT);
        assert_eq!(
            rows as usize,
            prompt.len() - keep + replay + sampled - 1,
            "case {k}: rows recomputed"
        );
        let want = solo(&model, None, std::slice::from_ref(&prompt));
        assert_eq!(got, want[0].0, "case {k}: tokens vs a fresh solo run");
    }
}

/// Turn 1 again on slot 1 from scratch (its state as at the end of turn 1).
fn restore_turn1(eng: &mut Engine, first: &[u32], eog: &[u32]) {
    eng.fwd.reset(1).unwrap();
    run_one(eng, 1, first, 0, eog);
}

/// One greedy request on `seq` whose cache holds `prompt[..keep]`.
fn run_one(eng: &mut Engine, seq: usize, prompt: &[u32], keep: usize, eog: &[u32]) -> Vec<u32> {
    let mut active = vec![Req {
        st: SeqState::new(seq, prompt.to_vec(), keep, N_PREDICT, None, false),
        eog: eog.to_vec(),
        fail_at: None,
    }];
    loop {
        let ended = step(eng, &mut active).unwrap();
        if let Some((_, end)) = ended.into_iter().next() {
            assert!(matches!(end, Ended::End(())), "{end:?}");
            return active.remove(0).st.generated;
        }
    }
}
