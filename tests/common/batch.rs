//! Batched-step test helpers: the engine options of a target with the shipped drafter (the
//! bypass off, so every slot speculates) and a request that runs until its length or an end
//! token, or fails on a given token.

use flint::engine::batch_run::{BatchRequest, SeqState};
use flint::engine::{DraftOptions, Engine, EngineOptions, DEFAULT_DRAFTER};
use flint::{Error, Result};

/// The default model with the shipped drafter, `n_ctx` rows per sequence, never bypassing it.
pub fn spec_opts(n_ctx: u32) -> EngineOptions {
    let mut d =
        DraftOptions::new(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_DRAFTER));
    d.bypass = false;
    EngineOptions {
        model: super::model_path(),
        n_ctx,
        draft: Some(d),
        ..EngineOptions::default()
    }
}

/// A request that takes its tokens until `max_tokens` or an end token (`eog`), or fails when
/// it is handed its `fail_at`-th token.
pub struct Req {
    pub st: SeqState,
    pub eog: Vec<u32>,
    pub fail_at: Option<usize>,
}

impl BatchRequest for Req {
    type End = ();
    fn state(&self) -> &SeqState {
        &self.st
    }
    fn state_mut(&mut self) -> &mut SeqState {
        &mut self.st
    }
    fn on_token(&mut self, token: u32, full: bool) -> Result<Option<()>> {
        if self.fail_at == Some(self.st.generated.len()) {
            return Err(Error::Usage(
                "the client's stop-string matcher failed".into(),
            ));
        }
        if self.eog.contains(&token) {
            return Ok(Some(()));
        }
        self.st.generated.push(token);
        Ok((self.st.generated.len() >= self.st.max_tokens || full).then_some(()))
    }
}

/// Greedy speculative runs of one request at a time (an engine of one sequence), each
/// prompt alone: what batched requests are held to.
pub struct Alone {
    /// The prompts' token ids.
    pub prompts: Vec<Vec<u32>>,
    /// The vocabulary's end-of-generation ids.
    pub eog: Vec<u32>,
    /// Per prompt: (tokens, drafted, accepted).
    pub want: Vec<(Vec<u32>, u64, u64)>,
}

/// [`Alone`] for `prompts`, `n_predict` tokens each, on [`spec_opts`]`(256)`.
pub fn alone(prompts: &[&str], n_predict: usize) -> Alone {
    let mut single = Engine::load(&spec_opts(256), 1).unwrap();
    let tok = single.tok.clone();
    let prompts: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| tok.encode(p, true, false).unwrap())
        .collect();
    let eog: Vec<u32> = (0..single.fwd.hp().n_vocab)
        .filter(|&t| tok.is_eog(t))
        .collect();
    let mut want = Vec::new();
    for p in &prompts {
        let stats = super::generate(&mut single, p, n_predict, None, true);
        let spec = stats.spec.expect("the single loop speculated");
        want.push((stats.generated_token_ids, spec.drafted, spec.accepted));
    }
    Alone { prompts, eog, want }
}
