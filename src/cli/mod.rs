//! The command line: clap definitions and dispatch. One file per subcommand; `main.rs` only
//! parses, calls [`run`] and maps errors to exit codes.

mod announce;
pub mod bench;
pub mod bench_spec;
pub mod chat;
pub mod devices;
pub mod dspark;
pub mod generate;
pub mod gguf_cmd;
pub mod grammar_args;
pub mod hub_args;
pub mod info;
pub mod llama_args;
pub mod llama_table;
pub mod models;
pub mod place_args;
pub mod plan;
pub mod prompt_args;
pub mod pull;
pub mod rm;
pub mod serve;
pub mod spec_args;
pub mod tokenize;

use clap::{Parser, Subcommand};

use crate::Result;

/// flint: GGUF language models on any GPU wgpu reaches, with DSpark speculative decoding.
#[derive(Debug, Parser)]
#[command(name = "flint", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// `-v`, `--quiet`, `--log-format`, `--log-file` (global).
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Complete a prompt with a model (default: SmolLM2 from models/ or the model store,
    /// fetched on first use; docs/MODELS.md).
    Generate(generate::GenerateArgs),
    /// Chat interactively over the model's chat template.
    Chat(chat::ChatArgs),
    /// Show a GGUF file: header, metadata, tensor table and totals (like gguf-dump).
    Info(info::InfoArgs),
    /// List every GPU adapter wgpu finds: name, backend, type, driver, features, limits.
    Devices(devices::DevicesArgs),
    /// Plan every device buffer of a run (target, drafter, runtime) and check it fits.
    Plan(plan::PlanArgs),
    /// GGUF file tools (`strip`: keep metadata and shapes, drop the tensor data).
    Gguf(gguf_cmd::GgufArgs),
    /// Benchmark like llama-bench: pp/tg/pg tests at KV depths, md/csv/json/jsonl/sql output;
    /// with `-md DRAFT`, plain against DSpark decoding on a prompt set.
    Bench(bench::BenchArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (chat, completions, streaming, slots).
    Serve(serve::ServeArgs),
    /// DSpark drafter tools (`init`: a random drafter for a target, to test the drafter path).
    Dspark(dspark::DsparkArgs),
    /// Print the token ids of a JSONL prompt file, chat-templated as `bench -md` feeds them.
    Tokenize(tokenize::TokenizeArgs),
    /// Fetch a model into the model store and verify its sha256: a known name, or
    /// USER/REPO[:QUANT] / hf://USER/REPO/FILE from the Hugging Face Hub (docs/MODELS.md).
    Pull(pull::PullArgs),
    /// List the model store: name, size, path.
    Models(models::ModelsArgs),
    /// Remove a model from the model store (`flint models` names it).
    Rm(rm::RmArgs),
}

/// Run a parsed command line.
pub fn run(mut cli: Cli) -> Result<()> {
    resolve_defaults(&mut cli.command)?;
    match cli.command {
        Command::Generate(args) => generate::run(&args),
        Command::Chat(args) => chat::run(&args),
        Command::Info(args) => info::run(&args),
        Command::Devices(args) => devices::run(args.json),
        Command::Plan(args) => plan::run(&args),
        Command::Gguf(args) => gguf_cmd::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Dspark(args) => dspark::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Tokenize(args) => tokenize::run(&args),
        Command::Pull(args) => pull::run(&args),
        Command::Models(args) => models::run(&args),
        Command::Rm(args) => rm::run(&args),
    }
}

/// Point `-m` at a real file: `-hf USER/REPO[:QUANT]` fetched into the model store; a store
/// name (`flint models`); the default model from the repository's models/ when run there, else
/// from the model store (fetched on first use), so the binary works from any directory. For
/// `generate` and `chat` the default model brings its shipped drafter.
fn resolve_defaults(command: &mut Command) -> Result<()> {
    use crate::engine::{default_drafter_path, resolve_model, DEFAULT_MODEL};
    use std::path::{Path, PathBuf};
    let named = |hub: &hub_args::HubArgs, m: &mut PathBuf| -> Result<()> {
        if let Some(p) = hub.resolve()? {
            *m = p;
        } else if m != Path::new(DEFAULT_MODEL) && !m.as_os_str().is_empty() && !m.exists() {
            if let Some(p) = m
                .to_str()
                .map(crate::store::resolve_name)
                .transpose()?
                .flatten()
            {
                *m = p;
            }
        }
        Ok(())
    };
    let with_drafter = |m: &mut generate::ModelArgs| -> Result<()> {
        named(&m.hub, &mut m.model)?;
        if m.model != Path::new(DEFAULT_MODEL) {
            return Ok(());
        }
        if m.spec.draft_model.is_none() && !m.spec.no_spec {
            match default_drafter_path() {
                Ok(p) => m.spec.draft_model = Some(p),
                Err(e) => eprintln!("note: no default drafter ({e}); decoding without speculation"),
            }
        }
        m.model = resolve_model(&m.model)?;
        Ok(())
    };
    match command {
        Command::Generate(a) => with_drafter(&mut a.model),
        Command::Chat(a) => with_drafter(&mut a.model),
        Command::Serve(a) => {
            named(&a.model.hub, &mut a.model.model)?;
            a.model.model = resolve_model(&a.model.model)?;
            Ok(())
        }
        Command::Bench(a) => {
            named(&a.hub, &mut a.model)?;
            a.model = resolve_model(&a.model)?;
            Ok(())
        }
        Command::Tokenize(a) => {
            named(&a.hub, &mut a.model)?;
            a.model = resolve_model(&a.model)?;
            Ok(())
        }
        Command::Plan(a) => {
            named(&a.hub, &mut a.model)?;
            if a.model.as_os_str().is_empty() {
                return Err(crate::Error::Usage(
                    "plan needs a model: -m MODEL or -hf USER/REPO[:QUANT]".into(),
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
