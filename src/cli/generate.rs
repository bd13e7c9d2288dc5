//! `flint generate [-m MODEL] -p PROMPT [-n N]`: stream a completion of the prompt (`-f FILE`,
//! `-f -` or a piped stdin give it too; as it is, or with `-sys` or `--chat-template` as a user
//! turn of the chat template; `-r` stops at a string), then a stats line on stderr (prompt tokens, prefill tok/s,
//! generated tokens, decode tok/s, and the time spent compiling GPU pipelines the load had not
//! built, which the two rates leave out); `--stats-json PATH` writes the same as JSON
//! (`compile_ms`). With no `-m` it uses the default model, fetching it on first use.

use std::io::Write;
use std::path::PathBuf;

use serde_json::json;

use crate::engine::{cost_cache, solo, EngineOptions, GenStats, DEFAULT_MODEL};
use crate::engine::{Engine, Opened};
use crate::gguf::GgmlType;
use crate::memory::budget::BudgetSource;
use crate::memory::context::MIN_DEFAULT_CTX;
use crate::memory::parse_bytes;
use crate::sampling::{Sampler, SamplerParams};
use crate::tokenizer::ChatMessage;

use super::prompt_args::prompt_text;
use crate::{Error, Result};

/// Model and sampling flags shared by `generate` and `chat` (llama.cpp's names).
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// GGUF model (default: the SmolLM2-135M-Instruct Q4_1 of models/, fetched on first use).
    #[arg(short = 'm', long = "model", default_value = DEFAULT_MODEL)]
    pub model: PathBuf,
    /// Context length (default: the model's trained context, or the largest that fits the
    /// device's memory, at least 4096).
    #[arg(short = 'c', long = "ctx-size")]
    pub n_ctx: Option<u32>,
    /// Logical batch (llama.cpp's `-b`): accepted for compatibility; prompts run in ubatches of
    /// `-ub` rows, one submit each.
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    pub n_batch: u32,
    /// Prefill ubatch rows (`-ub`).
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub n_ubatch: u32,
    /// K cache type (`-ctk`): f16, q8_0, q4_0.
    #[arg(long = "cache-type-k", default_value = "f16")]
    pub type_k: String,
    /// V cache type (`-ctv`).
    #[arg(long = "cache-type-v", default_value = "f16")]
    pub type_v: String,
    /// Adapter (`-dev`): its index in `flint devices`, or a part of its name (case-insensitive).
    #[arg(long = "device", value_parser = super::devices::parse_device)]
    pub device: Option<usize>,
    /// Device memory budget for the plan check (e.g. 8GiB).
    #[arg(long = "gpu-mem")]
    pub gpu_mem: Option<String>,
    /// Temperature; 0 = greedy.
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temp: f32,
    #[arg(long = "top-k", default_value_t = 40)]
    pub top_k: u32,
    #[arg(long = "top-p", default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long = "min-p", default_value_t = 0.05)]
    pub min_p: f32,
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    pub repeat_penalty: f32,
    #[arg(long = "repeat-last-n", default_value_t = 64)]
    pub repeat_last_n: usize,
    #[arg(long = "presence-penalty", default_value_t = 0.0)]
    pub presence_penalty: f32,
    #[arg(long = "frequency-penalty", default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// RNG seed (default: from the clock).
    #[arg(short = 's', long = "seed")]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub spec: super::spec_args::SpecArgs,
    #[command(flatten)]
    pub hub: super::hub_args::HubArgs,
    #[command(flatten)]
    pub place: super::place_args::PlaceArgs,
}

impl ModelArgs {
    fn kv(flag: &str, v: &str) -> Result<GgmlType> {
        match GgmlType::from_name(v) {
            Some(t) if crate::memory::layout::KV_TYPES.contains(&t) => Ok(t),
            _ => Err(Error::Usage(format!(
                "{flag} {v}: KV cache types are f16, q8_0, q4_0"
            ))),
        }
    }

    /// The engine options; the default model brings its shipped drafter unless `-md` or
    /// `--no-spec` says otherwise.
    pub fn engine_options(&self) -> Result<EngineOptions> {
        self.engine_options_with(true)
    }

    /// The engine options; `default_drafter: false` speculates only with an explicit `-md`.
    pub fn engine_options_with(&self, default_drafter: bool) -> Result<EngineOptions> {
        let gpu_mem = match &self.gpu_mem {
            Some(v) => Some(
                parse_bytes(v)
                    .ok_or_else(|| Error::Usage(format!("--gpu-mem {v:?}: not a size")))?,
            ),
            None => None,
        };
        Ok(EngineOptions {
            model: self.model.clone(),
            // Without -c, `settle_ctx` fits the context before the load.
            n_ctx: self.n_ctx.unwrap_or(MIN_DEFAULT_CTX),
            n_ubatch: self.n_ubatch,
            type_k: Self::kv("-ctk", &self.type_k)?,
            type_v: Self::kv("-ctv", &self.type_v)?,
            device: self.device,
            gpu_mem,
            progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            draft: self
                .spec
                .draft_options(Self::kv, &self.model, default_drafter)?,
            verify_rows: 1,
            placement: self.place.rules()?,
        })
    }

    /// `None` for plain greedy decoding (on-device argmax), else a sampler.
    pub fn sampler(&self, n_vocab: u32) -> Result<Option<Sampler>> {
        let penalties = self.repeat_penalty != 1.0
            || self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0;
        if self.temp <= 0.0 && !penalties {
            if self.temp < 0.0 || self.temp.is_nan() {
                return Err(Error::Usage(format!("--temp {}: must be >= 0", self.temp)));
            }
            return Ok(None);
        }
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        let params = SamplerParams {
            temp: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed,
        };
        Ok(Some(Sampler::new(params, n_vocab)?))
    }
}

/// Arguments of `flint generate`.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt (default: `-f`, else stdin when it is not a terminal).
    #[arg(short = 'p', long = "prompt")]
    pub prompt: Option<String>,
    /// Read the prompt from this file (`-f`; `-` reads stdin).
    #[arg(long = "file", conflicts_with = "prompt")]
    pub file: Option<PathBuf>,
    /// System prompt, stop strings, `--ignore-eos`, chat template: with a system prompt or a
    /// template named, the prompt is sent as a user turn of the chat template.
    #[command(flatten)]
    pub opts: super::prompt_args::PromptArgs,
    /// Tokens to generate at most; -1: until an end-of-generation token or the end of the
    /// context (as in llama.cpp).
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 128,
        allow_negative_numbers = true
    )]
    pub n_predict: i64,
    /// Write the stats as JSON to this file.
    #[arg(long = "stats-json")]
    pub stats_json: Option<PathBuf>,
}

/// A `-n` value as a token count: -1 is "no limit" (the generation stops at an
/// end-of-generation token or when the context is full), other negative values are refused.
pub fn n_predict(n: i64) -> Result<usize> {
    match n {
        -1 => Ok(usize::MAX),
        n if n < 0 => Err(Error::Usage(format!(
            "-n {n}: a token count, or -1 for no limit (until an end-of-generation token or \
             the end of the context)"
        ))),
        n => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
    }
}

/// The stats line printed after a generation; `| compile X s` when pipelines were built
/// during it (the rates leave that time out).
pub fn stats_line(s: &GenStats) -> String {
    let mut line = format!(
        "prompt: {} tokens, {:.2} tok/s | generated: {} tokens, {:.2} tok/s",
        s.prompt_tokens,
        s.prefill_tps(),
        s.generated_tokens,
        s.decode_tps()
    );
    if s.compile_secs >= 0.005 {
        line.push_str(&format!(" | compile {:.2} s", s.compile_secs));
    }
    line
}

/// The engine options of `generate` and `chat` with the model and the device open
/// ([`crate::engine::open`], which refuses a `-m` that is not a model) and the context settled:
/// without the drafter when the costs an earlier run measured on this device show it cannot
/// pay (`cost_cache::unpaying_drafter`), which one stderr line says.
pub fn prepare(args: &ModelArgs) -> Result<(EngineOptions, Opened)> {
    let mut opts = args.engine_options()?;
    let mut opened = crate::engine::open(&opts)?;
    super::announce::device(&opened.ctx);
    settle_ctx(&mut opts, &opened, args.n_ctx, 1)?;
    if let Some(why) = cost_cache::unpaying_drafter(&opts, &opened) {
        eprintln!(
            "flint: {why}: running without the drafter (every {}th run tries it again; \
             FLINT_REMEASURE=1 measures and decides now, --spec-no-bypass forces it)",
            cost_cache::PROBE_EVERY
        );
        opts.draft = None;
        opened = opened.without_drafter();
    }
    Ok((opts, opened))
}

/// Without `-c` (`explicit`), sets `opts.n_ctx` to each of `n_slots` slots' share of the
/// context that fits ([`crate::engine::fit`], the plan the load allocates) and says so in one
/// stderr line; with it, each slot's share of `-c`, never changed: a plan that does not fit is
/// refused naming what would. A line also says when the budget is the stated default because
/// the driver tells nothing.
pub fn settle_ctx(
    opts: &mut EngineOptions,
    opened: &Opened,
    explicit: Option<u32>,
    n_slots: u32,
) -> Result<()> {
    match explicit {
        Some(c) => {
            opts.n_ctx = c / n_slots.max(1);
            crate::engine::fit::refuse_unless_fits(opened, opts, n_slots)?;
        }
        None => {
            let choice = crate::engine::fit::fit_ctx(opened, opts, n_slots);
            opts.n_ctx = choice.per_slot;
            if let Some(line) = choice.line(&opened.budget) {
                eprintln!("flint: {line}");
            }
        }
    }
    if opened.budget.source == BudgetSource::Default {
        eprintln!("flint: {}", default_budget_note(&opened.budget));
    }
    Ok(())
}

/// What a plan says first when its budget is the stated default.
pub fn default_budget_note(budget: &crate::memory::Budget) -> String {
    format!(
        "the driver tells nothing about this device's memory: planning against the {} default \
         (--gpu-mem SIZE sets it)",
        crate::memory::fmt_bytes(budget.bytes)
    )
}

pub fn run(args: &GenerateArgs) -> Result<()> {
    let n_predict = n_predict(args.n_predict)?;
    let stdin_tty = std::io::IsTerminal::is_terminal(&std::io::stdin());
    let text = prompt_text(args.prompt.as_deref(), args.file.as_deref(), stdin_tty)?;
    let system = args.opts.system()?;
    let template_src = args.opts.template.source()?;
    let grammar = args.opts.grammar.spec()?;
    let (opts, opened) = prepare(&args.model)?;
    let mut engine = Engine::from_opened(opened, &opts, 1)?;
    let n_vocab = engine.hp().n_vocab;
    let grammars = super::grammar_args::grammars(&engine.tok, n_vocab, &grammar)?;
    let mut guide = super::grammar_args::guide(&grammars, &grammar)?;
    let mut sampler = args.model.sampler(n_vocab)?;
    let prompt = if system.is_some() || args.opts.template.given() {
        let template = engine.tok.chat_template(template_src.as_deref())?;
        let mut messages: Vec<ChatMessage> = system
            .into_iter()
            .map(|s| ChatMessage::new("system", s))
            .collect();
        messages.push(ChatMessage::new("user", text));
        engine
            .tok
            .encode(&template.render(&messages, true)?, true, true)?
    } else {
        engine.tok.encode(&text, true, true)?
    };
    let tok = engine.tok.clone();
    let mut stream = tok.stream_decoder(false);
    let mut stops = args.opts.stops();
    let mut out = std::io::stdout();
    let req = solo::Request {
        prompt: &prompt,
        keep: 0,
        n_predict,
        sampler: sampler.as_mut(),
        grammar: &mut guide,
        ignore_eos: args.opts.ignore_eos,
        draft: true,
    };
    let stats = solo::generate(&mut engine, req, |t| {
        let text = stream.push(t)?;
        out.write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .map_err(|source| Error::Io {
                context: "writing to stdout".into(),
                source,
            })?;
        Ok(!stops.push(&text))
    })?;
    let rest = stream.finish();
    let _ = writeln!(out, "{rest}");
    eprintln!("{}", stats_line(&stats));
    if let Some(spec) = &stats.spec {
        eprintln!("{}", spec.summary(stats.generated_tokens));
    }
    if let Some(g) = &guide {
        eprintln!(
            "grammar: {} masks, {:.1} µs each, {} forced tokens",
            g.n_masks,
            g.mask_secs * 1e6 / g.n_masks.max(1) as f64,
            g.forced
        );
    }
    if let Some(path) = &args.stats_json {
        let mut v = json!({
            "prompt_tokens": stats.prompt_tokens,
            "generated_tokens": stats.generated_tokens,
            "prefill_tps": stats.prefill_tps(),
            "decode_tps": stats.decode_tps(),
            "compile_ms": stats.compile_secs * 1e3,
            "generated_token_ids": stats.generated_token_ids,
        });
        if let Some(spec) = &stats.spec {
            v["spec"] = spec.to_json(stats.generated_tokens);
        }
        std::fs::write(path, serde_json::to_string_pretty(&v).unwrap_or_default()).map_err(
            |source| Error::Io {
                context: format!("writing {}", path.display()),
                source,
            },
        )?;
    }
    Ok(())
}
