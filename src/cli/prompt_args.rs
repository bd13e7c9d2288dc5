//! The prompt and template flags of the run commands (llama.cpp's names): the system prompt
//! (`-sys`, `-sysf`), stop strings (`-r`), `--ignore-eos`, `--chat-template NAME|FILE` and
//! `--chat-template-file`, the prompt of `generate` from `-p`, `-f FILE`, `-f -` or a piped
//! stdin, and [`StopStrings`], which watches the generated text for the stop strings.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::tokenizer::builtin_templates::{builtin, names};
use crate::tokenizer::read_template_file;
use crate::{Error, Result};

/// `--chat-template NAME|FILE` and `--chat-template-file FILE` (default: the model's own).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TemplateArgs {
    /// Chat template: a built-in name (chatml, llama3, gemma, phi3, mistral-v7) or a Jinja
    /// file (default: the model's own `tokenizer.chat_template`).
    #[arg(long = "chat-template")]
    pub chat_template: Option<String>,
    /// A Jinja chat template file.
    #[arg(long = "chat-template-file", conflicts_with = "chat_template")]
    pub chat_template_file: Option<PathBuf>,
}

impl TemplateArgs {
    /// The template source that replaces the model's, or `None` for the model's own.
    pub fn source(&self) -> Result<Option<String>> {
        if let Some(p) = &self.chat_template_file {
            return Ok(Some(read_template_file(p)?));
        }
        let Some(v) = &self.chat_template else {
            return Ok(None);
        };
        if let Some(src) = builtin(v) {
            return Ok(Some(src.to_string()));
        }
        if Path::new(v).is_file() {
            return Ok(Some(read_template_file(Path::new(v))?));
        }
        Err(Error::Usage(format!(
            "--chat-template {v:?}: neither a built-in template ({}) nor a file",
            names()
        )))
    }

    /// Whether a template was asked for on the command line.
    pub fn given(&self) -> bool {
        self.chat_template.is_some() || self.chat_template_file.is_some()
    }
}

/// The flags `generate` and `chat` share about what is sent and when a reply stops.
#[derive(Debug, Clone, clap::Args)]
pub struct PromptArgs {
    /// System prompt (`-sys`), rendered through the chat template.
    #[arg(long = "system-prompt", visible_alias = "system")]
    pub system_prompt: Option<String>,
    /// A file holding the system prompt (`-sysf`).
    #[arg(long = "system-prompt-file", conflicts_with = "system_prompt")]
    pub system_prompt_file: Option<PathBuf>,
    /// Stop when the generated text contains this (`-r`; repeat for more). In `chat` it hands
    /// the turn back to the user.
    #[arg(long = "reverse-prompt")]
    pub reverse_prompt: Vec<String>,
    /// Keep generating past end-of-generation tokens (until `-n`, a `-r` string or the end of
    /// the context).
    #[arg(long = "ignore-eos")]
    pub ignore_eos: bool,
    #[command(flatten)]
    pub grammar: super::grammar_args::GrammarArgs,
    #[command(flatten)]
    pub template: TemplateArgs,
}

impl PromptArgs {
    /// The system prompt of `-sys` or `-sysf`.
    pub fn system(&self) -> Result<Option<String>> {
        match (&self.system_prompt, &self.system_prompt_file) {
            (Some(s), _) => Ok(Some(s.clone())),
            (None, Some(p)) => read(p, "--system-prompt-file").map(Some),
            (None, None) => Ok(None),
        }
    }

    /// A watcher for this command line's stop strings.
    pub fn stops(&self) -> StopStrings {
        StopStrings::new(self.reverse_prompt.clone())
    }
}

fn read(path: &Path, flag: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        context: format!("reading {flag} {}", path.display()),
        source,
    })
}

/// The prompt of `generate`: `-p`, else `-f FILE` (`-f -`: stdin), else stdin when it is not a
/// terminal; `stdin_is_terminal` is passed in so the rule can be tested.
pub fn prompt_text(
    prompt: Option<&str>,
    file: Option<&Path>,
    stdin_is_terminal: bool,
) -> Result<String> {
    let stdin = || {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|source| Error::Io {
                context: "reading the prompt from stdin".into(),
                source,
            })?;
        if s.is_empty() {
            return Err(Error::Usage(
                "no prompt: stdin was empty (give -p TEXT or -f FILE)".into(),
            ));
        }
        Ok(s)
    };
    match (prompt, file) {
        (Some(p), _) => Ok(p.to_string()),
        (None, Some(f)) if f == Path::new("-") => stdin(),
        (None, Some(f)) => read(f, "-f"),
        (None, None) if !stdin_is_terminal => stdin(),
        (None, None) => Err(Error::Usage(
            "no prompt: give -p TEXT, -f FILE, or pipe it on stdin".into(),
        )),
    }
}

/// Watches generated text for stop strings (`-r`): [`StopStrings::push`] says when one has
/// appeared, across token boundaries.
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    /// The tail of the text so far, as long as the longest stop string.
    tail: String,
}

impl StopStrings {
    pub fn new(stops: Vec<String>) -> StopStrings {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        StopStrings {
            stops,
            tail: String::new(),
        }
    }

    /// Add a piece of generated text; `true` when a stop string is now in the text.
    pub fn push(&mut self, piece: &str) -> bool {
        if self.stops.is_empty() {
            return false;
        }
        self.tail.push_str(piece);
        let hit = self.stops.iter().any(|s| self.tail.contains(s.as_str()));
        let keep = self.stops.iter().map(String::len).max().unwrap_or(0);
        if self.tail.len() > keep {
            let mut cut = self.tail.len() - keep;
            while !self.tail.is_char_boundary(cut) {
                cut -= 1;
            }
            self.tail.drain(..cut);
        }
        hit
    }

    /// Forget the text (a new turn).
    pub fn reset(&mut self) {
        self.tail.clear();
    }
}
