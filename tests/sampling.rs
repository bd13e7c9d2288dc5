//! Samplers (`flint::sampling`): greedy and ties, each filter against a plain full-sort
//! reference, penalties, determinism, the empirical distribution against `candidates`
//! (chi-square), defined behaviour on hostile logits, and parameter validation.

use flint::sampling::{softmax, Sampler, SamplerError, SamplerParams, Xoshiro256StarStar};

/// Uniform logits in `[-scale, scale)` from a fixed seed.
fn random_logits(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = Xoshiro256StarStar::new(seed);
    (0..n)
        .map(|_| ((rng.next_f64() * 2.0 - 1.0) as f32) * scale)
        .collect()
}

/// Penalties off and the given temperature and filters (`top_k` 0, `top_p` 1, `min_p` 0 = off).
fn chain(temp: f32, top_k: u32, top_p: f32, min_p: f32) -> SamplerParams {
    SamplerParams {
        temp,
        top_k,
        top_p,
        min_p,
        ..SamplerParams::default()
    }
}

/// Temperature 1 and every filter and penalty off.
fn plain() -> SamplerParams {
    chain(1.0, 0, 1.0, 0.0)
}

/// The chain written the obvious way: full sort, then each filter, probabilities in f64.
fn reference_chain(logits: &[f32], p: &SamplerParams) -> Vec<(u32, f64)> {
    let mut c: Vec<(u32, f32)> = (0u32..).zip(logits.iter().copied()).collect();
    c.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if p.top_k > 0 {
        c.truncate(p.top_k as usize);
    }
    if p.top_p < 1.0 {
        let max = f64::from(c[0].1);
        let z: f64 = c.iter().map(|x| (f64::from(x.1) - max).exp()).sum();
        let mut cum = 0.0;
        let mut keep = c.len();
        for (i, x) in c.iter().enumerate() {
            cum += (f64::from(x.1) - max).exp() / z;
            if cum >= f64::from(p.top_p) {
                keep = i + 1;
                break;
            }
        }
        c.truncate(keep);
    }
    if p.min_p > 0.0 {
        let threshold = f64::from(c[0].1) + f64::from(p.min_p).ln();
        c.retain(|x| f64::from(x.1) >= threshold);
    }
    let max = f64::from(c[0].1);
    let t = f64::from(p.temp);
    let w: Vec<f64> = c
        .iter()
        .map(|x| ((f64::from(x.1) - max) / t).exp())
        .collect();
    let z: f64 = w.iter().sum();
    c.iter().zip(&w).map(|(x, w)| (x.0, w / z)).collect()
}

fn assert_matches_reference(logits: &[f32], params: SamplerParams) {
    let mut s = Sampler::new(params, logits.len() as u32).unwrap();
    let got = s.candidates(logits);
    let want = reference_chain(logits, &params);
    let got_ids: Vec<u32> = got.iter().map(|x| x.0).collect();
    let want_ids: Vec<u32> = want.iter().map(|x| x.0).collect();
    assert_eq!(got_ids, want_ids, "kept ids for {params:?}");
    for (g, w) in got.iter().zip(&want) {
        assert!((f64::from(g.1) - w.1).abs() < 1e-6, "{g:?} vs {w:?}");
    }
    let sum: f64 = got.iter().map(|x| f64::from(x.1)).sum();
    assert!((sum - 1.0).abs() < 1e-5, "sum {sum}");
}

#[test]
fn greedy_is_argmax_with_ties_to_lowest_id() {
    let mut s = Sampler::new(SamplerParams::greedy(), 6).unwrap();
    assert_eq!(s.sample(&[0.1, 3.0, -2.0, 3.0, 1.0, 3.0]), 1);
    assert_eq!(s.sample(&[5.0, 5.0, 5.0, 5.0, 5.0, 5.0]), 0);
    assert_eq!(s.sample(&[-1.0, -2.0, -3.0, -4.0, -5.0, -0.5]), 5);
    assert_eq!(
        s.candidates(&[0.0, 0.0, 9.0, 9.0, 0.0, 0.0]),
        vec![(2, 1.0)]
    );
    // Greedy with default filters set (temp 0 overrides them) draws nothing: same every time.
    let params = SamplerParams {
        temp: 0.0,
        ..SamplerParams::default()
    };
    let logits = random_logits(5000, 1, 4.0);
    let want = reference_chain(&logits, &plain())[0].0;
    let mut s = Sampler::new(params, logits.len() as u32).unwrap();
    for _ in 0..5 {
        assert_eq!(s.sample(&logits), want);
    }
}

#[test]
fn top_k_matches_reference() {
    let logits = random_logits(3000, 2, 5.0);
    for k in [1, 2, 7, 40, 2999, 3000, 5000] {
        assert_matches_reference(&logits, chain(1.0, k, 1.0, 0.0));
    }
    // Ties at the cut go to the lowest ids.
    let tied = [1.0, 2.0, 2.0, 0.0, 2.0, 2.0];
    assert_matches_reference(&tied, chain(1.0, 2, 1.0, 0.0));
    let mut s = Sampler::new(chain(1.0, 2, 1.0, 0.0), 6).unwrap();
    let ids: Vec<u32> = s.candidates(&tied).iter().map(|x| x.0).collect();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn top_p_matches_reference() {
    // 5000 entries: the nucleus at p=0.99 is far past the first 256 sorted, so the
    // doubling partial sort is exercised.
    let logits = random_logits(5000, 3, 3.0);
    for p in [0.01, 0.3, 0.5, 0.9, 0.95, 0.99, 0.999_999] {
        assert_matches_reference(&logits, chain(1.0, 0, p, 0.0));
        assert_matches_reference(&logits, chain(1.0, 100, p, 0.0));
    }
}

#[test]
fn min_p_matches_reference() {
    // With top-p before it, min-p is the binding cut for large values, top-p for small ones.
    let logits = random_logits(4000, 4, 6.0);
    for m in [0.001, 0.05, 0.2, 0.9, 1.0] {
        assert_matches_reference(&logits, chain(1.0, 0, 1.0, m));
        assert_matches_reference(&logits, chain(1.0, 0, 0.9, m));
    }
}

#[test]
fn temperature_and_full_chain_match_reference() {
    let logits = random_logits(8000, 5, 8.0);
    for temp in [0.05, 0.5, 0.8, 1.0, 1.7, 10.0] {
        assert_matches_reference(&logits, chain(temp, 0, 1.0, 0.0));
        assert_matches_reference(&logits, chain(temp, 40, 0.95, 0.05));
        assert_matches_reference(&logits, chain(temp, 0, 0.8, 0.01));
    }
}

#[test]
fn penalties_change_the_right_logits() {
    let logits = [2.0, -1.0, 0.5, 3.0, 0.0, -2.0, 1.0];
    let params = SamplerParams {
        repeat_penalty: 2.0,
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
        repeat_last_n: 4,
        ..plain()
    };
    let mut s = Sampler::new(params, logits.len() as u32).unwrap();
    // Token 3 falls out of the 4-token window; 1 is seen twice, 0 and 4 once.
    for t in [3, 0, 1, 1, 4] {
        s.accept(t);
    }
    // The penalised logits and their softmax, worked out here in f64 (max subtracted), apart
    // from the library's arithmetic.
    let l: Vec<f64> = logits.iter().map(|&x| f64::from(x)).collect();
    let (rp, presence, freq) = (2.0f64, 0.5f64, 0.25f64);
    let expected = [
        l[0] / rp - freq - presence,       // positive: divided
        l[1] * rp - 2.0 * freq - presence, // negative: multiplied, seen twice
        l[2],
        l[3],                        // outside the window
        l[4] * rp - freq - presence, // zero counts as non-positive
        l[5],
        l[6],
    ];
    let max = expected.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = expected.iter().map(|&x| (x - max).exp()).collect();
    let z: f64 = weights.iter().sum();
    let want: Vec<f64> = weights.iter().map(|w| w / z).collect();
    let mut got = s.candidates(&logits);
    got.sort_by_key(|x| x.0);
    assert_eq!(got.len(), logits.len());
    // The worst difference measured is 1.51e-8 (the f32 rounding of the returned probabilities,
    // all below 0.5); the tolerance, 1.5e-7, is about ten times that.
    let tol = 1.5e-7;
    let worst = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (f64::from(g.1) - w).abs())
        .fold(0.0, f64::max);
    eprintln!("penalised softmax: worst difference {worst:.2e} (tolerance {tol:.1e})");
    assert!(worst <= tol, "worst {worst:e}: {got:?} vs {want:?}");
    // Greedy sees the penalties too: a heavy repeat penalty moves the argmax.
    let params = SamplerParams {
        repeat_penalty: 10.0,
        ..SamplerParams::greedy()
    };
    let mut g = Sampler::new(params, 3).unwrap();
    assert_eq!(g.sample(&[5.0, 1.0, 0.0]), 0);
    g.accept(0);
    assert_eq!(g.sample(&[5.0, 1.0, 0.0]), 1);
    // repeat_last_n = 0 turns penalties off; reset forgets the history.
    g.reset();
    assert_eq!(g.sample(&[5.0, 1.0, 0.0]), 0);
    let off = SamplerParams {
        repeat_last_n: 0,
        ..params
    };
    let mut g = Sampler::new(off, 3).unwrap();
    g.accept(0);
    assert_eq!(g.sample(&[5.0, 1.0, 0.0]), 0);
    // Out-of-range ids are ignored.
    g.accept(u32::MAX);
}

#[test]
fn seeded_runs_are_deterministic_and_seeds_differ() {
    let logits = random_logits(2000, 6, 2.0);
    let run = |seed: u64| -> Vec<u32> {
        let params = SamplerParams {
            seed,
            ..chain(1.0, 0, 0.99, 0.0)
        };
        let mut s = Sampler::new(params, logits.len() as u32).unwrap();
        (0..200).map(|_| s.sample(&logits)).collect()
    };
    let a = run(42);
    assert_eq!(a, run(42));
    assert_ne!(a, run(43));
    // reset restarts the stream.
    let params = SamplerParams {
        seed: 42,
        ..SamplerParams::default()
    };
    let mut s = Sampler::new(params, logits.len() as u32).unwrap();
    let first: Vec<u32> = (0..50).map(|_| s.sample(&logits)).collect();
    s.reset();
    let again: Vec<u32> = (0..50).map(|_| s.sample(&logits)).collect();
    assert_eq!(first, again);
}

/// Chi-square test of `n_draws` samples against `candidates`, bins with expected count < 5
/// pooled; the statistic is turned into a z-score by the Wilson–Hilferty approximation and
/// must be below 3.09 (p > 0.001).
fn chi_square_check(logits: &[f32], params: SamplerParams, n_draws: usize) {
    let mut s = Sampler::new(params, logits.len() as u32).unwrap();
    let cands = s.candidates(logits);
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..n_draws {
        let t = s.sample(logits) as usize;
        counts[t] += 1;
    }
    let kept: usize = cands.iter().map(|c| counts[c.0 as usize]).sum();
    assert_eq!(kept, n_draws, "a token outside the candidates was drawn");
    let (mut chi2, mut df) = (0.0f64, 0usize);
    let (mut pool_obs, mut pool_exp) = (0.0f64, 0.0f64);
    for &(id, p) in &cands {
        let e = f64::from(p) * n_draws as f64;
        let o = counts[id as usize] as f64;
        if e < 5.0 {
            pool_obs += o;
            pool_exp += e;
        } else {
            chi2 += (o - e).powi(2) / e;
            df += 1;
        }
    }
    if pool_exp > 0.0 {
        chi2 += (pool_obs - pool_exp).powi(2) / pool_exp;
        df += 1;
    }
    let k = (df - 1) as f64;
    let z = ((chi2 / k).cbrt() - (1.0 - 2.0 / (9.0 * k))) / (2.0 / (9.0 * k)).sqrt();
    assert!(
        z < 3.09,
        "chi2 {chi2:.1} with {k} dof (z = {z:.2}) for {params:?}"
    );
}

#[test]
fn empirical_distribution_matches_candidates() {
    let logits = random_logits(1000, 7, 3.0);
    let cases = [
        (1, chain(0.9, 40, 1.0, 0.0)),
        (2, chain(1.3, 0, 0.7, 0.0)),
        (3, chain(0.8, 40, 0.95, 0.05)),
    ];
    for (seed, params) in cases {
        chi_square_check(&logits, SamplerParams { seed, ..params }, 20_000);
    }
}

#[test]
fn hostile_logits_have_defined_results() {
    let nan = f32::NAN;
    let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
    for params in [SamplerParams::default(), SamplerParams::greedy(), plain()] {
        let mut s = Sampler::new(params, 4).unwrap();
        // All -inf, all NaN, empty: token 0 with probability 1.
        for row in [&[ninf; 4][..], &[nan; 4][..], &[][..]] {
            assert_eq!(s.sample(row), 0);
            assert_eq!(s.candidates(row), vec![(0, 1.0)]);
        }
        // NaN is -inf; +inf wins; two +inf split the mass (or tie to the lowest id).
        assert_eq!(s.sample(&[nan, ninf, 1.0, nan]), 2);
        assert_eq!(s.candidates(&[nan, inf, 1.0, 3.0]), vec![(1, 1.0)]);
        let split = s.candidates(&[1.0, inf, -1.0, inf]);
        assert_eq!(split[0].0, 1);
        // Short rows are padded with -inf, long rows cut at n_vocab.
        assert_eq!(s.sample(&[ninf, 2.0]), 1);
        assert_eq!(
            s.candidates(&[0.0, 0.0, 0.0, 0.0, 100.0]),
            s.candidates(&[0.0; 4])
        );
    }
    let mut s = Sampler::new(plain(), 4).unwrap();
    let split = s.candidates(&[1.0, inf, -1.0, inf]);
    assert_eq!(split, vec![(1, 0.5), (3, 0.5)]);
}

#[test]
fn softmax_and_draw() {
    let p = softmax(&[1.0, 2.0, 3.0], 1.0);
    let z: f32 = [1.0f32, 2.0, 3.0].iter().map(|x| x.exp()).sum();
    for (pi, x) in p.iter().zip([1.0f32, 2.0, 3.0]) {
        assert!((pi - x.exp() / z).abs() < 1e-6);
    }
    assert_eq!(softmax(&[1.0, 3.0, 3.0], 0.0), vec![0.0, 1.0, 0.0]);
    assert_eq!(softmax(&[f32::NAN, 0.0], 1.0), vec![0.0, 1.0]);
    assert_eq!(softmax(&[f32::NEG_INFINITY; 2], 1.0), vec![1.0, 0.0]);
    assert_eq!(
        softmax(&[0.0, -1e30, f32::NEG_INFINITY], f32::INFINITY),
        vec![0.5, 0.5, 0.0]
    );
    assert!(softmax(&[], 1.0).is_empty());

    let mut s = Sampler::new(SamplerParams::default(), 10).unwrap();
    assert_eq!(s.draw(&[]), None);
    assert_eq!(s.draw(&[(3, 0.0), (4, f32::NAN), (5, -1.0)]), None);
    assert_eq!(s.draw(&[(3, 0.0), (7, 2.0)]), Some(7));
    let u = s.uniform();
    assert!((0.0..1.0).contains(&u));
}

/// Full Qwen-sized rows through every path (top-k, adaptive top-p) give a kept, valid token.
/// (Speed is measured by benchmarks, never asserted in tests.)
#[test]
fn full_vocab_rows_sample_valid_tokens() {
    let logits = random_logits(151_936, 8, 10.0);
    for params in [
        SamplerParams::default(),
        chain(0.8, 0, 0.95, 0.05),
        chain(0.8, 0, 0.9, 0.0),
    ] {
        let mut s = Sampler::new(params, logits.len() as u32).unwrap();
        let kept: std::collections::HashSet<u32> =
            s.candidates(&logits).iter().map(|c| c.0).collect();
        for _ in 0..20 {
            let t = s.sample(&logits);
            assert!(
                kept.contains(&t),
                "{t} not among the candidates for {params:?}"
            );
        }
    }
}

/// A change to one parameter.
type Edit = fn(&mut SamplerParams);

/// The error `Sampler::new` gives for the defaults with one value changed.
fn rejected(edit: impl FnOnce(&mut SamplerParams)) -> SamplerError {
    let mut params = SamplerParams::default();
    edit(&mut params);
    Sampler::new(params, 10).unwrap_err()
}

#[test]
fn validation_names_the_bad_value() {
    use SamplerError as E;
    let inf = f32::INFINITY;
    assert_eq!(rejected(|p| p.temp = -0.1), E::Temperature { temp: -0.1 });
    assert_eq!(rejected(|p| p.temp = inf), E::Temperature { temp: inf });
    assert_eq!(rejected(|p| p.top_p = 0.0), E::TopP { top_p: 0.0 });
    assert_eq!(rejected(|p| p.top_p = 1.5), E::TopP { top_p: 1.5 });
    assert_eq!(rejected(|p| p.min_p = -0.01), E::MinP { min_p: -0.01 });
    assert_eq!(rejected(|p| p.min_p = 1.01), E::MinP { min_p: 1.01 });
    let want = E::RepeatPenalty {
        repeat_penalty: 0.0,
    };
    assert_eq!(rejected(|p| p.repeat_penalty = 0.0), want);
    let want = E::PresencePenalty {
        presence_penalty: inf,
    };
    assert_eq!(rejected(|p| p.presence_penalty = f32::INFINITY), want);
    let want = E::FrequencyPenalty {
        frequency_penalty: -inf,
    };
    assert_eq!(rejected(|p| p.frequency_penalty = f32::NEG_INFINITY), want);
    // NaN never passes, and the message names the parameter and the value.
    let nan_cases: [(Edit, &str); 6] = [
        (|p| p.temp = f32::NAN, "temp"),
        (|p| p.top_p = f32::NAN, "top_p"),
        (|p| p.min_p = f32::NAN, "min_p"),
        (|p| p.repeat_penalty = f32::NAN, "repeat_penalty"),
        (|p| p.presence_penalty = f32::NAN, "presence_penalty"),
        (|p| p.frequency_penalty = f32::NAN, "frequency_penalty"),
    ];
    for (edit, name) in nan_cases {
        let msg = rejected(edit).to_string();
        assert!(msg.starts_with(&format!("{name} = NaN")), "{msg}");
    }
    let d = SamplerParams::default();
    assert_eq!(Sampler::new(d, 0).unwrap_err(), E::EmptyVocab);
    assert!(SamplerParams::greedy().validate().is_ok());
    // llama.cpp's defaults (common/common.h).
    let got = (d.temp, d.top_k, d.top_p, d.min_p, d.repeat_penalty);
    assert_eq!(got, (0.8, 40, 0.95, 0.05, 1.0));
    let got = (d.repeat_last_n, d.presence_penalty, d.frequency_penalty);
    assert_eq!(got, (64, 0.0, 0.0));
}

/// `logit_bias` (OpenAI: "-100 or 100 should result in a ban or exclusive selection of the
/// relevant token"; llama.cpp: a bias of `false` is -inf): greedy and sampled rows alike see the
/// bias before the chain, so the chain equals the reference chain over biased logits.
#[test]
fn logit_bias_is_added_before_greedy_and_the_chain() {
    let logits = random_logits(500, 11, 4.0);
    let mut order: Vec<u32> = (0..500).collect();
    order.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    let (best, runner_up, low) = (order[0], order[1], order[499]);
    let greedy = |bias: Vec<(u32, f32)>| {
        let mut s = Sampler::new(SamplerParams::greedy(), 500)
            .unwrap()
            .with_bias(bias);
        s.sample(&logits)
    };
    assert_eq!(greedy(vec![]), best);
    assert_eq!(
        greedy(vec![(best, -100.0)]),
        runner_up,
        "-100 on the argmax"
    );
    assert_eq!(greedy(vec![(best, f32::NEG_INFINITY)]), runner_up, "a ban");
    assert_eq!(
        greedy(vec![(low, 100.0)]),
        low,
        "+100 forces the lowest token"
    );
    assert_eq!(
        greedy(vec![(9999, 100.0)]),
        best,
        "ids past the vocabulary are ignored"
    );

    let bias = vec![(best, -3.0), (low, 5.0), (order[7], f32::NEG_INFINITY)];
    let mut biased = logits.clone();
    for &(id, b) in &bias {
        biased[id as usize] += b;
    }
    let params = chain(0.9, 40, 0.95, 0.02);
    let mut s = Sampler::new(params, 500).unwrap().with_bias(bias);
    let got = s.candidates(&logits);
    let want = reference_chain(&biased, &params);
    let got_ids: Vec<u32> = got.iter().map(|x| x.0).collect();
    let want_ids: Vec<u32> = want.iter().map(|x| x.0).collect();
    assert_eq!(got_ids, want_ids);
    assert!(
        !got_ids.contains(&order[7]),
        "a banned token is never a candidate"
    );
}
