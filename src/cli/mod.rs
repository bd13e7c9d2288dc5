//! The command line: clap definitions and dispatch. One file per subcommand; `main.rs` only
//! parses, calls [`run`] and maps errors to exit codes.

pub mod bench;
pub mod bench_spec;
pub mod chat;
pub mod devices;
pub mod dspark;
pub mod generate;
pub mod gguf_cmd;
pub mod info;
mod model_check;
pub mod models;
pub mod plan;
pub mod pull;
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
    /// Fetch a known model into the model store and verify its sha256 (docs/MODELS.md).
    Pull(pull::PullArgs),
    /// List the model store: name, size, path.
    Models(models::ModelsArgs),
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
    }
}

/// Point the default `-m` (and, for `generate` and `chat`, its shipped drafter) at real files:
/// the repository's models/ when run there, else the model store (fetched on first use), so
/// the binary works from any directory.
fn resolve_defaults(command: &mut Command) -> Result<()> {
    use crate::engine::{default_drafter_path, resolve_model, DEFAULT_MODEL};
    let with_drafter = |m: &mut generate::ModelArgs| -> Result<()> {
        if m.model != std::path::Path::new(DEFAULT_MODEL) {
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
            a.model.model = resolve_model(&a.model.model)?;
            Ok(())
        }
        Command::Bench(a) => {
            a.model = resolve_model(&a.model)?;
            Ok(())
        }
        Command::Tokenize(a) => {
            a.model = resolve_model(&a.model)?;
            Ok(())
        }
        _ => Ok(()),
    }
}

/// llama.cpp's multi-letter single-dash flags and the long flags they stand for.
const LLAMA_FLAGS: &[(&str, &str)] = &[
    ("-md", "--model-draft"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-ctkd", "--cache-type-k-draft"),
    ("-ctvd", "--cache-type-v-draft"),
    ("-ub", "--ubatch-size"),
    ("-np", "--parallel"),
    ("-to", "--timeout"),
    ("-pg", "--pg"),
    ("-ngl", "--n-gpu-layers"),
    ("-cd", "--ctx-size-draft"),
    ("-npp", "--npp"),
    ("-ntg", "--ntg"),
    ("-npl", "--npl"),
];

/// Rewrite llama.cpp-style flags (`-ctk q8_0`) to the long flags clap parses.
pub fn normalize_args(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    args.into_iter()
        .map(|a| {
            let mapped = a
                .to_str()
                .and_then(|s| LLAMA_FLAGS.iter().find(|(short, _)| *short == s));
            match mapped {
                Some((_, long)) => std::ffi::OsString::from(long),
                None => a,
            }
        })
        .collect()
}
