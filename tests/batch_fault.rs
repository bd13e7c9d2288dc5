//! Fault isolation in the batched step (`engine::batch_run::step`, what `flint serve -np N`
//! runs): a request that fails mid-generation, and one that reaches the step with no row to run,
//! end alone (`Ended::Failed`) while the other requests of the same steps go on with exactly the
//! tokens, drafts and acceptances of the single-request speculative loop on their prompt alone;
//! the failed request's sequence, reset, serves a new request exactly as well.

use crate::common;

use common::batch::Req;
use flint::engine::batch_run::{settle, step, Ended, SeqState};
use flint::engine::Engine;

const N_PREDICT: usize = 16;

const PROMPTS: [&str; 3] = [
    "The lighthouse stood at the end of a long spit of sand, and for forty years",
    "1, 2, 3, 4, 5, 6,",
    "Q: What is the capital of Italy?\nA:",
];

/// What a request gave: its tokens and (drafted, accepted), or its failure.
type Got = std::result::Result<(Vec<u32>, u64, u64), String>;

/// Runs `active` to the end; each request's outcome by sequence.
fn run(eng: &mut Engine, mut active: Vec<Req>, n_seq: usize) -> Vec<Option<Got>> {
    let mut got: Vec<Option<Got>> = vec![None; n_seq];
    let mut steps = 0;
    while !active.is_empty() {
        steps += 1;
        assert!(steps < 1000, "the requests never end");
        let mut ended = step(eng, &mut active).expect("the step as a whole");
        ended.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        for (i, end) in ended {
            let mut r = active.remove(i);
            let seq = r.st.seq;
            got[seq] = Some(match end {
                Ended::End(()) => {
                    settle(eng, &mut r.st).unwrap();
                    let p = r.st.pending.as_ref().unwrap();
                    Ok((r.st.generated.clone(), p.spec.drafted, p.spec.accepted))
                }
                Ended::Failed(e) => {
                    // What the server does with a failed request's slot.
                    eng.fwd.reset(seq).unwrap();
                    eng.drafters[seq].reset();
                    Err(e.to_string())
                }
            });
        }
    }
    got
}

#[test]
fn a_failing_request_ends_alone_and_its_slot_serves_again() {
    let common::batch::Alone { prompts, eog, want } = common::batch::alone(&PROMPTS, N_PREDICT);

    let n_seq = 4;
    let mut eng = Engine::load(&common::batch::spec_opts(256), n_seq as u32).unwrap();
    let req = |seq: usize, prompt: Vec<u32>, fail_at| Req {
        st: SeqState::new(seq, prompt, 0, N_PREDICT, None, true),
        eog: eog.clone(),
        fail_at,
    };
    // Sequence 1 fails at its fifth token (mid-verify, beside the others' rows); sequence 3
    // reaches the step with an empty prompt, which must never become a device step.
    let active = vec![
        req(0, prompts[0].clone(), None),
        req(1, prompts[1].clone(), Some(4)),
        req(2, prompts[2].clone(), None),
        req(3, Vec::new(), None),
    ];
    let got = run(&mut eng, active, n_seq);
    for (seq, w) in [(0, &want[0]), (2, &want[2])] {
        assert_eq!(
            got[seq],
            Some(Ok(w.clone())),
            "sequence {seq} beside the failures"
        );
    }
    let failed = |seq: usize| match &got[seq] {
        Some(Err(e)) => e.clone(),
        other => panic!("sequence {seq} should have failed: {other:?}"),
    };
    assert!(failed(1).contains("stop-string matcher"), "{}", failed(1));
    assert!(failed(3).contains("no rows"), "{}", failed(3));

    // Slot 0 starts over too (the server's admission truncates a slot to the prefix it shares).
    eng.fwd.reset(0).unwrap();
    eng.drafters[0].reset();
    // The failed slots, reset, serve new requests exactly as the single loop does, while a
    // healthy slot runs beside them.
    let active = vec![
        req(1, prompts[2].clone(), None),
        req(3, prompts[0].clone(), None),
        req(0, prompts[1].clone(), None),
    ];
    let got = run(&mut eng, active, n_seq);
    assert_eq!(got[1], Some(Ok(want[2].clone())), "the reset slot 1");
    assert_eq!(got[3], Some(Ok(want[0].clone())), "the reset slot 3");
    assert_eq!(got[0], Some(Ok(want[1].clone())), "slot 0 beside them");
}
