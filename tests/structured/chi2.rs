//! Sampled constrained output with a drafter keeps the masked target's distribution: two
//! tokens, the first one of three, the second one of three that depend on the first, under a
//! Lark grammar naming them by id. The choices are the target's own likely tokens there (its
//! top three after the prompt, then its top three after each of those), so the drafter's
//! proposals often fall inside the grammar: drafts are verified under the masks and both
//! accepted and rejected (rejection sampling under masks; the run's speculation counters must
//! show both), and the ones the grammar refuses are cut (residual). The expected joint
//! distribution comes from the target alone (no drafter): its logits after the prompt and
//! after each first token, masked on the host by llguidance's mask, through the same sampler
//! chain; the observed one from generations that speculate. Pearson's chi-square at α = 0.001.

use super::*;

/// Pearson's chi-square critical values at α = 0.001 for 1..=8 degrees of freedom (any
/// statistics table, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.4).
const CRIT_001: [f64; 8] = [
    10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124,
];
const N: usize = 160;

fn params(seed: u64) -> SamplerParams {
    SamplerParams {
        temp: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplerParams::default()
    }
}

/// The target's processed distribution over `choices` after `ids`, masked as `gs` allows
/// after `before` (host-side mask from llguidance's matcher).
/// The target's `n` most likely non-special tokens after `ids` (unconstrained, through the
/// test's sampler chain): only used to choose the grammar's tokens.
fn top_tokens(eng: &mut Engine, ids: &[u32], n: usize) -> Vec<u32> {
    eng.reset(0).expect("reset");
    eng.prefill(0, ids).expect("prefill");
    let logits = eng.fwd.logits(&eng.ctx).expect("logits");
    let mut s = Sampler::new(params(0), eng.fwd.hp().n_vocab).expect("sampler");
    s.candidates(&logits)
        .into_iter()
        .map(|c| c.0)
        .filter(|&t| !eng.tok.is_eog(t) && !eng.tok.token_type(t).is_some_and(|ty| ty.is_special()))
        .take(n)
        .collect()
}

fn target_dist(
    eng: &mut Engine,
    g: &Grammars,
    gs: &GrammarSpec,
    ids: &[u32],
    before: &[u32],
    choices: &[u32],
) -> Vec<f64> {
    eng.reset(0).expect("reset");
    let mut all = ids.to_vec();
    all.extend(before);
    eng.prefill(0, &all).expect("prefill");
    let mut logits = eng.fwd.logits(&eng.ctx).expect("logits");
    let mut m = g.compile(gs).expect("compile");
    let c: &mut dyn flint::grammar::Constraint = &mut m;
    c.consume(before).expect("consume");
    let mut mask = vec![0u32; c.mask_words()];
    c.fill_mask(&mut mask).expect("mask");
    for (t, x) in logits.iter_mut().enumerate() {
        if !flint::grammar::allowed(&mask, t as u32) {
            *x = f32::NEG_INFINITY;
        }
    }
    let mut s = Sampler::new(params(0), eng.fwd.hp().n_vocab).expect("sampler");
    let cands = s.candidates(&logits);
    choices
        .iter()
        .map(|c| {
            cands
                .iter()
                .find(|x| x.0 == *c)
                .map_or(0.0, |x| f64::from(x.1))
        })
        .collect()
}

#[test]
fn sampled_constrained_output_keeps_the_target_distribution_with_a_drafter() {
    let mut guard = models().lock().unwrap_or_else(|p| p.into_inner());
    let Models {
        plain,
        spec,
        grammars,
    } = &mut *guard;
    let ids = chat_prompt(plain, "Answer twice: yes, no or maybe?");
    // First position: the target's top three. Second: the target's top three after each of
    // those (what a drafter that follows the target proposes, and where the masked target is
    // not certain, so drafts are both accepted and rejected).
    let first = top_tokens(plain, &ids, 3);
    assert_eq!(first.len(), 3, "three first tokens: {first:?}");
    let second: Vec<Vec<u32>> = first
        .iter()
        .map(|&a| {
            let mut p = ids.clone();
            p.push(a);
            let t = top_tokens(plain, &p, 3);
            assert_eq!(t.len(), 3, "three second tokens after {a}: {t:?}");
            t
        })
        .collect();
    let alt = |ts: &[u32]| -> String {
        let v: Vec<String> = ts.iter().map(|c| format!("<[{c}]>")).collect();
        v.join(" | ")
    };
    let gs = GrammarSpec::Lark(format!(
        "start: <[{}]> b0 | <[{}]> b1 | <[{}]> b2\nb0: {}\nb1: {}\nb2: {}\n",
        first[0],
        first[1],
        first[2],
        alt(&second[0]),
        alt(&second[1]),
        alt(&second[2])
    ));
    let p1 = target_dist(plain, grammars, &gs, &ids, &[], &first);
    let mut expected = Vec::new();
    for (i, &c) in first.iter().enumerate() {
        let p2 = target_dist(plain, grammars, &gs, &ids, &[c], &second[i]);
        expected.extend(p2.iter().map(|q| p1[i] * q * N as f64));
    }
    let mut observed = vec![0usize; 9];
    let (mut drafted, mut proposed, mut accepted) = (0, 0, 0);
    // The prompt's rows are kept between generations (only its last token runs again).
    let mut cached = Vec::new();
    spec.reset(0).expect("reset");
    for i in 0..N {
        let mut s = Sampler::new(params(1000 + i as u64), spec.fwd.hp().n_vocab).expect("sampler");
        let keep = flint::engine::solo::keep_prefix(spec, &mut cached, &ids).expect("keep prefix");
        let mut guide = Some(Guide::new(Box::new(
            grammars.compile(&gs).expect("compile"),
        )));
        let req = flint::engine::solo::Request {
            prompt: &ids,
            keep,
            n_predict: 8,
            sampler: Some(&mut s),
            grammar: &mut guide,
            ignore_eos: false,
            draft: true,
        };
        let st = flint::engine::solo::generate(spec, req, |_| Ok(true)).expect("generate");
        cached = ids.clone();
        cached.extend(&st.generated_token_ids);
        cached.truncate(spec.fwd.kv().len(0).expect("kv") as usize);
        let x = st.spec.as_ref().expect("speculative stats");
        drafted += x.drafted;
        proposed += x.proposed;
        accepted += x.accepted;
        let out = &st.generated_token_ids;
        assert_eq!(out.len(), 2, "two tokens: {out:?}");
        let a = first
            .iter()
            .position(|c| *c == out[0])
            .expect("a first choice");
        let b = second[a]
            .iter()
            .position(|c| *c == out[1])
            .expect("a second choice");
        observed[a * 3 + b] += 1;
    }
    // Drafts the grammar refuses are cut (their rows then draw from the residual); the ones
    // it allows are verified under the masks, and both outcomes of rejection sampling must
    // have happened, or the test says nothing about them.
    eprintln!("first {first:?} second {second:?}");
    assert!(proposed > 0, "the drafter never proposed a token");
    // Cells expected below 5 are pooled into one.
    let (mut chi2, mut cells, mut pool_e, mut pool_o) = (0.0, 0usize, 0.0, 0usize);
    for (e, &o) in expected.iter().zip(&observed) {
        if *e < 5.0 {
            pool_e += e;
            pool_o += o;
        } else {
            chi2 += (o as f64 - e).powi(2) / e;
            cells += 1;
        }
    }
    if pool_e > 0.0 {
        if pool_e >= 1.0 {
            chi2 += (pool_o as f64 - pool_e).powi(2) / pool_e;
            cells += 1;
        } else {
            assert!(
                pool_o <= 3,
                "{pool_o} draws in cells of expected mass {pool_e:.3}"
            );
        }
    }
    eprintln!("expected {expected:.1?}\nobserved {observed:?}\nchi2 {chi2:.2} over {cells} cells; {proposed} proposed, {drafted} verified, {accepted} accepted");
    assert!(
        accepted > 0,
        "no draft accepted under the masks ({drafted} verified)"
    );
    assert!(
        accepted < drafted,
        "no draft rejected under the masks ({accepted} of {drafted} accepted)"
    );
    assert!(
        cells >= 2,
        "the distribution is too peaked to test: {expected:?}"
    );
    let df = cells - 1;
    assert!(
        chi2 < CRIT_001[df.min(8) - 1],
        "chi-square {chi2:.2} at {df} df"
    );
}
