//! The speculative generation loop (docs/DSPARK.md): prefill with every row injected into
//! the drafter, then cycles of draft → choose ℓ → verify `[x0, d1..dℓ]` in one target forward →
//! accept (greedy, or lossless rejection sampling) → commit `a + 1` tokens, roll the target's KV
//! back to them and give the drafter exactly those rows. Plain steps (nothing worth verifying,
//! bypass) give theirs too, so it never conditions on a hole. Every committed row reaches the
//! drafter through [`Pending`]: the target captures each step's taps right after the rows
//! already waiting in the staging, and they go in as one chunk before the next draft, when the
//! staging would overflow, and at the end. A chunk gives the same K/V as row-by-row injection
//! (rows are independent in the K/V-only pass), so a run of plain steps costs one injection
//! submit instead of one per token.

use std::time::Instant;

use super::{Engine, GenStats};
use crate::gpu::GpuContext;
use crate::model::forward::Forward;
use crate::sampling::{Sampler, Xoshiro256StarStar};
use crate::{Error, Result};

use crate::grammar::steps::Guide;
use crate::grammar::{allowed, GrammarError};
use crate::speculative::accept::{
    accept_greedy, accept_sampled_cut, draft_distribution, draft_sample, Bonus,
};
use crate::speculative::bypass::Bypass;
use crate::speculative::drafter::Drafter;
use crate::speculative::policy::{verify_len, SpecOptions};
use crate::speculative::stats::SpecStats;

/// Where a generation stands: tokens emitted and whether to go on.
struct Emitter<'a, F: FnMut(u32) -> Result<bool>> {
    eng_eog: &'a dyn Fn(u32) -> bool,
    stats: &'a mut GenStats,
    n_predict: usize,
    on_token: F,
    done: bool,
}

impl<F: FnMut(u32) -> Result<bool>> Emitter<'_, F> {
    /// Emits `token` unless it ends the generation; false once done.
    fn emit(&mut self, token: u32) -> Result<bool> {
        if self.done || self.stats.generated_tokens >= self.n_predict || (self.eng_eog)(token) {
            self.done = true;
            return Ok(false);
        }
        self.stats.generated_tokens += 1;
        self.stats.generated_token_ids.push(token);
        if !(self.on_token)(token)? || self.stats.generated_tokens >= self.n_predict {
            self.done = true;
        }
        Ok(!self.done)
    }
}

/// The device and the target's forward pass.
type Io<'a> = (&'a GpuContext, &'a mut Forward);

/// Committed rows not yet injected: staging rows `0..n`, target positions `at..at + n`.
struct Pending {
    at: u32,
    n: u32,
}

impl Pending {
    /// Injects the waiting rows (one chunk) and points the target's taps back at row 0.
    fn flush(&mut self, io: Io<'_>, d: &mut dyn Drafter, spec: &mut SpecStats) -> Result<()> {
        let (ctx, fwd) = io;
        if self.n > 0 {
            let ti = Instant::now();
            d.inject(ctx, self.n, self.at)?;
            spec.inject_secs += ti.elapsed().as_secs_f64();
            spec.injections += 1;
            self.n = 0;
        }
        fwd.set_tap_row(0);
        Ok(())
    }

    /// Before a step of `rows` rows at position `p`: room for them after the waiting rows
    /// (flushing those when they would not fit) and the target's taps pointed there.
    fn make_room(
        &mut self,
        io: Io<'_>,
        d: &mut dyn Drafter,
        spec: &mut SpecStats,
        p: u32,
        rows: u32,
    ) -> Result<()> {
        let (ctx, fwd) = io;
        let room = d.max_inject().min(fwd.tap_capacity());
        if self.n > 0 && self.n.saturating_add(rows) > room {
            self.flush((ctx, &mut *fwd), d, spec)?;
        }
        if self.n == 0 {
            self.at = p;
        }
        fwd.set_tap_row(self.n);
        Ok(())
    }
}

/// Generates up to `n_predict` tokens after `prompt` with `drafter`; the same tokens as
/// [`Engine::generate`] under greedy decoding, the same distribution when sampling.
pub fn generate(
    eng: &mut Engine,
    drafter: &mut dyn Drafter,
    opts: &SpecOptions,
    prompt: &[u32],
    n_predict: usize,
    mut sampler: Option<&mut Sampler>,
    on_token: impl FnMut(u32) -> Result<bool>,
) -> Result<GenStats> {
    if prompt.is_empty() {
        return Err(Error::Usage("the prompt has no tokens".into()));
    }
    let mut spec = SpecStats::new(drafter.max_drafts());
    let mut bypass = match opts.bypass {
        Some(cfg) => Some(Bypass::new(cfg).map_err(|e| Error::Usage(e.to_string()))?),
        None => None,
    };
    let mut stats = GenStats {
        prompt_tokens: prompt.len(),
        ..GenStats::default()
    };
    let start = eng.fwd.kv.len(0)?;
    // A generation that failed half-way may have left the taps pointed past row 0.
    eng.fwd.set_tap_row(0);
    if start == 0 {
        drafter.reset();
    }
    drafter.truncate(start);
    if drafter.next_position() != start {
        return Err(Error::Usage(format!(
            "the drafter holds {} rows but the target {start}",
            drafter.next_position()
        )));
    }
    // Under a grammar, the tokens it forces before the first sampled one ride with the prompt.
    // The grammar is taken for the loop (the tokenizer stays borrowed) and put back after.
    let mut grammar = eng.grammar.take();
    let forced0 = match &mut grammar {
        Some(g) => g.forced_now()?,
        None => Vec::new(),
    };
    let mut first = prompt.to_vec();
    first.extend(&forced0);
    if let Some(g) = &mut grammar {
        g.mask_next()?;
        eng.fwd.set_mask(&eng.ctx, &g.masks)?;
    }
    // Prefill: every chunk's rows go to the drafter.
    let t0 = Instant::now();
    let mut pending = Pending { at: 0, n: 0 };
    let chunk = eng.fwd.max_rows().max(1) as usize;
    let n_chunks = first.len().div_ceil(chunk);
    for (i, part) in first.chunks(chunk).enumerate() {
        let (at, rows) = (eng.fwd.kv.len(0)?, part.len() as u32);
        pending.make_room((&eng.ctx, &mut eng.fwd), drafter, &mut spec, at, rows)?;
        eng.fwd.step(&eng.ctx, part, u32::from(i + 1 == n_chunks))?;
        pending.n += rows;
    }
    let mut token = eng.pick(sampler.as_deref_mut())?;
    if let Some(g) = &grammar {
        check_row(g, 0, token)?;
    }
    stats.prefill_secs = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let tok = &eng.tok;
    let ignore_eos = eng.ignore_eos;
    let eog = |t: u32| !ignore_eos && tok.is_eog(t);
    let mut em = Emitter {
        eng_eog: &eog,
        stats: &mut stats,
        n_predict,
        on_token,
        done: false,
    };
    let mut draft_rng =
        Xoshiro256StarStar::new(sampler.as_ref().map_or(0, |s| s.params().seed) ^ 0x5eed);
    let n_vocab = eng.fwd.hp.n_vocab as usize;
    let capacity = eng.fwd.kv.capacity();
    // With a bypass, the first step is plain: it measures what drafting has to beat.
    let mut first_plain = bypass.is_some();
    // Tokens committed (and emitted) after `token` that no step has run yet: what a grammar
    // forced. A cycle with any runs them as a plain step, drafting nothing.
    let mut forced = Vec::new();
    let mut go = true;
    for &f in &forced0 {
        if let Some(s) = sampler.as_deref_mut() {
            s.accept(f);
        }
        go = go && em.emit(f)?;
    }
    let g = grammar.as_mut();
    let s = sampler.as_deref_mut();
    if go && commit_emit(g, s, &mut em, &[token], &mut forced)? {
        loop {
            let p0 = eng.fwd.kv.len(0)?;
            if p0 >= capacity {
                eprintln!("context full ({capacity} tokens): stopping");
                break;
            }
            let remaining = n_predict - em.stats.generated_tokens;
            let mut max_len = (opts.n_max.min(drafter.max_drafts()) as usize)
                .min(remaining.saturating_sub(1))
                .min((capacity - p0 - 1) as usize)
                // What the target was planned to verify at once.
                .min(eng.fwd.max_logit_rows().saturating_sub(1) as usize);
            let draft_now = !std::mem::take(&mut first_plain)
                && forced.is_empty()
                && bypass.as_mut().is_none_or(|b| b.should_draft());
            if !draft_now {
                max_len = 0;
                spec.bypassed += 1;
            }
            let mut cycle_draft_secs = 0.0;
            let mut cut = None;
            let mut cut_dist: Option<Vec<f32>> = None;
            // Draft.
            let mut drafts = Vec::new();
            let mut dists = Vec::new();
            if max_len > 0 {
                // The drafter conditions on every committed row. The bypass weighs the
                // injection with the draft: both are what a cycle costs beyond its verify.
                let ti = Instant::now();
                pending.flush((&eng.ctx, &mut eng.fwd), drafter, &mut spec)?;
                let inject_secs = ti.elapsed().as_secs_f64();
                let td = Instant::now();
                let draft = match sampler.as_deref() {
                    None => drafter.draft(&eng.ctx, token, p0, None)?,
                    Some(s) => {
                        let temp = s.params().temp;
                        let mut pick = |_: usize, logits: &[f32]| {
                            let dist = draft_distribution(logits, temp);
                            let t = draft_sample(&dist, &mut draft_rng);
                            dists.extend_from_slice(&dist);
                            t
                        };
                        drafter.draft(&eng.ctx, token, p0, Some(&mut pick))?
                    }
                };
                let draft_secs = td.elapsed().as_secs_f64();
                spec.draft_secs += draft_secs;
                cycle_draft_secs = draft_secs + inject_secs;
                let len = verify_len(&opts.policy, &draft.conf, max_len.min(draft.tokens.len()));
                drafts = draft.tokens[..len].to_vec();
                dists.truncate(len * n_vocab);
                if let Some(g) = &mut grammar {
                    let c = g.cut_and_mask(&drafts)?;
                    if c.refused_next && !dists.is_empty() {
                        let at = c.kept * n_vocab;
                        cut_dist = dists.get(at..at + n_vocab).map(<[f32]>::to_vec);
                    }
                    drafts.truncate(c.kept);
                    dists.truncate(c.kept * n_vocab);
                    cut = Some(c);
                }
                spec.cycles += 1;
                spec.proposed += draft.tokens.len() as u64;
            }
            // Verify [x0, d1..dℓ] (or run x0 and what the grammar forced after it).
            let tv = Instant::now();
            let mut rows = vec![token];
            rows.extend(&drafts);
            rows.append(&mut forced);
            let m = rows.len() as u32;
            let n_logits = drafts.len() as u32 + 1;
            if m > n_logits && p0 + m > capacity {
                eprintln!("context full ({capacity} tokens): stopping");
                break;
            }
            match &mut grammar {
                Some(g) if cut.is_none() => {
                    g.mask_next()?;
                    eng.fwd.set_mask(&eng.ctx, &g.masks)?;
                }
                Some(g) => eng.fwd.set_mask(&eng.ctx, &g.masks)?,
                None => {}
            }
            pending.make_room((&eng.ctx, &mut eng.fwd), drafter, &mut spec, p0, m)?;
            if n_logits > 1 {
                // A recurrent model keeps its state to come back to (nothing for dense ones).
                eng.fwd.checkpoint()?;
            }
            eng.fwd.step(&eng.ctx, &rows, n_logits)?;
            spec.target_forwards += 1;
            let verdict = match sampler.as_deref_mut() {
                None => accept_greedy(&drafts, &eng.fwd.argmax(&eng.ctx)?)?,
                Some(s) => {
                    let logits = eng.fwd.logits(&eng.ctx)?;
                    let bonus = match (&cut, cut_dist.as_deref()) {
                        (Some(c), _) if c.forced_after => Bonus::Skip,
                        (_, Some(pd)) => Bonus::Residual(pd),
                        _ => Bonus::Sample,
                    };
                    accept_sampled_cut(s, &drafts, &dists, &logits, n_vocab, bonus)?
                }
            };
            let verify_secs = tv.elapsed().as_secs_f64();
            spec.verify_secs += verify_secs;
            let a = verdict.accepted;
            if let Some(b) = &mut bypass {
                if max_len == 0 {
                    b.record_plain(verify_secs);
                } else {
                    b.record_cycle(cycle_draft_secs, verify_secs, drafts.len() as u32, a as u32);
                }
            }
            if !drafts.is_empty() {
                spec.record(drafts.len(), a);
            }
            // Commit x0, d1..da (and the forced rows): roll the target back; exactly those rows
            // wait for the drafter (the rejected drafts' staging rows are written over by the
            // next step).
            let kept_rows = if m > n_logits { m } else { a as u32 + 1 };
            eng.fwd.truncate(&eng.ctx, p0 + kept_rows)?;
            pending.n += kept_rows;
            let g = grammar.as_mut();
            let next = match &cut {
                // Every kept draft accepted and the grammar forces what follows: the last row's
                // sample is not used, the forced tokens come next.
                Some(c) if c.forced_after && a == c.kept => None,
                _ => Some(verdict.next),
            };
            if let (Some(g), Some(t)) = (&g, next) {
                check_row(g, a, t)?;
            }
            let mut committed = drafts[..a].to_vec();
            committed.extend(next);
            let s = sampler.as_deref_mut();
            if !commit_emit(g, s, &mut em, &committed, &mut forced)? {
                break;
            }
            token = match next {
                Some(t) => t,
                None if !forced.is_empty() => forced.remove(0),
                None => break,
            };
        }
    }
    // The drafter leaves holding every committed row, as the next generation expects.
    pending.flush((&eng.ctx, &mut eng.fwd), drafter, &mut spec)?;
    stats.decode_secs = t1.elapsed().as_secs_f64();
    stats.spec = Some(spec);
    eng.grammar = grammar;
    Ok(stats)
}

/// Fails unless `t` is allowed by mask row `row` of `g` (the row its verify row was masked
/// with): the device mask and the matcher disagree otherwise.
fn check_row(g: &Guide, row: usize, t: u32) -> Result<()> {
    let w = g.words();
    let mask = g.masks.get(row * w..(row + 1) * w).unwrap_or_default();
    if allowed(mask, t) {
        return Ok(());
    }
    Err(GrammarError::Rejected {
        token: t,
        message: format!("picked outside mask row {row}"),
    }
    .into())
}

/// Emits `tokens` in order, committing each to the grammar (when there is one) and emitting
/// the tokens it forces after it, which are appended to `forced` (to run through the target
/// with the next step; the sampler's history takes them). False once the generation ends: a
/// stop token, `n_predict`, the caller, or a grammar that allows nothing more.
fn commit_emit<F: FnMut(u32) -> Result<bool>>(
    mut g: Option<&mut Guide>,
    mut sampler: Option<&mut Sampler>,
    em: &mut Emitter<'_, F>,
    tokens: &[u32],
    forced: &mut Vec<u32>,
) -> Result<bool> {
    for &t in tokens {
        if !em.emit(t)? {
            return Ok(false);
        }
        let Some(g) = g.as_deref_mut() else { continue };
        let f = g.commit(&[t])?;
        for &x in &f {
            if let Some(s) = sampler.as_deref_mut() {
                s.accept(x);
            }
            forced.push(x);
            if !em.emit(x)? {
                return Ok(false);
            }
        }
        if g.is_stopped() {
            return Ok(false);
        }
    }
    Ok(true)
}
