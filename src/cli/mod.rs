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
pub mod plan;
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
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Complete a prompt with a model (default: the SmolLM2 of models/, fetched on first use).
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
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
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
    ("-pg", "--pg"),
    ("-ngl", "--n-gpu-layers"),
    ("-cd", "--ctx-size-draft"),
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
