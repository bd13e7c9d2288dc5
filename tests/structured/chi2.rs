//! Sampled constrained output with a drafter keeps the masked target's distribution: two
//! tokens, each one of three, under a Lark grammar naming them by id. The expected joint
//! distribution comes from the target alone (no drafter): its logits after the prompt and
//! after each first token, masked on the host by llguidance's mask, through the same sampler
//! chain; the observed one from generations that speculate (drafts cut where the grammar
//! refuses them, verified under device masks). Pearson's chi-square at α = 0.001.

use super::*;

/// Pearson's chi-square critical values at α = 0.001 for 1..=8 degrees of freedom (any
/// statistics table, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.4).
const CRIT_001: [f64; 8] = [
    10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124,
];
const N: usize = 160;

fn params(seed: u64) -> SamplerParams {
    SamplerParams {
        temp: 1.5,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplerParams::default()
    }
}

/// The target's processed distribution over `choices` after `ids`, masked as `gs` allows
/// after `before` (host-side mask from llguidance's matcher).
fn target_dist(
    eng: &mut Engine,
    g: &Grammars,
    gs: &GrammarSpec,
    ids: &[u32],
    before: &[u32],
    choices: &[u32],
) -> Vec<f64> {
    eng.reset().expect("reset");
    let mut all = ids.to_vec();
    all.extend(before);
    eng.prefill(&all).expect("prefill");
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
    let mut s = Sampler::new(params(0), eng.fwd.hp.n_vocab).expect("sampler");
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
    let choices: Vec<u32> = [" yes", " no", " maybe"]
        .iter()
        .map(|w| {
            let t = plain.tok.encode(w, false, false).expect("encode");
            assert_eq!(t.len(), 1, "{w:?} is one token");
            t[0]
        })
        .collect();
    let alts: Vec<String> = choices.iter().map(|c| format!("<[{c}]>")).collect();
    let gs = GrammarSpec::Lark(format!("start: x x\nx: {}\n", alts.join(" | ")));
    let ids = chat_prompt(plain, "Answer twice: yes, no or maybe?");
    let p1 = target_dist(plain, grammars, &gs, &ids, &[], &choices);
    let mut expected = Vec::new();
    for (i, &c) in choices.iter().enumerate() {
        let p2 = target_dist(plain, grammars, &gs, &ids, &[c], &choices);
        expected.extend(p2.iter().map(|q| p1[i] * q * N as f64));
    }
    let mut observed = vec![0usize; 9];
    let (mut drafted, mut proposed) = (0, 0);
    // The prompt's rows are kept between generations (only its last token runs again).
    let mut cached = Vec::new();
    spec.reset().expect("reset");
    for i in 0..N {
        let mut s = Sampler::new(params(1000 + i as u64), spec.fwd.hp.n_vocab).expect("sampler");
        let keep = spec.keep_prefix(&mut cached, &ids).expect("keep prefix");
        spec.grammar = Some(Guide::new(Box::new(
            grammars.compile(&gs).expect("compile"),
        )));
        let st = spec
            .generate(&ids[keep..], 8, Some(&mut s), |_| Ok(true))
            .expect("generate");
        spec.grammar = None;
        cached = ids.clone();
        cached.extend(&st.generated_token_ids);
        cached.truncate(spec.fwd.kv.len(0).expect("kv") as usize);
        let x = st.spec.as_ref().expect("speculative stats");
        drafted += x.drafted;
        proposed += x.proposed;
        let out = &st.generated_token_ids;
        assert_eq!(out.len(), 2, "two tokens: {out:?}");
        let a = choices.iter().position(|c| *c == out[0]).expect("a choice");
        let b = choices.iter().position(|c| *c == out[1]).expect("a choice");
        observed[a * 3 + b] += 1;
    }
    // Drafts the grammar refuses are cut (their rows then draw from the residual); the ones
    // it allows are verified under the masks.
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
    eprintln!("expected {expected:.1?}\nobserved {observed:?}\nchi2 {chi2:.2} over {cells} cells; {proposed} proposed, {drafted} verified");
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
