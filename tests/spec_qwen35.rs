//! Speculative decoding on a hybrid (`qwen35`) target: greedy output with a drafter is exactly
//! plain decoding for γ in {1, 4, 7}, with drafts accepted and rejected at every length (the
//! recurrent state rolls back through its checkpoint), with a random `flint dspark init`
//! drafter whose taps read the residual entering DeltaNet and attention layers alike, and a
//! chat-style second turn reuses the cached prefix only where the state belongs to it.

use crate::common;

use std::path::Path;

use flint::engine::{DraftOptions, Engine};
use flint::gguf::GgufFile;
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::speculative::adversarial::{Adversary, AdversaryKind};

fn engine(model: &Path, draft: Option<DraftOptions>) -> Engine {
    common::engine(model, 512, draft)
}

#[test]
fn greedy_output_is_plain_decoding_with_rollbacks_at_every_length() {
    let tmp = common::temp_dir("spec-qwen35");
    let model = common::random_preset(tmp.path(), "qwen35-tiny-f32", 21);
    let n = 24;
    let mut eng = engine(&model, None);
    let prompts: Vec<Vec<u32>> = [
        "The hybrid model reads",
        "a b c d e f g h i j k l m n o p q r s",
    ]
    .iter()
    .map(|p| eng.tok.encode(p, true, true).unwrap())
    .collect();
    let expected: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            eng.reset(0).unwrap();
            let s = common::generate(&mut eng, p, n, None, false);
            s.generated_token_ids
        })
        .collect();
    let n_vocab = eng.fwd.hp().n_vocab;
    let target = GgufFile::open(&model).unwrap();
    for gamma in [1u32, 4, 7] {
        let opts = InitOptions {
            block: gamma,
            seed: 5,
            ..InitOptions::default()
        };
        let dpath = tmp.path().join(format!("drafter-{gamma}.gguf"));
        random_drafter(&target, &opts)
            .unwrap()
            .write_file(&dpath)
            .unwrap();
        let mut deng = engine(&model, Some(DraftOptions::new(dpath)));
        let mut dspark = common::drive::take(&mut deng);
        for (p, want) in prompts.iter().zip(&expected) {
            let seq: Vec<u32> = p.iter().chain(want).copied().collect();
            let mut partial_accepted = 0;
            for kind in [
                AdversaryKind::Oracle,
                AdversaryKind::AlwaysWrong,
                AdversaryKind::Partial,
            ] {
                let mut adv: common::drive::Slot =
                    Box::new(Adversary::new(kind, seq.clone(), gamma, n_vocab));
                let (out, s) = common::drive::speculate(&mut deng, &mut adv, gamma, p, n);
                assert_eq!(&out, want, "{kind:?} γ={gamma}: output differs from plain");
                assert!(s.accepted <= s.drafted, "{kind:?}: {s:?}");
                match kind {
                    AdversaryKind::Oracle if out.len() == n => {
                        assert_eq!(s.accepted, s.drafted, "oracle γ={gamma}: {s:?}")
                    }
                    AdversaryKind::AlwaysWrong => assert_eq!(s.accepted, 0, "{s:?}"),
                    AdversaryKind::Partial => partial_accepted = s.accepted,
                    _ => {}
                }
                if kind == AdversaryKind::Partial && gamma > 1 {
                    // Accepted and rejected drafts in the same run: rollbacks mid-batch.
                    assert!(s.accepted > 0 && s.accepted < s.drafted, "γ={gamma}: {s:?}");
                }
            }
            let _ = partial_accepted;
            let (out, s) = common::drive::speculate(&mut deng, &mut dspark, gamma, p, n);
            assert_eq!(&out, want, "random DSpark γ={gamma}: output differs");
            assert!(s.cycles > 0, "the DSpark drafter never drafted: {s:?}");
        }
    }
}

#[test]
fn a_second_turn_reuses_the_prefix_only_where_the_state_belongs() {
    let tmp = common::temp_dir("spec-qwen35-prefix");
    let model = common::random_preset(tmp.path(), "qwen35-tiny-f32", 21);
    let mut eng = engine(&model, None);
    let first = eng.tok.encode("first turn of a chat", true, true).unwrap();
    let s = common::generate(&mut eng, &first, 8, None, false);
    let mut cached = Vec::new();
    flint::engine::solo::note_cached(
        &mut cached,
        &first,
        &s.generated_token_ids,
        eng.fwd.kv().len(0).unwrap(),
    );
    // The next prompt extends everything cached: the whole state is kept.
    let mut next = cached.clone();
    next.extend(eng.tok.encode(" and a second one", false, true).unwrap());
    let mut c = cached.clone();
    let kept = flint::engine::solo::keep_prefix(&mut eng, &mut c, &next).unwrap();
    assert_eq!(kept, cached.len());
    let run = common::continue_with(&mut eng, &next, kept, 8, None, false);
    // A fresh engine running the whole prompt gives the same tokens.
    let mut fresh = engine(&model, None);
    let want = common::generate(&mut fresh, &next, 8, None, false);
    assert_eq!(run.generated_token_ids, want.generated_token_ids);
    // A prompt that diverges inside the cached rows cannot keep a partial state: none is kept.
    let mut c = cached.clone();
    let mut other = cached[..cached.len() - 3].to_vec();
    other.extend([7, 8, 9, 10]);
    assert_eq!(
        flint::engine::solo::keep_prefix(&mut eng, &mut c, &other).unwrap(),
        0
    );
    let run = common::generate(&mut eng, &other, 8, None, false);
    fresh.reset(0).unwrap();
    let want = common::generate(&mut fresh, &other, 8, None, false);
    assert_eq!(run.generated_token_ids, want.generated_token_ids);
}
