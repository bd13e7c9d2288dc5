//! The `flint` binary: parse the command line, run it, map errors to exit codes.
//!
//! The logger (`RUST_LOG`, `-v`, `--quiet`, `--log-format`, `--log-file`: [`flint::logging`]) is
//! installed first, once, for every command.
//!
//! Exit codes: 0 success, 1 other errors, 2 usage (clap's, and llama.cpp flags refused or
//! unknown, [`flint::cli::llama_args`]), 3 bad input file, 4 GPU/device errors.
//! Never 101 (a panic) on bad input.
//!
//! `flint serve` ends through [`flint::gpu::end_process`], success or error: when it returns,
//! its loader, pipeline builders and slot workers may still be inside the GPU driver, and a
//! normal exit's library teardown (Mesa's EGL `atexit` handler, LLVM's destructors) would race
//! them (a crash at exit on GL). Every other command has dropped its device on this thread
//! before it returns, and ends normally (which also lets Mesa finish writing its shader cache).

use clap::Parser;

fn main() {
    let args = match flint::cli::llama_args::normalize(std::env::args_os()) {
        Ok(n) => {
            for note in &n.notes {
                eprintln!("flint: {note}");
            }
            n.args
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let cli = flint::cli::Cli::parse_from(args);
    let serve = matches!(cli.command, flint::cli::Command::Serve(_));
    if let Err(e) = flint::logging::init(&cli.log, serve) {
        report(&e);
        std::process::exit(e.exit_code());
    }
    let code = match flint::cli::run(cli) {
        Ok(()) => 0,
        Err(e) => {
            report(&e);
            e.exit_code()
        }
    };
    if serve {
        flint::gpu::end_process(code);
    }
    if code != 0 {
        std::process::exit(code);
    }
}

/// Prints `error: …` with every source the message does not already hold.
fn report(e: &flint::Error) {
    let mut msg = format!("error: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(&format!(": {text}"));
        }
        source = s.source();
    }
    eprintln!("{msg}");
}
