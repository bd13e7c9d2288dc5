//! `flint serve`: the OpenAI-compatible server's flags (llama-server's names) and start-up.
//! `-c` is the total context, split evenly over the `-np` slots, as llama-server does.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::sampling::SamplerParams;
use crate::server::{self, ServeOptions};
use crate::{Error, Result};

use super::generate::ModelArgs;

/// Arguments of `flint serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to bind (loopback by default; others need an API key or --insecure).
    #[arg(long = "host", default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port (0 picks a free one; the chosen address is printed).
    #[arg(long = "port", default_value_t = 8080)]
    pub port: u16,
    /// Slots (`-np`): requests generated at the same time, each with its own KV cache.
    #[arg(long = "parallel", default_value_t = 1)]
    pub n_parallel: u32,
    /// Requests that may wait for a slot; beyond them a request gets 429 at once.
    #[arg(long = "queue", default_value_t = 32)]
    pub queue: usize,
    /// API key (repeat or comma-separate for several).
    #[arg(long = "api-key", value_delimiter = ',')]
    pub api_key: Vec<String>,
    /// File with one API key per line.
    #[arg(long = "api-key-file")]
    pub api_key_file: Option<PathBuf>,
    /// Allow a non-loopback --host without an API key.
    #[arg(long = "insecure")]
    pub insecure: bool,
    /// Without an API key, the `Host` names requests may carry besides loopback names and the
    /// bound address (repeat or comma-separate; `*` for any, which also drops the JSON-only
    /// rule on POST bodies).
    #[arg(long = "allowed-hosts", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Model name clients see (default: the file name without .gguf).
    #[arg(long = "alias")]
    pub alias: Option<String>,
    /// Seconds a request may wait in the queue for a slot; past them it gets 503 (retry later).
    #[arg(long = "timeout", default_value_t = 600)]
    pub timeout: u64,
    /// Seconds a client has to send a request's head (also the wait for the next request on a
    /// kept-alive connection).
    #[arg(long = "timeout-header", default_value_t = 30)]
    pub timeout_header: u64,
    /// Seconds a client has to send a request's body (408 past them).
    #[arg(long = "timeout-body", default_value_t = 30)]
    pub timeout_body: u64,
    /// Seconds after which a connection with no request in flight and no traffic, or whose
    /// response cannot be written (the client stopped reading), is closed.
    #[arg(long = "timeout-idle", default_value_t = 60)]
    pub timeout_idle: u64,
    /// Open connections at most; past them the connection idle the longest is closed (503 when
    /// every one has a request in flight).
    #[arg(long = "max-connections", default_value_t = 256)]
    pub max_connections: usize,
    /// Open connections one peer address may hold; past them that peer's idlest connection is
    /// closed (503 when each of its connections has a request in flight).
    #[arg(long = "max-connections-per-peer", default_value_t = 128)]
    pub max_connections_per_peer: usize,
    /// Origins browsers may call from (CORS; repeat or comma-separate; `*` for any).
    #[arg(long = "cors-origin", value_delimiter = ',')]
    pub cors_origin: Vec<String>,
    /// Seconds between SSE keep-alive comments on a quiet stream (queued, or between tokens);
    /// 0 turns them off.
    #[arg(long = "sse-keepalive", default_value_t = 10)]
    pub sse_keepalive: u64,
    /// Refuse request fields this server does not know (400 naming the field) instead of
    /// ignoring them with a warning and an `X-Flint-Ignored` header.
    #[arg(long = "strict-fields")]
    pub strict_fields: bool,
    /// How chat answers give reasoning: `auto` / `deepseek` split a `<think>…</think>` (the
    /// template's or the model's own) out as `reasoning_content`; `none` leaves it in `content`.
    /// A request's `reasoning_format` overrides it.
    #[arg(long = "reasoning-format", default_value = "auto")]
    pub reasoning_format: String,
    /// Reasoning budget: -1 unbounded; 0 turns thinking off (the template variable
    /// `enable_thinking` is false unless a request sets it).
    #[arg(long = "reasoning-budget", default_value_t = -1, allow_hyphen_values = true)]
    pub reasoning_budget: i64,
    /// Template variables of every chat request, a JSON object (`{"enable_thinking": false}`);
    /// a request's `chat_template_kwargs` overrides them key by key.
    #[arg(long = "chat-template-kwargs", value_name = "JSON")]
    pub chat_template_kwargs: Option<String>,
    /// A constraint for requests that ask for none (`--grammar-file FILE` in GBNF or Lark,
    /// `-j SCHEMA`, `--regex R`); a request's own constraint or tools replace it.
    #[command(flatten)]
    pub grammar: super::grammar_args::GrammarArgs,
    /// The chat template of /v1/chat/completions (default: the model's own).
    #[command(flatten)]
    pub template: super::prompt_args::TemplateArgs,
    /// Do not serve the chat page at `/` (llama-server's `--no-webui`).
    #[arg(long = "no-webui")]
    pub no_webui: bool,
}

pub fn run(args: &ServeArgs) -> Result<()> {
    let mut keys: Vec<String> = args
        .api_key
        .iter()
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty())
        .collect();
    if let Some(path) = &args.api_key_file {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            context: format!("reading --api-key-file {}", path.display()),
            source,
        })?;
        keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from),
        );
        if keys.is_empty() {
            return Err(Error::Usage(format!(
                "--api-key-file {} holds no key",
                path.display()
            )));
        }
    }
    if args.n_parallel == 0 {
        return Err(Error::Usage("-np must be at least 1".into()));
    }
    let secs = |flag: &str, n: u64| {
        if n == 0 {
            return Err(Error::Usage(format!("{flag} must be at least 1 second")));
        }
        Ok(std::time::Duration::from_secs(n))
    };
    let conn = server::conn::Limits {
        header: secs("--timeout-header", args.timeout_header)?,
        body: secs("--timeout-body", args.timeout_body)?,
        idle: secs("--timeout-idle", args.timeout_idle)?,
        max: args.max_connections,
        per_peer: args.max_connections_per_peer,
    };
    let queue_timeout = secs("--timeout", args.timeout)?;
    if conn.max == 0 || conn.per_peer == 0 {
        return Err(Error::Usage(
            "--max-connections and --max-connections-per-peer must be at least 1".into(),
        ));
    }
    if let Some(c) = args.model.n_ctx {
        let per_slot = c / args.n_parallel;
        if per_slot < 2 {
            return Err(Error::Usage(format!(
                "-c {c} over -np {} slots leaves {per_slot} tokens per slot",
                args.n_parallel
            )));
        }
    }
    let mut engine = args.model.engine_options_with(false)?;
    let opened = crate::engine::open(&engine)?;
    super::announce::device(&opened.ctx);
    super::generate::settle_ctx(&mut engine, &opened, args.model.n_ctx, args.n_parallel)?;
    let per_slot = engine.n_ctx;
    if let Some(d) = &mut engine.draft {
        d.ctx = d.ctx.map(|c| c.min(per_slot));
    }
    let alias = args.alias.clone().unwrap_or_else(|| {
        engine
            .model
            .file_name()
            .map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_string())
            .unwrap_or_else(|| "model".into())
    });
    let m = &args.model;
    let defaults = SamplerParams {
        temp: m.temp,
        top_k: m.top_k,
        top_p: m.top_p,
        min_p: m.min_p,
        repeat_penalty: m.repeat_penalty,
        repeat_last_n: m.repeat_last_n,
        presence_penalty: m.presence_penalty,
        frequency_penalty: m.frequency_penalty,
        seed: m.seed.unwrap_or(0),
    };
    defaults.validate()?;
    let chat_template = args.template.source()?;
    let chat = chat_defaults(args)?;
    server::run(
        ServeOptions {
            engine,
            host: args.host,
            port: args.port,
            n_slots: args.n_parallel,
            max_queue: args.queue,
            keys,
            insecure: args.insecure,
            allowed_hosts: args.allowed_hosts.clone(),
            alias,
            defaults,
            conn,
            queue_timeout,
            seed: m.seed,
            cors_origins: args.cors_origin.clone(),
            keep_alive: (args.sse_keepalive > 0)
                .then(|| std::time::Duration::from_secs(args.sse_keepalive)),
            chat_template,
            strict_fields: args.strict_fields,
            chat,
            default_grammar: args.grammar.spec()?,
            webui: !args.no_webui,
        },
        opened,
    )
}

/// `--reasoning-format`, `--reasoning-budget` and `--chat-template-kwargs` as chat defaults.
fn chat_defaults(args: &ServeArgs) -> Result<server::request::ChatDefaults> {
    let reasoning_none =
        server::structured::reasoning_none(&args.reasoning_format).ok_or_else(|| {
            Error::Usage(format!(
                "--reasoning-format {}: it must be none, auto, deepseek or deepseek-legacy",
                args.reasoning_format
            ))
        })?;
    let mut template_kwargs = match &args.chat_template_kwargs {
        None => serde_json::Map::new(),
        Some(text) => match serde_json::from_str(text) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => {
                return Err(Error::Usage(format!(
                    "--chat-template-kwargs {text}: it must be a JSON object"
                )))
            }
        },
    };
    match args.reasoning_budget {
        -1 => {}
        0 => {
            template_kwargs
                .entry("enable_thinking")
                .or_insert(serde_json::Value::Bool(false));
        }
        n => {
            return Err(Error::Usage(format!(
                "--reasoning-budget {n}: only -1 (unbounded) and 0 (thinking off) are \
                 supported; a request's max_reasoning_chars bounds reasoning in characters"
            )))
        }
    }
    Ok(server::request::ChatDefaults {
        reasoning_none,
        template_kwargs,
    })
}
