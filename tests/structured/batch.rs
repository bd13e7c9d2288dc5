//! Batched slots under grammars (`engine::batch_run`): one matcher and one mask per request
//! and row, requests with and without a grammar in the same steps. Greedy answers must be the
//! same with and without drafters and the same token ids as the single-request loop (the
//! server's one-slot worker), forced tokens fast-forwarded alike, and pass llguidance's
//! matchers and Python's `jsonschema`.

use super::*;
use flint::engine::batch_run::{settle, step, BatchRequest, Ended, SeqState};
use flint::engine::Engine;

struct Req {
    st: SeqState,
    eog: Vec<u32>,
}

impl BatchRequest for Req {
    type End = ();
    fn state(&self) -> &SeqState {
        &self.st
    }
    fn state_mut(&mut self) -> &mut SeqState {
        &mut self.st
    }
    fn on_token(&mut self, token: u32, full: bool) -> flint::Result<Option<()>> {
        if self.eog.contains(&token) {
            return Ok(Some(()));
        }
        self.st.generated.push(token);
        Ok((self.st.generated.len() >= self.st.max_tokens || full).then_some(()))
    }
}

/// Every request's tokens, run together on `eng` to the end, and the tokens their grammars
/// forced (committed without sampling).
fn run_batch(
    eng: &mut Engine,
    g: &Grammars,
    reqs: &[(Vec<u32>, Option<GrammarSpec>)],
    drafter: bool,
) -> (Vec<Vec<u32>>, u64) {
    let eog: Vec<u32> = (0..eng.fwd.hp().n_vocab)
        .filter(|&t| eng.tok.is_eog(t))
        .collect();
    let mut active: Vec<Req> = reqs
        .iter()
        .enumerate()
        .map(|(seq, (p, gs))| {
            let mut st = SeqState::new(seq, p.clone(), 0, 80, None, drafter);
            st.guide = gs
                .as_ref()
                .map(|s| Guide::new(Box::new(g.compile(s).expect("compile"))));
            Req {
                st,
                eog: eog.clone(),
            }
        })
        .collect();
    let mut got = vec![Vec::new(); reqs.len()];
    let mut forced = 0;
    while !active.is_empty() {
        let mut ended = step(eng, &mut active).expect("step");
        ended.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        for (i, end) in ended {
            assert!(matches!(end, Ended::End(())), "request {i}: {end:?}");
            let mut r = active.remove(i);
            settle(eng, &mut r.st).expect("settle");
            got[r.st.seq] = r.st.generated.clone();
            forced += r.st.guide.as_ref().map_or(0, |g| g.forced);
        }
    }
    (got, forced)
}

#[test]
fn batched_slots_follow_their_grammars_with_and_without_drafters() {
    let mut guard = models().lock().unwrap_or_else(|p| p.into_inner());
    let g = guard.grammars.clone();
    let suite = schema_suite();
    let mut reqs: Vec<(Vec<u32>, Option<GrammarSpec>)> = suite
        .iter()
        .take(3)
        .map(|(p, s)| {
            let ids = chat_prompt(&guard.plain, p);
            (ids, Some(GrammarSpec::JsonSchema(s.clone())))
        })
        .collect();
    // A literal of unusual spelling: its forced tokens (the canonical tokenization) are not
    // what a masked argmax picks token by token, so sampling them would change the ids.
    reqs.push((
        chat_prompt(&guard.plain, "Give a code."),
        Some(GrammarSpec::Lark(
            "start: \"Code: xqzvkwbjplmf-Zyx_Qwe.\" /[0-9]{1,3}/\n".into(),
        )),
    ));
    reqs.push((chat_prompt(&guard.plain, "Say hello."), None));
    // The single-request loop (`-np 1`), which fast-forwards forced tokens.
    let single: Vec<Option<Vec<u32>>> = {
        let Models {
            plain, grammars, ..
        } = &mut *guard;
        reqs.iter()
            .map(|(p, gs)| gs.as_ref().map(|gs| run(plain, grammars, gs, p, 80, None)))
            .collect()
    };
    drop(guard);
    let n = reqs.len() as u32;
    let mut spec = Engine::load(&common::batch::spec_opts(512), n).expect("batched + drafters");
    let (with, forced) = run_batch(&mut spec, &g, &reqs, true);
    drop(spec);
    let opts = EngineOptions {
        model: common::model_path(),
        n_ctx: 512,
        ..EngineOptions::default()
    };
    let mut plain = Engine::load(&opts, n).expect("batched");
    let (without, forced_plain) = run_batch(&mut plain, &g, &reqs, false);
    assert!(
        forced > 0 && forced_plain > 0,
        "no forced tokens: {forced}, {forced_plain}"
    );
    let mut cases = Vec::new();
    for (k, ((_, gs), (a, b))) in reqs.iter().zip(with.iter().zip(&without)).enumerate() {
        assert_eq!(a, b, "request {k}: drafters changed the greedy answer");
        if let Some(one) = &single[k] {
            assert_eq!(
                a, one,
                "request {k}: batched and single-request answers differ"
            );
        }
        let Some(gs) = gs else { continue };
        let text = plain.tok.decode(a, false).expect("decode");
        eprintln!("batched {k}: {text}");
        check_tokens(&g, gs, a, &format!("batched {k}"));
        check_bytes(gs, &text, &format!("batched {k}"));
        if let GrammarSpec::JsonSchema(s) = gs {
            cases.push(json!({"schema": s, "answer": text}));
        }
    }
    jsonschema_check(&cases);
}
