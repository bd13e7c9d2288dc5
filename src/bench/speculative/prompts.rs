//! Prompts of the speculative benchmark: the builtin set (two short prompts in each of the
//! categories chat, code, math and prose, written for flint) and the JSONL reader for
//! `--spec-prompts FILE` (one `{"category": "…", "prompt": "…"}` object a line; blank lines are
//! skipped; a bad line is an error naming its number).

use std::path::Path;

use serde_json::Value;

use crate::{Error, Result};

/// One benchmark prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecPrompt {
    pub category: String,
    pub prompt: String,
}

impl SpecPrompt {
    pub fn new(category: &str, prompt: &str) -> SpecPrompt {
        SpecPrompt {
            category: category.to_string(),
            prompt: prompt.to_string(),
        }
    }
}

/// The categories of the builtin set, in its order.
pub const BUILTIN_CATEGORIES: [&str; 4] = ["chat", "code", "math", "prose"];

const BUILTIN: [(&str, &str); 8] = [
    (
        "chat",
        "What is a good way to start learning to play the guitar?",
    ),
    (
        "chat",
        "Suggest three names for a small grey cat and say why.",
    ),
    (
        "code",
        "Write a Python function that returns the n-th Fibonacci number.",
    ),
    (
        "code",
        "Write a Rust function that reverses the order of the words in a sentence.",
    ),
    (
        "math",
        "A train travels 60 km in 45 minutes. What is its average speed in km/h?",
    ),
    ("math", "Solve for x: 3x + 7 = 22. Show each step."),
    (
        "prose",
        "Write a short story about an old lighthouse keeper on his last night at work.",
    ),
    (
        "prose",
        "Describe a small mountain village on the first cold morning of autumn.",
    ),
];

/// The builtin prompts: two per category of [`BUILTIN_CATEGORIES`], in that order.
pub fn builtin() -> Vec<SpecPrompt> {
    BUILTIN.iter().map(|(c, p)| SpecPrompt::new(c, p)).collect()
}

/// What is wrong with a prompts file (line numbers count from 1).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PromptsError {
    #[error("{source_name} line {line}: not JSON: {message}")]
    Json {
        source_name: String,
        line: usize,
        message: String,
    },
    #[error("{source_name} line {line}: expected an object {{\"category\": …, \"prompt\": …}}")]
    NotObject { source_name: String, line: usize },
    #[error("{source_name} line {line}: \"{field}\" is missing or not a string")]
    Field {
        source_name: String,
        line: usize,
        field: &'static str,
    },
    #[error("{source_name} line {line}: \"{field}\" is empty")]
    Empty {
        source_name: String,
        line: usize,
        field: &'static str,
    },
    #[error("{source_name}: no prompts")]
    NoPrompts { source_name: String },
}

/// Parses JSONL prompts; `source_name` names the input in errors (a path).
pub fn parse_jsonl(text: &str, source_name: &str) -> Result<Vec<SpecPrompt>, PromptsError> {
    let name = || source_name.to_string();
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(raw).map_err(|e| PromptsError::Json {
            source_name: name(),
            line,
            message: e.to_string(),
        })?;
        let obj = v.as_object().ok_or_else(|| PromptsError::NotObject {
            source_name: name(),
            line,
        })?;
        let field = |field: &'static str| -> Result<&str, PromptsError> {
            let s = obj
                .get(field)
                .and_then(Value::as_str)
                .ok_or_else(|| PromptsError::Field {
                    source_name: name(),
                    line,
                    field,
                })?;
            if s.trim().is_empty() {
                return Err(PromptsError::Empty {
                    source_name: name(),
                    line,
                    field,
                });
            }
            Ok(s)
        };
        let category = field("category")?;
        let prompt = field("prompt")?;
        out.push(SpecPrompt::new(category, prompt));
    }
    if out.is_empty() {
        return Err(PromptsError::NoPrompts {
            source_name: name(),
        });
    }
    Ok(out)
}

/// `--spec-prompts`: `builtin` or the path of a JSONL file.
pub fn load(source: &str) -> Result<Vec<SpecPrompt>> {
    if source == "builtin" {
        return Ok(builtin());
    }
    let path = Path::new(source);
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        context: format!("reading --spec-prompts {}", path.display()),
        source: e,
    })?;
    Ok(parse_jsonl(&text, source)?)
}

/// The distinct categories in order of first appearance.
pub fn categories<'a>(cats: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in cats {
        if !out.iter().any(|o| o == c) {
            out.push(c.to_string());
        }
    }
    out
}

/// A prompt set that cannot be read is a bad input file (exit code 3); the crate's error names
/// no bench type.
impl From<PromptsError> for crate::Error {
    fn from(e: PromptsError) -> Self {
        crate::Error::BadInputFile(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_has_two_prompts_per_category() {
        let b = builtin();
        assert_eq!(
            categories(b.iter().map(|p| p.category.as_str())),
            BUILTIN_CATEGORIES
        );
        for c in BUILTIN_CATEGORIES {
            assert!(b.iter().filter(|p| p.category == c).count() >= 2, "{c}");
        }
    }

    #[test]
    fn jsonl_reads_and_skips_blank_lines() {
        let text = "{\"category\": \"qa\", \"prompt\": \"Why?\"}\n\n  \n\
                    {\"prompt\": \"How?\", \"category\": \"qa\", \"id\": 7}\n";
        let p = parse_jsonl(text, "p.jsonl").unwrap();
        assert_eq!(
            p,
            [SpecPrompt::new("qa", "Why?"), SpecPrompt::new("qa", "How?")]
        );
    }
}
