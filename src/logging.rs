//! Logging: one `tracing` subscriber for the process, installed by `main` before the command
//! runs. Its filter comes from `RUST_LOG` when set, else from `-v` / `--quiet` and the command
//! (`serve` shows its startup and request lines at info; other commands show warnings and
//! errors only, so `generate`'s output is what it was). Records the GPU stack writes through the
//! `log` crate (wgpu, wgpu-hal, naga) go through the same filter: their warnings and errors show,
//! their info-level chatter does not unless asked for. Output: text or JSON lines on stderr, and
//! the same lines appended to `--log-file` when given.

use std::io::IsTerminal;
use std::path::PathBuf;

use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::{Error, Result};

/// The logging options every command takes (global: before or after the subcommand).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LogArgs {
    /// More log detail: -v info, -vv debug, -vvv trace (`RUST_LOG`, when set, wins).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Errors only (`RUST_LOG`, when set, wins).
    #[arg(long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Log line format: `text` (human) or `json` (one object a line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Also append the log to this file (in the same format, without colours).
    #[arg(long, value_name = "PATH", global = true)]
    pub log_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The filter when `RUST_LOG` is unset: by verbosity, with the dependencies (wgpu, naga,
/// hyper …) one step quieter than flint. `serve_default` raises the default to flint's info
/// lines (the server's startup and request log).
pub fn default_directives(verbose: u8, quiet: bool, serve_default: bool) -> &'static str {
    match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) if serve_default => "warn,flint=info",
        (false, 0) => "warn",
        (false, 1) => "warn,flint=info",
        (false, 2) => "info,flint=debug",
        (false, _) => "debug,flint=trace",
    }
}

/// The filter: `RUST_LOG` when set and not empty, else [`default_directives`]. A `RUST_LOG`
/// that does not parse is named in a warning and the default used (as a wrong `-v` would not
/// stop a run, neither does a wrong variable).
fn filter(args: &LogArgs, serve_default: bool) -> EnvFilter {
    let default = || EnvFilter::new(default_directives(args.verbose, args.quiet, serve_default));
    match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => match EnvFilter::builder().parse(&spec) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("warning: RUST_LOG={spec:?} does not parse ({e}): using the default");
                default()
            }
        },
        _ => default(),
    }
}

/// One output: text or JSON lines to `writer`.
fn layer<S, W>(
    format: LogFormat,
    ansi: bool,
    writer: W,
) -> Box<dyn Layer<S> + Send + Sync + 'static>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => fmt.boxed(),
        // Fields at the top level beside `message`, so `jq .status` works.
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    }
}

/// Install the process's subscriber (and the `log` bridge). Call once, first thing.
pub fn init(args: &LogArgs, serve_default: bool) -> Result<()> {
    let filter = filter(args, serve_default);
    let file = match &args.log_file {
        None => None,
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| Error::Io {
                    context: format!("opening the log file {}", path.display()),
                    source,
                })?,
        ),
    };
    let ansi = args.log_format == LogFormat::Text
        && std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none();
    let stderr = layer(args.log_format, ansi, std::io::stderr);
    let file = file.map(|f| layer(args.log_format, false, std::sync::Mutex::new(f)));
    // `try_init` also installs the `log` → tracing bridge at the filter's most detailed level.
    tracing_subscriber::registry()
        .with(filter)
        .with(stderr)
        .with(file)
        .try_init()
        .map_err(|e| Error::Usage(format!("installing the logger: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_steps_and_quiet() {
        assert_eq!(default_directives(0, false, false), "warn");
        assert_eq!(default_directives(0, false, true), "warn,flint=info");
        assert_eq!(default_directives(1, false, false), "warn,flint=info");
        assert_eq!(default_directives(2, false, true), "info,flint=debug");
        assert_eq!(default_directives(5, false, false), "debug,flint=trace");
        assert_eq!(default_directives(0, true, true), "error");
        for v in 0..4 {
            for s in [false, true] {
                let d = default_directives(v, false, s);
                assert!(EnvFilter::builder().parse(d).is_ok(), "{d}");
            }
        }
    }
}
