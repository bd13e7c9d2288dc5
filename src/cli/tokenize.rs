//! `flint tokenize -m MODEL --prompts FILE [--raw]`: the token ids flint feeds the model for
//! each prompt of a JSONL prompt file (the `--spec-prompts` format, one
//! `{"category": …, "prompt": …}` object a line), each as one user turn of the model's chat
//! template unless `--raw`, with BOS as the model wants it. Prints one JSON object a line:
//! `{"category", "prompt", "ids"}`. Tools outside flint (the drafter training recipe in
//! `train/dspark/`) use it so their prompts are tokenized exactly as flint's runs tokenize them.

use std::path::PathBuf;

use serde_json::json;

use crate::bench::speculative::{prepare, prompts};
use crate::engine::DEFAULT_MODEL;
use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;
use crate::Result;

use super::info::write_stdout;

/// Arguments of `flint tokenize`.
#[derive(Debug, clap::Args)]
pub struct TokenizeArgs {
    /// The model whose tokenizer and chat template to use.
    #[arg(short = 'm', long, default_value = DEFAULT_MODEL)]
    pub model: PathBuf,
    #[command(flatten)]
    pub hub: super::hub_args::HubArgs,
    /// `builtin` (the speculative benchmark's prompts) or a JSONL file of
    /// `{"category": …, "prompt": …}` objects.
    #[arg(long, default_value = "builtin")]
    pub prompts: String,
    /// Tokenize the prompt text as it is, without the chat template.
    #[arg(long, conflicts_with_all = ["chat_template", "chat_template_file"])]
    pub raw: bool,
    /// The chat template the prompts are a user turn of (default: the model's own).
    #[command(flatten)]
    pub template: super::prompt_args::TemplateArgs,
}

pub fn run(args: &TokenizeArgs) -> Result<()> {
    let list = prompts::load(&args.prompts)?;
    let file = GgufFile::open(&args.model)?;
    let tok = Tokenizer::from_gguf(&file.gguf)?;
    let template = args.template.source()?;
    let prepared = prepare(&tok, &list, !args.raw, template.as_deref())?;
    let mut out = String::new();
    for p in &prepared {
        let line = json!({"category": p.category, "prompt": p.prompt, "ids": p.tokens});
        out.push_str(&line.to_string());
        out.push('\n');
    }
    write_stdout(&out)
}
