//! The speculative benchmark (`flint bench -md DRAFT`): each prompt is decoded greedily twice
//! from an empty cache, once plainly (the target alone) and once with the DSpark drafter, and
//! the two are compared: decode tok/s, speed-up, τ, acceptance per slot, tokens per target
//! forward, and `greedy_match` (the same token ids). The drafter runs with the bypass off, so τ
//! and acceptance measure the drafter, not the bypass. [`Tally`] sums prompts into category and
//! overall figures (totals over totals, never means of ratios); [`rows`] turns them into the
//! result rows of `-o md|csv|json|jsonl|sql`.

pub mod prompts;
pub mod rows;

use crate::engine::Engine;
use crate::engine::{solo, GenStats};
use crate::speculative::{SpecOptions, SpecStats};
use crate::tokenizer::{ChatMessage, Tokenizer};
use crate::{Error, Result};

pub use prompts::{builtin, parse_jsonl, PromptsError, SpecPrompt};

/// Settings of a speculative benchmark run.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecBenchOptions {
    /// Tokens to generate per prompt and mode (`-n`).
    pub n_predict: usize,
    /// Drafts verified per cycle at most (`--spec-draft-n-max`; `None` or 0: the session's).
    pub n_max: Option<u32>,
    /// Wrap each prompt as a user turn in the model's chat template (when it has one).
    pub chat_template: bool,
    /// One untimed plain and speculative run of the first prompt before the timed ones.
    pub warmup: bool,
}

impl Default for SpecBenchOptions {
    fn default() -> Self {
        SpecBenchOptions {
            n_predict: 64,
            n_max: None,
            chat_template: true,
            warmup: true,
        }
    }
}

/// A prompt with its token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedPrompt {
    pub category: String,
    pub prompt: String,
    pub tokens: Vec<u32>,
}

/// Whether [`prepare`] wraps prompts in a chat template with this tokenizer (`template`: a
/// template source replacing the model's, `--chat-template`).
pub fn uses_chat_template(tok: &Tokenizer, chat_template: bool, template: Option<&str>) -> bool {
    chat_template && (template.is_some() || tok.chat_template_source().is_some())
}

/// Tokenizes `prompts` (with BOS), each as one user turn of the chat template (`template`, else
/// the model's own) when `chat_template` is set and there is one, else as they are.
pub fn prepare(
    tok: &Tokenizer,
    prompts: &[SpecPrompt],
    chat_template: bool,
    template: Option<&str>,
) -> Result<Vec<PreparedPrompt>> {
    let template = if uses_chat_template(tok, chat_template, template) {
        Some(tok.chat_template(template)?)
    } else {
        None
    };
    prompts
        .iter()
        .map(|p| {
            let text = match &template {
                Some(t) => t.render(&[ChatMessage::new("user", p.prompt.as_str())], true)?,
                None => p.prompt.clone(),
            };
            Ok(PreparedPrompt {
                category: p.category.clone(),
                prompt: p.prompt.clone(),
                tokens: tok.encode(&text, true, true)?,
            })
        })
        .collect()
}

/// KV rows the benchmark needs: the longest prompt, `n_predict` tokens and one spare row.
pub fn ctx_needed(prompts: &[PreparedPrompt], n_predict: usize) -> u32 {
    let longest = prompts.iter().map(|p| p.tokens.len()).max().unwrap_or(0);
    u32::try_from(longest + n_predict + 1).unwrap_or(u32::MAX)
}

/// Which decoding a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Plain,
    Spec,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Spec => "dspark",
        }
    }
}

/// Both decodings of one prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptRun {
    pub category: String,
    pub prompt: String,
    pub plain: GenStats,
    /// Its `spec` holds the drafter's counters.
    pub spec: GenStats,
}

impl PromptRun {
    /// The speculative decoding produced exactly the plain decoding's token ids.
    pub fn greedy_match(&self) -> bool {
        self.plain.generated_token_ids == self.spec.generated_token_ids
    }
}

/// The result of [`run`].
#[derive(Debug, Clone, PartialEq)]
pub struct SpecBench {
    /// Drafts verified per cycle at most, as it ran.
    pub n_max: u32,
    pub runs: Vec<PromptRun>,
}

/// Runs every prompt plainly and speculatively with the engine's drafter (bypass off, greedy);
/// `on_run` is called after each of the two runs of a prompt (for the progress bar). The
/// engine's speculation options and drafter decision are back in place afterwards, also after
/// an error.
pub fn run(
    engine: &mut Engine,
    prompts: &[PreparedPrompt],
    opts: &SpecBenchOptions,
    on_run: impl FnMut(&PreparedPrompt, Mode),
) -> Result<SpecBench> {
    let (Some(base), Some(max_drafts)) = (
        engine.spec.clone(),
        engine.drafters.first().map(|d| d.max_drafts()),
    ) else {
        return Err(Error::Usage(
            "the speculative benchmark needs a drafter (-md DRAFT)".into(),
        ));
    };
    let mut spec = SpecOptions {
        bypass: None,
        ..base.clone()
    };
    if let Some(n) = opts.n_max.filter(|&n| n > 0) {
        spec.n_max = n;
    }
    let verify_rows = crate::memory::batch::logit_rows(engine.params());
    let n_max = spec
        .n_max
        .min(max_drafts)
        .min(verify_rows.saturating_sub(1));
    let decision = engine.decision.take();
    engine.spec = Some(spec);
    let out = run_all(engine, prompts, opts, on_run);
    engine.spec = Some(base);
    engine.decision = decision;
    Ok(SpecBench { n_max, runs: out? })
}

/// One greedy generation of `n` tokens after `prompt` from an empty cache, drafting or not.
fn generate(engine: &mut Engine, prompt: &[u32], n: usize, draft: bool) -> Result<GenStats> {
    engine.reset(0)?;
    let req = solo::Request {
        prompt,
        keep: 0,
        n_predict: n,
        sampler: None,
        grammar: &mut None,
        ignore_eos: false,
        draft,
    };
    solo::generate(engine, req, |_| Ok(true))
}

fn run_all(
    engine: &mut Engine,
    prompts: &[PreparedPrompt],
    opts: &SpecBenchOptions,
    mut on_run: impl FnMut(&PreparedPrompt, Mode),
) -> Result<Vec<PromptRun>> {
    let mut both = |engine: &mut Engine, p: &PreparedPrompt, n: usize, report: bool| {
        let plain = generate(engine, &p.tokens, n, false)?;
        if report {
            on_run(p, Mode::Plain);
        }
        let spec = generate(engine, &p.tokens, n, true)?;
        if report {
            on_run(p, Mode::Spec);
        }
        Ok::<_, Error>(PromptRun {
            category: p.category.clone(),
            prompt: p.prompt.clone(),
            plain,
            spec,
        })
    };
    if let (true, Some(first)) = (opts.warmup, prompts.first()) {
        both(engine, first, opts.n_predict.clamp(1, 4), false)?;
    }
    let mut out = Vec::with_capacity(prompts.len());
    for p in prompts {
        out.push(both(engine, p, opts.n_predict, true)?);
    }
    engine.reset(0)?;
    Ok(out)
}

/// Counters of one prompt or summed over several; the rates are totals over totals.
#[derive(Debug, Clone, PartialEq)]
pub struct Tally {
    pub n_prompts: usize,
    pub prompt_tokens: u64,
    pub plain_tokens: u64,
    pub spec_tokens: u64,
    /// Tokens the decode clock covers: each generation's tokens after its first (which comes
    /// from the prefill), as [`GenStats::decode_tps`] counts them.
    pub plain_decode_tokens: u64,
    pub spec_decode_tokens: u64,
    pub plain_decode_secs: f64,
    pub spec_decode_secs: f64,
    pub spec: SpecStats,
    pub greedy_match: bool,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            n_prompts: 0,
            prompt_tokens: 0,
            plain_tokens: 0,
            spec_tokens: 0,
            plain_decode_tokens: 0,
            spec_decode_tokens: 0,
            plain_decode_secs: 0.0,
            spec_decode_secs: 0.0,
            spec: SpecStats::default(),
            greedy_match: true,
        }
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

impl Tally {
    pub fn of(run: &PromptRun) -> Tally {
        let gen = |s: &GenStats| s.generated_tokens as u64;
        Tally {
            n_prompts: 1,
            prompt_tokens: run.plain.prompt_tokens as u64,
            plain_tokens: gen(&run.plain),
            spec_tokens: gen(&run.spec),
            plain_decode_tokens: gen(&run.plain).saturating_sub(1),
            spec_decode_tokens: gen(&run.spec).saturating_sub(1),
            plain_decode_secs: run.plain.decode_secs,
            spec_decode_secs: run.spec.decode_secs,
            spec: run.spec.spec.clone().unwrap_or_default(),
            greedy_match: run.greedy_match(),
        }
    }

    /// The sum of `runs`.
    pub fn sum<'a>(runs: impl IntoIterator<Item = &'a PromptRun>) -> Tally {
        let mut t = Tally::default();
        for r in runs {
            t.add(&Tally::of(r));
        }
        t
    }

    pub fn add(&mut self, o: &Tally) {
        self.n_prompts += o.n_prompts;
        self.prompt_tokens += o.prompt_tokens;
        self.plain_tokens += o.plain_tokens;
        self.spec_tokens += o.spec_tokens;
        self.plain_decode_tokens += o.plain_decode_tokens;
        self.spec_decode_tokens += o.spec_decode_tokens;
        self.plain_decode_secs += o.plain_decode_secs;
        self.spec_decode_secs += o.spec_decode_secs;
        self.spec.add(&o.spec);
        self.greedy_match &= o.greedy_match;
    }

    /// Plain decode tok/s.
    pub fn plain_tps(&self) -> f64 {
        ratio(self.plain_decode_tokens as f64, self.plain_decode_secs)
    }

    /// Speculative decode tok/s.
    pub fn spec_tps(&self) -> f64 {
        ratio(self.spec_decode_tokens as f64, self.spec_decode_secs)
    }

    /// Speculative over plain decode tok/s.
    pub fn speedup(&self) -> f64 {
        ratio(self.spec_tps(), self.plain_tps())
    }

    /// Decoded tokens per target forward after the prefill.
    pub fn tokens_per_target_forward(&self) -> f64 {
        ratio(
            self.spec_decode_tokens as f64,
            self.spec.target_forwards as f64,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ids_plain: &[u32], ids_spec: &[u32], secs: (f64, f64), s: SpecStats) -> PromptRun {
        let gs = |ids: &[u32], secs: f64, spec: Option<SpecStats>| GenStats {
            prompt_tokens: 5,
            generated_tokens: ids.len(),
            decode_secs: secs,
            generated_token_ids: ids.to_vec(),
            spec,
            ..GenStats::default()
        };
        PromptRun {
            category: "c".into(),
            prompt: "p".into(),
            plain: gs(ids_plain, secs.0, None),
            spec: gs(ids_spec, secs.1, Some(s)),
        }
    }

    #[test]
    fn tallies_sum_totals_not_ratios() {
        let mut s1 = SpecStats::new(2);
        s1.record(2, 2);
        s1.cycles = 1;
        s1.target_forwards = 1;
        let mut s2 = SpecStats::new(2);
        s2.record(2, 0);
        s2.record(2, 1);
        s2.cycles = 2;
        s2.target_forwards = 3;
        let a = run(&[1, 2, 3, 4], &[1, 2, 3, 4], (3.0, 1.0), s1);
        let b = run(&[1, 2, 3, 4, 5], &[1, 2, 3, 4, 6], (4.0, 4.0), s2);
        assert!(a.greedy_match() && !b.greedy_match());
        let t = Tally::sum([&a, &b]);
        assert_eq!((t.n_prompts, t.prompt_tokens, t.plain_tokens), (2, 10, 9));
        assert_eq!((t.plain_decode_tokens, t.spec_decode_tokens), (7, 7));
        assert!(!t.greedy_match);
        assert!((t.plain_tps() - 1.0).abs() < 1e-12);
        assert!((t.spec_tps() - 7.0 / 5.0).abs() < 1e-12);
        assert!((t.speedup() - 1.4).abs() < 1e-12);
        assert_eq!((t.spec.drafted, t.spec.accepted, t.spec.cycles), (6, 3, 3));
        assert!((t.spec.tau() - 2.0).abs() < 1e-12);
        assert_eq!(t.spec.slot_acceptance(), [2.0 / 3.0, 1.0 / 3.0]);
        assert!((t.tokens_per_target_forward() - 7.0 / 4.0).abs() < 1e-12);
        assert_eq!(Tally::sum([]).speedup(), 0.0);
    }
}
