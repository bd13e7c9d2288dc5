//! `flint bench -md DRAFT` (or `--spec-type draft-mtp`): the speculative benchmark ([`crate::bench::speculative`]). Every prompt of
//! `--spec-prompts` is decoded greedily plainly and with the drafter (bypass off); one row per
//! prompt, per category and over all goes to stdout in the `-o` format, the progress bar to
//! stderr.

use crate::bench::speculative::{self, prompts, rows, Mode, SpecBenchOptions};
use crate::bench::{output, ModelDesc};
use crate::engine::Engine;
use crate::engine::{DraftOptions, EngineOptions};
use crate::{Error, Result};

use super::bench::{engine_options, gpu_mem, BenchArgs};

/// Tokens per prompt and mode: `-n` (one value) or 64.
fn n_predict(args: &BenchArgs) -> Result<usize> {
    match args.n_gen.as_deref() {
        None => Ok(64),
        Some([n]) if *n > 0 => Ok(*n as usize),
        Some(v) => Err(Error::Usage(format!(
            "-n {v:?}: the speculative benchmark takes one token count above 0"
        ))),
    }
}

/// The benchmark with drafter `d` (a DSpark file, or the MTP block of `-m`), named `label` in
/// the rows.
pub fn run(args: &BenchArgs, mut d: DraftOptions, label: &str) -> Result<()> {
    let format = output::Format::parse(&args.output)?;
    let opts = SpecBenchOptions {
        n_predict: n_predict(args)?,
        n_max: args.spec_n_max,
        chat_template: !args.spec_raw_prompts,
        warmup: true,
    };
    if args.spec_n_max == Some(0) {
        return Err(Error::Usage(
            "--spec-draft-n-max 0: verify at least one draft per cycle".into(),
        ));
    }
    let list = prompts::load(args.spec_prompts.as_deref().unwrap_or("builtin"))?;
    d.n_max = args.spec_n_max.unwrap_or(d.n_max);
    d.bypass = false;
    // The context is set once the prompts are tokenized, before the load plans it.
    let mut eopts = EngineOptions {
        draft: Some(d),
        ..engine_options(args, 1, gpu_mem(args)?)?
    };
    let opened = super::bench::open(&eopts)?;
    let template = args.template.source()?;
    let template = template.as_deref();
    let tok = &opened.tok;
    let prepared = speculative::prepare(tok, &list, opts.chat_template, template)?;
    let templated = speculative::uses_chat_template(tok, opts.chat_template, template);
    let (hp, gguf) = (&opened.hp, &opened.file.gguf);
    let desc = ModelDesc::from_gguf(gguf, hp.arch.name(), hp.tied_embeddings);
    eopts.n_ctx = speculative::ctx_needed(&prepared, opts.n_predict);
    let mut engine = Engine::from_opened(opened, &eopts, 1)?;
    let session =
        rows::SpecSession::from_engine(&engine, &desc.model_type, label, opts.n_predict, templated);

    let bar = indicatif::ProgressBar::new(2 * prepared.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let result = speculative::run(&mut engine, &prepared, &opts, |p, mode: Mode| {
        bar.set_message(format!("{} {}", p.category, mode.name()));
        bar.inc(1);
    });
    bar.finish_and_clear();
    let result = result?;

    let diverged = result.runs.iter().filter(|r| !r.greedy_match()).count();
    if diverged > 0 {
        eprintln!(
            "warning: greedy_match is false for {diverged} of {} prompts: speculative decoding \
             did not reproduce plain decoding",
            result.runs.len()
        );
    }
    let records = rows::records(&session, &result);
    let text = match format {
        output::Format::Md => rows::markdown(&records),
        other => output::render_as(other, &records, "spec"),
    };
    super::info::write_stdout(&text)
}
