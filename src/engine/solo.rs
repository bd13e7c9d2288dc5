//! One request driven to its end through the batched step ([`super::batch_run::step`]): what
//! `generate` and `chat` run. A request alone is a batch of one, so it takes the server's
//! path row for row: the same prompt chunks, drafts, verify lengths, acceptance, grammar masks
//! and forced tokens, the same drafter decision, and therefore the same greedy tokens and the
//! same drafted / accepted counts as `serve -np 1` on the same prompt.
//!
//! [`keep_prefix`] and [`note_cached`] give a conversation its previous turn's K/V rows back
//! (`chat`), as the server's slots do.

use super::batch::Engine;
use super::batch_run::{self, settle, BatchRequest, Ended, SeqState};
use super::GenStats;
use crate::gpu::PipelineCache;
use crate::grammar::steps::Guide;
use crate::sampling::Sampler;
use crate::{Error, Result};

/// One request for [`generate`].
pub struct Request<'a> {
    /// Every token of the prompt; the first `keep` already have rows in sequence 0's cache.
    pub prompt: &'a [u32],
    pub keep: usize,
    pub n_predict: usize,
    /// `None`: greedy. Its state (random generator, penalty history) carries over to the
    /// caller's next request.
    pub sampler: Option<&'a mut Sampler>,
    /// The grammar the output must match, with its counters, left in place afterwards.
    pub grammar: &'a mut Option<Guide>,
    /// Keep going past end-of-generation tokens (`--ignore-eos`).
    pub ignore_eos: bool,
    /// Speculate with the engine's drafter, where it has one (`false`: decode plainly).
    pub draft: bool,
}

/// The request as a step drives it: its state, the caller's token callback, and the clock of
/// its first token.
struct Solo<'f> {
    st: SeqState,
    n_predict: usize,
    ignore_eos: bool,
    eog: &'f dyn Fn(u32) -> bool,
    on_token: &'f mut dyn FnMut(u32) -> Result<bool>,
    /// The thread's pipeline-build time when the first token came (`GenStats::compile_secs`).
    first_token: Option<(std::time::Instant, std::time::Duration)>,
    /// The cache had no row for another step.
    full: bool,
}

impl BatchRequest for Solo<'_> {
    type End = ();
    fn state(&self) -> &SeqState {
        &self.st
    }
    fn state_mut(&mut self) -> &mut SeqState {
        &mut self.st
    }
    fn on_token(&mut self, token: u32, full: bool) -> Result<Option<()>> {
        self.first_token
            .get_or_insert_with(|| (std::time::Instant::now(), PipelineCache::thread_wait()));
        if self.st.generated.len() >= self.n_predict || (!self.ignore_eos && (self.eog)(token)) {
            return Ok(Some(()));
        }
        self.st.generated.push(token);
        let go = (self.on_token)(token)?;
        self.full = full;
        let done = !go || self.st.generated.len() >= self.n_predict || full;
        Ok(done.then_some(()))
    }
}

/// Generates up to `req.n_predict` tokens after `req.prompt` on sequence 0, calling `on_token`
/// for each (it returns `false` to stop). Stops at end-of-generation tokens, at the end of the
/// cache and where the grammar allows nothing more. Speculates when the engine has a drafter.
///
/// Pipelines the load did not build (a prompt length's first shapes) are built when first
/// used: the time this thread spends on them is taken out of the prompt and decode times
/// (split at the first token) and reported as [`GenStats::compile_secs`].
pub fn generate(
    eng: &mut Engine,
    req: Request<'_>,
    mut on_token: impl FnMut(u32) -> Result<bool>,
) -> Result<GenStats> {
    let Request {
        prompt,
        keep,
        n_predict,
        sampler,
        grammar,
        ignore_eos,
        draft,
    } = req;
    if prompt.len() <= keep {
        return Err(Error::EmptyStep {
            what: "the prompt has no tokens".into(),
        });
    }
    let start = (std::time::Instant::now(), PipelineCache::thread_wait());
    let has_drafter = draft && eng.spec.is_some() && !eng.drafters.is_empty();
    let mut st = SeqState::new(
        0,
        prompt.to_vec(),
        keep,
        n_predict,
        sampler.as_deref().cloned(),
        has_drafter,
    );
    st.guide = grammar.take();
    // The end-of-generation ids (sorted), not a copy of the tokenizer, per request.
    let eog_ids = eng.tok.eog_ids().to_vec();
    let eog = |t: u32| eog_ids.binary_search(&t).is_ok();
    let mut solo = Solo {
        st,
        n_predict,
        ignore_eos,
        eog: &eog,
        on_token: &mut on_token,
        first_token: None,
        full: false,
    };
    let run = drive(eng, &mut solo);
    let end = (std::time::Instant::now(), PipelineCache::thread_wait());
    // The request's state goes back to the caller whatever happened.
    *grammar = solo.st.guide.take();
    if let (Some(s), Some(mine)) = (sampler, solo.st.sampler.take()) {
        *s = mine;
    }
    if let Err(e) = run {
        // The sequence's rows are in no known state: the next request starts from scratch.
        let _ = eng.fwd.reset(0);
        if let Some(d) = eng.drafters.first_mut() {
            d.reset();
        }
        return Err(e);
    }
    if solo.full && solo.st.generated.len() < n_predict {
        eprintln!("context full ({} tokens): stopping", eng.fwd.capacity());
    }
    let first = solo.first_token.unwrap_or(end);
    let mut stats = GenStats {
        prompt_tokens: prompt.len() - keep,
        generated_tokens: solo.st.generated.len(),
        prefill_secs: first.0.duration_since(start.0).as_secs_f64(),
        decode_secs: end.0.duration_since(first.0).as_secs_f64(),
        generated_token_ids: solo.st.generated.clone(),
        spec: solo.st.pending.as_ref().map(|p| p.spec.clone()),
        ..GenStats::default()
    };
    if let Some(s) = &stats.spec {
        let end_row = eng.fwd.kv().len(0)?;
        eng.record_acceptance(s, stats.generated_tokens, end_row);
    }
    stats.exclude_compile(
        first.1.saturating_sub(start.1),
        end.1.saturating_sub(first.1),
    );
    Ok(stats)
}

/// Steps until the request ends; its drafter then holds every committed row.
fn drive(eng: &mut Engine, solo: &mut Solo<'_>) -> Result<()> {
    loop {
        let ended = batch_run::step(eng, std::slice::from_mut(solo))?;
        match ended.into_iter().next() {
            Some((_, Ended::End(()))) => break,
            Some((_, Ended::Failed(e))) => return Err(e),
            None => {}
        }
    }
    settle(eng, &mut solo.st)
}

/// Keeps sequence 0's K/V rows of the longest common prefix of `cached` (the token ids whose
/// rows the cache holds, in order) and the next prompt `ids`: at most `ids.len() - 1` rows (the
/// last prompt token runs again for its logits), none where the drafter's position window
/// moved past the prefix or the cache cannot come back to it (a recurrent state without a
/// checkpoint there, a ring cache cut too deep). Truncates the caches and `cached`; returns
/// the rows kept.
pub fn keep_prefix(eng: &mut Engine, cached: &mut Vec<u32>, ids: &[u32]) -> Result<usize> {
    let common = cached.iter().zip(ids).take_while(|(a, b)| a == b).count();
    let mut keep = common.min(ids.len().saturating_sub(1)) as u32;
    if !eng.fwd.can_truncate(0, keep) {
        keep = 0;
    }
    if let Some(d) = eng.drafters.first_mut() {
        if keep < d.base() {
            keep = 0;
        }
        if keep == 0 {
            d.reset();
        }
        d.truncate(keep);
        if d.next_position() != keep {
            keep = 0;
            d.reset();
        }
    }
    eng.fwd.truncate(0, keep)?;
    cached.truncate(keep as usize);
    Ok(keep as usize)
}

/// Records in `cached` what a generation left in sequence 0's cache: the prompt rows it ran
/// and the generated tokens run through the model (`in_cache` rows in all).
pub fn note_cached(cached: &mut Vec<u32>, prompt_run: &[u32], generated: &[u32], in_cache: u32) {
    cached.extend_from_slice(prompt_run);
    cached.extend_from_slice(generated);
    cached.truncate(in_cache as usize);
}
