//! Log-probabilities of the tokens a step commits, and of the prompt's tokens (`echo`), from the
//! logits rows the step already computes, on the device: after the forward, one submission runs
//! the top-[`MAX_TOP`] selection (`shaders/topk.wgsl`) and each row's log-sum-exp with the logit
//! of the row's prompt token (`shaders/logprob.wgsl`) over the logits buffer, and reads back
//! `[rows, MAX_TOP]` ids and values and `[rows, 2]` (lse, logit): never the vocabulary. Then
//! `log p(t) = logit(t) - lse`.
//!
//! Which logit a token's log-probability takes: a prompt token its row's gathered logit; a
//! sampled one its logit in the host copy of the row (sampling reads the rows back anyway);
//! a greedy one (the row's argmax) its value in the top k. With DSpark a committed draft's row
//! is the target's verify row, so the values are the target's, as without the drafter. A token
//! a grammar forced has no row: log-probability 0 (the grammar allowed nothing else).
//!
//! The values are the model's distribution after a grammar's mask and before the sampler's
//! bias, penalties, temperature and filters; with [`Want::post`] a plainly sampled token's
//! entry is the sampler's distribution instead (`Sampler::candidates`).

use super::batch::Engine;
use super::batch_run::SeqState;
use crate::gpu::buffers::{create_storage, read_back};
use crate::kernels::launch::submit;
use crate::kernels::ops::logprob::{RowLogprob, NO_TARGET};
use crate::kernels::ops::select::Select;
use crate::{Error, Result};

/// The most alternatives a token's entry lists (OpenAI's bound on `top_logprobs`).
pub const MAX_TOP: u32 = 20;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Want {
    /// Alternatives per token, `0..=MAX_TOP`.
    pub top: u32,
    /// Every prompt token too (its first with no log-probability); the prompt's cached rows
    /// are then not reused (each needs its logits row).
    pub echo: bool,
    /// llama-server's `post_sampling_probs`: a sampled token's entry holds the sampler's
    /// distribution (after penalties, bias, top-k, top-p, min-p and temperature) where the
    /// step sampled one plain row; a greedy token has probability 1.
    pub post: bool,
}

/// One token's log-probability and the row's best alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    /// `None`: the prompt's first token (nothing predicts it).
    pub logprob: Option<f32>,
    /// The row's `Want::top` best `(id, logprob)`, best first (ties to the lower id).
    pub top: Vec<(u32, f32)>,
    /// A prompt token (`echo`) rather than a generated one.
    pub prompt: bool,
}

impl TokenLogprob {
    /// A token with no logits row: forced by a grammar, probability 1.
    fn forced(token: u32) -> TokenLogprob {
        TokenLogprob {
            token,
            logprob: Some(0.0),
            top: vec![(token, 0.0)],
            prompt: false,
        }
    }
}

/// The device ops over the forward's logits buffer, sized for its most logits rows.
#[derive(Debug)]
pub struct Ops {
    topk: Select,
    ids: wgpu::Buffer,
    values: wgpu::Buffer,
    row: RowLogprob,
}

impl Ops {
    fn new(eng: &Engine) -> Result<Ops> {
        let (ctx, fwd) = (&eng.ctx, &eng.fwd);
        let (rows, n_vocab) = (fwd.max_logit_rows(), fwd.hp().n_vocab);
        let k = MAX_TOP.min(n_vocab);
        let n = u64::from(rows) * u64::from(k) * 4;
        let ids = create_storage(ctx, "logprob top ids", n)?;
        let values = create_storage(ctx, "logprob top values", n)?;
        let logits = fwd.logits_buffer();
        let topk = Select::top_k(ctx, logits, &ids, &values, rows, n_vocab, k)?;
        let row = RowLogprob::new(ctx, logits, rows, n_vocab)?;
        Ok(Ops {
            topk,
            ids,
            values,
            row,
        })
    }
}

/// What a step's logits rows give: the top `k` ids and values (`[rows, k]`) and each row's
/// (lse, target logit).
#[derive(Debug, Default)]
pub struct Rows {
    k: usize,
    ids: Vec<u32>,
    values: Vec<f32>,
    lse: Vec<(f32, f32)>,
}

impl Rows {
    /// `token`'s entry from logits row `row`: its logit `logit` when known, else its value in
    /// the row's top k. `None` when the row is not there.
    fn entry(
        &self,
        row: usize,
        token: u32,
        want: Want,
        logit: Option<f32>,
    ) -> Option<TokenLogprob> {
        let &(lse, _) = self.lse.get(row)?;
        let ids = self.ids.get(row * self.k..(row + 1) * self.k)?;
        let values = self.values.get(row * self.k..(row + 1) * self.k)?;
        let logit = logit.or_else(|| {
            let at = ids.iter().position(|&i| i == token)?;
            values.get(at).copied()
        });
        let top = ids.iter().zip(values).take(want.top as usize);
        Some(TokenLogprob {
            token,
            logprob: logit.map(|l| l - lse),
            top: top.map(|(&i, &v)| (i, v - lse)).collect(),
            prompt: false,
        })
    }
}

/// Runs the ops over the last step's logits rows, one target (a prompt token, or
/// [`NO_TARGET`]) per row, and reads back what they give.
pub(super) fn read(eng: &mut Engine, targets: &[u32]) -> Result<Rows> {
    if eng.logprobs.is_none() {
        eng.logprobs = Some(Ops::new(eng)?);
    }
    let (ctx, ops) = (&eng.ctx, &mut eng.logprobs);
    let Some(ops) = ops.as_mut() else {
        return Err(Error::Usage(
            "the log-probability ops were not built".into(),
        ));
    };
    let n = targets.len() as u32;
    ops.topk.set_rows(ctx, n)?;
    ops.row.set(ctx, targets)?;
    let t = &ops.topk;
    submit(ctx, "logprobs", &[&t.partial, &t.merge, &ops.row.dispatch])?;
    let k = ops.topk.params().k as usize;
    let bytes = u64::from(n) * k as u64 * 4;
    let ids = bytemuck::pod_collect_to_vec(&read_back(ctx, &ops.ids, 0, bytes)?);
    let values = bytemuck::pod_collect_to_vec(&read_back(ctx, &ops.values, 0, bytes)?);
    Ok(Rows {
        k,
        ids,
        values,
        lse: ops.row.read(ctx)?,
    })
}

/// Appends the targets of one request's `n_logits` rows: with `echo`, a prompt chunk's row at
/// prompt position `p` is asked for the logit of token `p + 1`.
pub(super) fn push_targets(out: &mut Vec<u32>, a: &SeqState, n_logits: usize, prompt_rows: usize) {
    let from = a.keep + a.fed;
    let echo = a.logprobs.is_some_and(|w| w.echo) && prompt_rows > 0;
    out.extend((0..n_logits).map(|j| match echo {
        true => a.prompt.get(from + j + 1).copied().unwrap_or(NO_TARGET),
        false => NO_TARGET,
    }));
}

/// Logits rows an `echo` chunk of `m` rows gets: every row (its last one is the first
/// sampled token's when `last`).
pub(super) fn echo_rows(a: &SeqState, m: usize) -> Option<u32> {
    a.logprobs
        .is_some_and(|w| w.echo)
        .then_some(u32::try_from(m).unwrap_or(u32::MAX))
}

/// An `echo` chunk's prompt entries, from prompt position `from` (the chunk's logits rows
/// `rows`, one per row, the last not a prompt row when `last`). Returns the rows left for
/// sampling.
pub(super) fn record_prompt(
    a: &mut SeqState,
    lp: Option<&Rows>,
    from: usize,
    rows: std::ops::Range<usize>,
    last: bool,
) -> std::ops::Range<usize> {
    let (Some(want), Some(lp)) = (a.logprobs, lp) else {
        return rows;
    };
    if !want.echo {
        return rows;
    }
    if from == 0 {
        if let Some(&t0) = a.prompt.first() {
            a.lp.push(TokenLogprob {
                token: t0,
                logprob: None,
                top: Vec::new(),
                prompt: true,
            });
        }
    }
    let n_prompt = rows.len() - usize::from(last && !rows.is_empty());
    for j in 0..n_prompt {
        let row = rows.start + j;
        let Some(&t) = a.prompt.get(from + j + 1) else {
            break;
        };
        let picked = lp.lse.get(row).map(|&(_, l)| l);
        if let Some(mut e) = lp.entry(row, t, want, picked) {
            e.prompt = true;
            a.lp.push(e);
        }
    }
    rows.start + n_prompt..rows.end
}

/// What the host has of a step's rows.
pub(super) struct Host<'a> {
    /// The host copy of the step's rows when it sampled (`[rows, n_vocab]`), else empty.
    pub logits: &'a [f32],
    pub n_vocab: usize,
    /// The sampler's distribution of the row it sampled (`Sampler::candidates`), when
    /// `Want::post` asked and the step sampled one plain row.
    pub post: Option<Vec<(u32, f32)>>,
}

/// The entries of the tokens a step commits: `tokens[k]` from logits row `rows.start + k` for
/// the first `with_rows` tokens (the accepted drafts and the sampled token), forced after them.
pub(super) fn record_tokens(
    a: &mut SeqState,
    lp: Option<&Rows>,
    rows: std::ops::Range<usize>,
    tokens: &[u32],
    with_rows: usize,
    host: Host<'_>,
) {
    let (Some(want), Some(lp)) = (a.logprobs, lp) else {
        return;
    };
    let greedy = a.sampler.is_none();
    for (k, &t) in tokens.iter().enumerate() {
        let row = rows.start + k;
        let e = match k < with_rows.min(rows.len()) {
            true if want.post && greedy => Some(TokenLogprob::forced(t)),
            true => match (&host.post, k + 1 == with_rows) {
                (Some(dist), true) => Some(sampled(t, dist, want)),
                _ => {
                    let logit = host.logits.get(row * host.n_vocab + t as usize).copied();
                    lp.entry(row, t, want, logit)
                }
            },
            false => None,
        };
        a.lp.push(e.unwrap_or_else(|| TokenLogprob::forced(t)));
    }
}

/// `token`'s entry from the sampler's distribution `dist` (sorted, probabilities).
fn sampled(token: u32, dist: &[(u32, f32)], want: Want) -> TokenLogprob {
    let p = dist
        .iter()
        .find(|&&(id, _)| id == token)
        .map_or(0.0, |&(_, p)| p);
    TokenLogprob {
        token,
        logprob: Some(p.ln()),
        top: dist
            .iter()
            .take(want.top as usize)
            .map(|&(id, p)| (id, p.ln()))
            .collect(),
        prompt: false,
    }
}

/// The entries of tokens a grammar forced with no logits row.
pub(super) fn record_forced(a: &mut SeqState, tokens: &[u32]) {
    if a.logprobs.is_some() {
        a.lp.extend(tokens.iter().map(|&t| TokenLogprob::forced(t)));
    }
}
