//! The command line: clap definitions and dispatch. One file per subcommand; `main.rs` only
//! parses, calls [`run`] and maps errors to exit codes.

pub mod devices;
pub mod info;

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
    /// Show a GGUF file: header, metadata, tensor table and totals (like gguf-dump).
    Info(info::InfoArgs),
    /// List every GPU adapter wgpu finds: name, backend, type, driver, features, limits.
    Devices(devices::DevicesArgs),
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Info(args) => info::run(&args),
        Command::Devices(args) => devices::run(args.json),
    }
}
