//! Stochastic speculative acceptance is lossless: with a drafter whose
//! distribution differs from the target's (tokens the drafter never proposes, tokens the
//! target never emits), the first token a cycle emits follows the target sampler's
//! distribution (chi-square goodness of fit) and matches plain `Sampler::sample` (chi-square
//! homogeneity), and the first draft is accepted at the analytic rate `Σ min(p_t, p_d)`.
//! 20,000 draws per case, fixed seeds, fail at p < 0.001.

use crate::common;

use common::stats::{chi_square, p_value};
use flint::sampling::{Sampler, SamplerParams, Xoshiro256StarStar};
use flint::speculative::accept::{accept_sampled, draft_distribution, draft_sample};
use statrs::distribution::{ContinuousCDF, Normal};

const V: usize = 50;
const DRAWS: usize = 20_000;
const P_FAIL: f64 = 1e-3;
/// Drafts per cycle: the first emitted token depends on row 0 only, the rest exercise the walk.
const DRAFTS: usize = 3;

/// One fixed (target, drafter) pair.
struct Case {
    name: &'static str,
    target: Vec<f32>,
    draft: Vec<f32>,
    params: SamplerParams,
    draft_temp: f32,
}

/// The ids of the `n` largest logits.
fn top_ids(logits: &[f32], n: usize) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..logits.len()).collect();
    ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    ids.truncate(n);
    ids
}

/// Fixed-seed logits in `[-scale, scale)`.
fn logits(seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = Xoshiro256StarStar::new(seed);
    (0..V)
        .map(|_| ((rng.next_f64() * 2.0 - 1.0) as f32) * scale)
        .collect()
}

fn params(temp: f32, top_k: u32, top_p: f32, min_p: f32, seed: u64) -> SamplerParams {
    SamplerParams {
        temp,
        top_k,
        top_p,
        min_p,
        seed,
        ..SamplerParams::default()
    }
}

fn cases() -> Vec<Case> {
    // Each drafter also never proposes the target's two favourite tokens.
    // 1: T = 1, no filters. The target never emits 40..50 (the drafter favours them); the
    //    drafter never proposes 0..10.
    let mut target = logits(1, 3.0);
    let mut draft = logits(2, 3.0);
    target[40..].fill(f32::NEG_INFINITY);
    draft[..10].fill(f32::NEG_INFINITY);
    draft[40..].iter_mut().for_each(|x| *x += 3.0);
    top_ids(&target, 2)
        .into_iter()
        .for_each(|i| draft[i] = f32::NEG_INFINITY);
    let disjoint = Case {
        name: "disjoint supports, T = 1",
        target,
        draft,
        params: params(1.0, 0, 1.0, 0.0, 11),
        draft_temp: 1.0,
    };
    // 2: a sharp target cut by top-k against a flat drafter over everything.
    let target = logits(3, 6.0);
    let mut draft = logits(4, 0.5);
    top_ids(&target, 2)
        .into_iter()
        .for_each(|i| draft[i] = f32::NEG_INFINITY);
    let sharp = Case {
        name: "sharp target with top-k 30 vs flat drafter, T = 1",
        target,
        draft,
        params: params(1.0, 30, 1.0, 0.0, 12),
        draft_temp: 1.0,
    };
    // 3: an overconfident drafter peaked on a middling target token and on one that min-p
    //    cuts (target logit -6); target with top-p and min-p at T = 0.8.
    let mut target = logits(5, 2.0);
    target[V - 1] = -6.0;
    let mut draft = logits(6, 1.0);
    let middling = (0..V)
        .filter(|&i| target[i] > -0.5 && target[i] < 0.5)
        .min()
        .unwrap_or(0);
    draft[middling] = 8.0;
    draft[V - 1] = 7.0;
    top_ids(&target, 2)
        .into_iter()
        .for_each(|i| draft[i] = f32::NEG_INFINITY);
    let peaked = Case {
        name: "peaked drafter vs top-p 0.9 / min-p 0.02, T = 0.8",
        target,
        draft,
        params: params(0.8, 0, 0.9, 0.02, 13),
        draft_temp: 0.8,
    };
    vec![disjoint, sharp, peaked]
}

/// The emitted-first-token counts of `DRAWS` cycles, and how often the first draft was accepted.
fn speculative_counts(case: &Case, p_d: &[f32]) -> (Vec<f64>, usize) {
    let mut sampler = Sampler::new(case.params, V as u32).expect("valid params");
    let mut rng = Xoshiro256StarStar::new(case.params.seed ^ 0xDEAD_BEEF);
    let target_rows = case.target.repeat(DRAFTS + 1);
    let draft_rows = p_d.repeat(DRAFTS);
    let mut counts = vec![0.0; V];
    let mut first_accepted = 0;
    for _ in 0..DRAWS {
        let drafts: Vec<u32> = (0..DRAFTS).map(|_| draft_sample(p_d, &mut rng)).collect();
        let verdict = accept_sampled(&mut sampler, &drafts, &draft_rows, &target_rows, V)
            .expect("shapes agree");
        let first = if verdict.accepted > 0 {
            first_accepted += 1;
            drafts[0]
        } else {
            verdict.next
        };
        counts[first as usize] += 1.0;
    }
    (counts, first_accepted)
}

#[test]
fn first_emitted_token_follows_the_target() {
    for case in cases() {
        let p_t = Sampler::new(case.params, V as u32)
            .expect("valid params")
            .candidates(&case.target);
        let mut target = vec![0.0f64; V];
        for &(id, p) in &p_t {
            target[id as usize] = f64::from(p);
        }
        let p_d = draft_distribution(&case.draft, case.draft_temp);
        // The case must really differ: mass on both sides that the other lacks.
        let only_draft = p_d.iter().zip(&target).any(|(&d, &t)| d > 0.01 && t == 0.0);
        let only_target = p_d.iter().zip(&target).any(|(&d, &t)| d == 0.0 && t > 0.01);
        assert!(only_draft && only_target, "{}: supports overlap", case.name);

        let (counts, first_accepted) = speculative_counts(&case, &p_d);
        for (id, (&c, &t)) in counts.iter().zip(&target).enumerate() {
            assert!(t > 0.0 || c == 0.0, "{}: emitted {id}, p_t = 0", case.name);
        }
        let expected: Vec<f64> = target.iter().map(|t| t * DRAWS as f64).collect();
        let (chi2, df) = chi_square(&counts, &expected);
        let p = p_value(chi2, df);
        assert!(
            p >= P_FAIL,
            "{}: chi2 {chi2:.1}, df {df}, p {p:.2e}",
            case.name
        );

        // The first draft is accepted with probability Σ min(p_t, p_d) (binomial, normal
        // approximation): a verifier that always rejected and drew from p_t would pass the
        // test above but not this one.
        let rate: f64 = p_d
            .iter()
            .zip(&target)
            .map(|(&d, &t)| f64::from(d).min(t))
            .sum();
        let n = DRAWS as f64;
        let z = (first_accepted as f64 - n * rate) / (n * rate * (1.0 - rate)).sqrt();
        let normal = Normal::new(0.0, 1.0).expect("standard normal");
        let p = 2.0 * normal.sf(z.abs());
        assert!(
            p >= P_FAIL,
            "{}: first draft accepted {first_accepted} of {DRAWS}, expected rate {rate:.4}, p {p:.2e}",
            case.name
        );
    }
}

#[test]
fn speculative_matches_plain_sampling() {
    for case in cases() {
        let p_d = draft_distribution(&case.draft, case.draft_temp);
        let (spec, _) = speculative_counts(&case, &p_d);
        let plain_params = SamplerParams {
            seed: case.params.seed + 1000,
            ..case.params
        };
        let mut sampler = Sampler::new(plain_params, V as u32).expect("valid params");
        let mut plain = vec![0.0f64; V];
        for _ in 0..DRAWS {
            plain[sampler.sample(&case.target) as usize] += 1.0;
        }
        // Homogeneity of two samples of equal size: expected count of each cell is the mean
        // of the two; bins with expected < 5 are merged.
        let mean: Vec<f64> = spec
            .iter()
            .zip(&plain)
            .map(|(a, b)| (a + b) / 2.0)
            .collect();
        let (chi_a, df) = chi_square(&spec, &mean);
        let (chi_b, _) = chi_square(&plain, &mean);
        let p = p_value(chi_a + chi_b, df);
        assert!(
            p >= P_FAIL,
            "{}: chi2 {:.1}, df {df}, p {p:.2e}",
            case.name,
            chi_a + chi_b
        );
    }
}
