//! DSpark across requests: four greedy requests decoded together, each slot with the shipped
//! drafter, drafting, verifying and accepting in shared steps (`engine::batch_run`, what
//! `flint serve` and `flint bench -npl -md` run), are held to the single-request speculative
//! loop on each prompt alone: the same tokens, and the same drafts verified and accepted (the
//! per-slot drafts are the same computation, so a difference means a slot saw another's rows).

use crate::common;

use common::batch::Req;
use flint::engine::batch_run::{settle, step, Ended, SeqState};
use flint::engine::Engine;

const N_PREDICT: usize = 24;

const PROMPTS: [&str; 4] = [
    "The lighthouse stood at the end of a long spit of sand, and for forty years",
    "1, 2, 3, 4, 5, 6,",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Q: What is the capital of Italy?\nA:",
];

#[test]
fn four_requests_with_drafters_match_the_single_request_loop() {
    let common::batch::Alone { prompts, eog, want } = common::batch::alone(&PROMPTS, N_PREDICT);

    let mut eng = Engine::load(&common::batch::spec_opts(256), prompts.len() as u32).unwrap();
    assert_eq!(eng.drafters.len(), prompts.len());
    let mut active: Vec<Req> = prompts
        .iter()
        .enumerate()
        .map(|(seq, p)| Req {
            st: SeqState::new(seq, p.clone(), 0, N_PREDICT, None, true),
            eog: eog.clone(),
            fail_at: None,
        })
        .collect();
    let mut got = vec![(Vec::new(), 0, 0); prompts.len()];
    while !active.is_empty() {
        let mut ended = step(&mut eng, &mut active).unwrap();
        ended.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        for (i, end) in ended {
            assert!(matches!(end, Ended::End(())), "request {i}: {end:?}");
            let mut r = active.remove(i);
            settle(&mut eng, &mut r.st).unwrap();
            let p = r.st.pending.as_ref().unwrap();
            got[r.st.seq] = (r.st.generated.clone(), p.spec.drafted, p.spec.accepted);
        }
    }
    for (s, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(g.0, w.0, "request {s}: tokens, batched vs alone");
        assert_eq!((g.1, g.2), (w.1, w.2), "request {s}: (drafted, accepted)");
    }
    let drafted: u64 = got.iter().map(|g| g.1).sum();
    let accepted: u64 = got.iter().map(|g| g.2).sum();
    assert!(accepted > 0, "the shipped drafter accepted nothing");
    eprintln!("4 requests: {accepted} of {drafted} drafts accepted, as each alone");
}

/// Eight slots with drafters beside a context shorter than their verify rows together: the
/// load-time curve of batched verify steps times at most a sequence's rows and goes on
/// linearly past them, so the engine loads (`flint bench -npl 8 -npp 16 -ntg 4 -md D` stopped
/// with "context full: sequence 0 holds 0 of 20 tokens and 32 more were asked for").
#[test]
fn eight_slots_with_drafters_load_beside_a_context_shorter_than_their_verify_rows() {
    let mut opts = common::batch::spec_opts(20);
    if let Some(d) = &mut opts.draft {
        d.schedule = true;
    }
    let eng = Engine::load(&opts, 8).unwrap();
    assert_eq!(eng.drafters.len(), 8);
    let verify_rows = eng.fwd.max_logit_rows();
    assert!(
        verify_rows > eng.capacity(),
        "the case needs more verify rows ({verify_rows}) than a sequence holds ({})",
        eng.capacity()
    );
}
