//! The `flint` binary: parse the command line, run it, map errors to exit codes.
//!
//! Exit codes: 0 success, 1 other errors, 2 usage, 3 bad input file, 4 GPU/device errors.
//! Never 101 (a panic) on bad input.

use clap::Parser;

fn main() {
    let cli = flint::cli::Cli::parse_from(flint::cli::normalize_args(std::env::args_os()));
    if let Err(e) = flint::cli::run(cli) {
        let mut msg = format!("error: {e}");
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            let text = s.to_string();
            if !msg.contains(&text) {
                msg.push_str(&format!(": {text}"));
            }
            source = s.source();
        }
        eprintln!("{msg}");
        std::process::exit(e.exit_code());
    }
}
