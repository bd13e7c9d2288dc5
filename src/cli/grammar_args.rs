//! The structured-output flags `generate` and `chat` share: `--json-schema S|@FILE`,
//! `--grammar FILE` (GBNF, llama.cpp's format, or Lark in llguidance's dialect; also spelled
//! `--grammar-file`) and `--regex R`. At most one; the reply (each
//! reply in `chat`) is then constrained to it, token by token, on the device.

use std::path::PathBuf;

use crate::grammar::steps::Guide;
use crate::grammar::{GrammarSpec, Grammars};
use crate::{Error, Result};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct GrammarArgs {
    /// Constrain the output to one JSON value this JSON Schema accepts: the schema text, or
    /// `@FILE` to read it from a file.
    #[arg(long = "json-schema", short = 'j', value_name = "SCHEMA|@FILE")]
    pub json_schema: Option<String>,
    /// Constrain the output to a grammar read from FILE: GBNF (llama.cpp's format) or Lark
    /// (llguidance's dialect, a file starting `%llguidance` or defining `start:`).
    #[arg(
        long = "grammar",
        alias = "grammar-file",
        value_name = "FILE",
        conflicts_with = "json_schema"
    )]
    pub grammar: Option<PathBuf>,
    /// Constrain the output to match this regular expression.
    #[arg(long = "regex", value_name = "R", conflicts_with_all = ["json_schema", "grammar"])]
    pub regex: Option<String>,
}

fn read(path: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        context: format!("reading {}", path.display()),
        source,
    })
}

impl GrammarArgs {
    /// The grammar the flags name, checked (a schema keyword that cannot be honoured is an
    /// error naming it); `None` without any.
    pub fn spec(&self) -> Result<Option<GrammarSpec>> {
        let spec = if let Some(s) = &self.json_schema {
            let text = match s.strip_prefix('@') {
                Some(path) => read(std::path::Path::new(path))?,
                None => s.clone(),
            };
            let v = serde_json::from_str(&text)
                .map_err(|e| Error::Usage(format!("--json-schema is not JSON: {e}")))?;
            GrammarSpec::JsonSchema(v)
        } else if let Some(p) = &self.grammar {
            let lark = crate::grammar::gbnf::to_lark(&read(p)?)
                .map_err(|e| Error::Usage(format!("--grammar {}: {e}", p.display())))?;
            GrammarSpec::Lark(lark)
        } else if let Some(r) = &self.regex {
            GrammarSpec::Regex(r.clone())
        } else {
            return Ok(None);
        };
        crate::grammar::compile(&spec)?;
        Ok(Some(spec))
    }
}

/// The model's grammar compiler when a grammar is given.
pub fn grammars(
    tok: &crate::tokenizer::Tokenizer,
    n_vocab: u32,
    spec: &Option<GrammarSpec>,
) -> Result<Option<Grammars>> {
    match spec {
        Some(_) => Ok(Some(Grammars::new(tok, n_vocab)?)),
        None => Ok(None),
    }
}

/// A fresh matcher for `spec` (one per reply).
pub fn guide(g: &Option<Grammars>, spec: &Option<GrammarSpec>) -> Result<Option<Guide>> {
    Ok(match (g, spec) {
        (Some(g), Some(s)) => Some(Guide::new(Box::new(g.compile(s)?))),
        _ => None,
    })
}
