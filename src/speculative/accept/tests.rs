//! Unit tests of greedy and stochastic verification and of the draft sampler.

use super::*;
use crate::sampling::SamplerParams;

/// Temperature 1, every filter and penalty off.
fn plain(seed: u64) -> SamplerParams {
    SamplerParams {
        temp: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplerParams::default()
    }
}

fn sampler(params: SamplerParams, n_vocab: u32) -> Sampler {
    Sampler::new(params, n_vocab).expect("valid test parameters")
}

/// Fixed-seed logits in `[-3, 3)`.
fn logits(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Xoshiro256StarStar::new(seed);
    (0..n)
        .map(|_| (rng.next_f64() * 6.0 - 3.0) as f32)
        .collect()
}

#[test]
fn greedy_all_accepted() {
    let v = accept_greedy(&[5, 6, 7], &[5, 6, 7, 8]).expect("shapes agree");
    assert_eq!(
        v,
        Verdict {
            accepted: 3,
            next: 8
        }
    );
}

#[test]
fn greedy_none_accepted() {
    let v = accept_greedy(&[5, 6, 7], &[9, 6, 7, 8]).expect("shapes agree");
    assert_eq!(
        v,
        Verdict {
            accepted: 0,
            next: 9
        }
    );
}

#[test]
fn greedy_stops_at_first_mismatch() {
    // Row 2 disagrees; row 3 agreeing again must not count.
    let v = accept_greedy(&[5, 6, 7, 1], &[5, 6, 4, 1, 2]).expect("shapes agree");
    assert_eq!(
        v,
        Verdict {
            accepted: 2,
            next: 4
        }
    );
}

#[test]
fn greedy_without_drafts_is_a_plain_step() {
    let v = accept_greedy(&[], &[3]).expect("shapes agree");
    assert_eq!(
        v,
        Verdict {
            accepted: 0,
            next: 3
        }
    );
}

#[test]
fn greedy_length_errors() {
    for rows in [&[][..], &[1, 2][..], &[1, 2, 3, 4][..]] {
        assert_eq!(
            accept_greedy(&[1, 2], rows),
            Err(AcceptError::TargetRows {
                drafts: 2,
                rows: rows.len()
            })
        );
    }
}

#[test]
fn sampled_shape_errors() {
    let mut s = sampler(plain(1), 4);
    let t = vec![0.0; 12];
    let d = vec![0.25; 8];
    assert_eq!(
        accept_sampled(&mut s, &[1, 2], &d, &t, 0),
        Err(AcceptError::ZeroVocab)
    );
    assert_eq!(
        accept_sampled(&mut s, &[1, 2], &d, &t, 3),
        Err(AcceptError::VocabMismatch {
            n_vocab: 3,
            sampler: 4
        })
    );
    assert_eq!(
        accept_sampled(&mut s, &[1, 2], &d, &t[..8], 4),
        Err(AcceptError::TargetLogits {
            len: 8,
            drafts: 2,
            n_vocab: 4
        })
    );
    assert_eq!(
        accept_sampled(&mut s, &[1, 2], &d[..4], &t, 4),
        Err(AcceptError::DraftProbs {
            len: 4,
            drafts: 2,
            n_vocab: 4
        })
    );
}

#[test]
fn sampled_identical_distributions_accept_everything() {
    const V: usize = 16;
    const L: usize = 4;
    for seed in 0..200u64 {
        let target = logits((L + 1) * V, seed);
        let mut s = sampler(plain(seed), V as u32);
        // p_d = p_t exactly: the sampler's own distribution of each row, made dense.
        let mut draft_probs = vec![0.0f32; L * V];
        for (row, out) in target.chunks_exact(V).zip(draft_probs.chunks_exact_mut(V)) {
            for (id, p) in s.candidates(row) {
                out[id as usize] = p;
            }
        }
        let mut rng = Xoshiro256StarStar::new(seed ^ 0xD5);
        let drafts: Vec<u32> = draft_probs
            .chunks_exact(V)
            .map(|row| draft_sample(row, &mut rng))
            .collect();
        let v = accept_sampled(&mut s, &drafts, &draft_probs, &target, V).expect("shapes");
        assert_eq!(v.accepted, L, "seed {seed}");
    }
}

#[test]
fn sampled_never_accepts_a_token_the_target_cannot_emit() {
    let mut target = logits(2 * 8, 3);
    target[5] = f32::NEG_INFINITY;
    let mut draft = vec![0.0f32; 8];
    draft[5] = 1.0;
    let mut s = sampler(plain(9), 8);
    for _ in 0..500 {
        let v = accept_sampled(&mut s, &[5], &draft, &target, 8).expect("shapes");
        assert_eq!(v.accepted, 0);
        assert_ne!(v.next, 5);
    }
}

#[test]
fn greedy_sampler_agrees_with_accept_greedy() {
    const V: usize = 12;
    let params = SamplerParams {
        seed: 4,
        ..SamplerParams::greedy()
    };
    let mut s = sampler(params, V as u32);
    let mut rng = Xoshiro256StarStar::new(77);
    for seed in 0..300u64 {
        let target = logits(4 * V, seed);
        let argmax: Vec<u32> = target
            .chunks_exact(V)
            .map(|r| sampler(params, V as u32).sample(r))
            .collect();
        // Drafts that follow the argmax for a random number of slots, then go wrong.
        let n_ok = (rng.next_u64() % 4) as usize;
        let drafts: Vec<u32> = (0..3)
            .map(|i| {
                if i < n_ok {
                    argmax[i]
                } else {
                    (argmax[i] + 1) % V as u32
                }
            })
            .collect();
        let draft_probs: Vec<f32> = drafts
            .iter()
            .flat_map(|&d| (0..V as u32).map(move |i| if i == d { 1.0 } else { 0.0 }))
            .collect();
        let got = accept_sampled(&mut s, &drafts, &draft_probs, &target, V).expect("shapes");
        assert_eq!(Ok(got), accept_greedy(&drafts, &argmax), "seed {seed}");
    }
}

#[test]
fn penalties_see_each_accepted_draft() {
    // Token 0 dominates every row; a huge presence penalty makes it impossible once emitted.
    let target = [10.0f32, 0.0, 0.0, 0.0].repeat(3);
    let one_hot = [1.0f32, 0.0, 0.0, 0.0].repeat(2);
    let penalized = SamplerParams {
        presence_penalty: 100.0,
        ..plain(5)
    };
    let v = accept_sampled(&mut sampler(penalized, 4), &[0, 0], &one_hot, &target, 4);
    let v = v.expect("shapes");
    assert_eq!(v.accepted, 1);
    assert_ne!(v.next, 0);
    let v = accept_sampled(&mut sampler(plain(5), 4), &[0, 0], &one_hot, &target, 4);
    assert_eq!(v.expect("shapes").accepted, 2);
}

#[test]
fn sampled_is_reproducible_per_seed() {
    const V: usize = 10;
    let target = logits(3 * V, 11);
    let draft_probs: Vec<f32> = logits(2 * V, 12)
        .chunks_exact(V)
        .flat_map(|row| draft_distribution(row, 1.0))
        .collect();
    let run = |seed| {
        let mut s = sampler(plain(seed), V as u32);
        (0..50)
            .map(|_| accept_sampled(&mut s, &[1, 2], &draft_probs, &target, V))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3), run(4));
}

#[test]
fn draft_sample_never_picks_zero_weight_ids() {
    let dist = [0.0, 0.5, f32::NAN, 0.5, -1.0];
    let mut rng = Xoshiro256StarStar::new(1);
    for _ in 0..1000 {
        assert!(matches!(draft_sample(&dist, &mut rng), 1 | 3));
    }
    assert_eq!(draft_sample(&[0.0, 0.0], &mut rng), 0);
}
