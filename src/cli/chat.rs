//! `flint chat`: an interactive chat over the model's chat template (or `--chat-template`).
//! Each turn renders the whole conversation, keeps the KV rows of the longest common token
//! prefix with what the cache already holds, and prefills only the rest. `/reset` clears the
//! history; Ctrl-D leaves.

use std::io::{BufRead, Write};

use crate::engine::solo;
use crate::engine::Engine;
use crate::tokenizer::ChatMessage;
use crate::{Error, Result};

use super::generate::{stats_line, ModelArgs};

/// Arguments of `flint chat`.
#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// System prompt (`-sys`, `--system`), stop strings (`-r`: hand the turn back),
    /// `--ignore-eos`, the chat template.
    #[command(flatten)]
    pub opts: super::prompt_args::PromptArgs,
    /// Tokens per reply at most; -1: until an end-of-generation token or the end of the
    /// context.
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 512,
        allow_negative_numbers = true
    )]
    pub n_predict: i64,
    /// Print the speed and speculative-decoding stats after every reply.
    #[arg(long = "stats")]
    pub stats: bool,
}

fn io_err(source: std::io::Error) -> Error {
    Error::Io {
        context: "chat terminal".into(),
        source,
    }
}

pub fn run(args: &ChatArgs) -> Result<()> {
    let n_predict = super::generate::n_predict(args.n_predict)?;
    let override_src = args.opts.template.source()?;
    let system = args.opts.system()?;
    let grammar = args.opts.grammar.spec()?;
    let (opts, opened) = super::generate::prepare(&args.model)?;
    let mut engine = Engine::from_opened(opened, &opts, 1)?;
    let n_vocab = engine.hp().n_vocab;
    let grammars = super::grammar_args::grammars(&engine.tok, n_vocab, &grammar)?;
    let template = engine.tok.chat_template(override_src.as_deref())?;
    let mut stops = args.opts.stops();
    let mut sampler = args.model.sampler(n_vocab)?;
    let tok = engine.tok.clone();
    let mut history: Vec<ChatMessage> = Vec::new();
    if let Some(s) = system {
        history.push(ChatMessage::new("system", s));
    }
    // Token ids whose K/V rows the cache holds, in order.
    let mut cached: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    eprintln!(
        "chat with {} (/reset clears the history, Ctrl-D leaves)",
        engine.model_path.display()
    );
    loop {
        write!(out, "> ")
            .and_then(|_| out.flush())
            .map_err(io_err)?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).map_err(io_err)? == 0 {
            writeln!(out).map_err(io_err)?;
            return Ok(());
        }
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim() == "/reset" {
            history.retain(|m| m.role == "system");
            solo::keep_prefix(&mut engine, &mut cached, &[])?;
            eprintln!("(history cleared)");
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        history.push(ChatMessage::new("user", line));
        let text = template.render(&history, true)?;
        let ids = tok.encode(&text, true, true)?;
        let keep = solo::keep_prefix(&mut engine, &mut cached, &ids)?;
        let mut guide = super::grammar_args::guide(&grammars, &grammar)?;
        let mut stream = tok.stream_decoder(false);
        let mut reply_ids = Vec::new();
        stops.reset();
        let req = solo::Request {
            prompt: &ids,
            keep,
            n_predict,
            sampler: sampler.as_mut(),
            grammar: &mut guide,
            ignore_eos: args.opts.ignore_eos,
            draft: true,
        };
        let stats = solo::generate(&mut engine, req, |t| {
            reply_ids.push(t);
            let piece = stream.push(t)?;
            out.write_all(piece.as_bytes())
                .and_then(|_| out.flush())
                .map_err(io_err)?;
            Ok(!stops.push(&piece))
        })?;
        writeln!(out, "{}", stream.finish()).map_err(io_err)?;
        if args.stats {
            eprintln!("[{}]", stats_line(&stats));
            if let Some(spec) = &stats.spec {
                eprintln!("[{}]", spec.summary(stats.generated_tokens));
            }
        }
        let in_cache = engine.rows(0)?;
        solo::note_cached(&mut cached, &ids[keep..], &reply_ids, in_cache);
        let reply = tok.decode(&reply_ids, false)?;
        history.push(ChatMessage::new("assistant", reply));
    }
}
