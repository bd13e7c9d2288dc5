//! Chat templates: the model's `tokenizer.chat_template` (or an override file) rendered with
//! minijinja the way Hugging Face's `apply_chat_template` renders it with Jinja2 —
//! `trim_blocks` and `lstrip_blocks` on, the trailing newline of the template dropped,
//! `messages`, `add_generation_prompt`, `bos_token` and `eos_token` in the context, plus
//! `raise_exception`, `strftime_now`, a Python-compatible `tojson` and the common Python
//! `str`/`dict` methods (see `pycompat`).
//!
//! A template made by [`Tokenizer::chat_template`](super::Tokenizer::chat_template) for a model
//! that adds BOS (EOS) itself drops one leading `bos_token` (trailing `eos_token`) text from the
//! rendering, as llama.cpp's `common_chat_templates_apply` does, so that a template that writes
//! `{{ bos_token }}` (Gemma, Llama 3) does not give two BOS tokens.

use std::collections::BTreeMap;
use std::path::Path;

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, Value};

use super::error::TokenizerError;
use super::pycompat;

const NAME: &str = "chat_template";

/// One chat message. Besides role and content, the parts of OpenAI's messages that agent loops
/// send back (an assistant's `tool_calls` and `reasoning_content`, a tool result's
/// `tool_call_id` and `name`) are handed to the template under the same names when present.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// An assistant's calls: `[{"id", "type": "function", "function": {"name", "arguments"}}]`,
    /// `arguments` an object (templates iterate it) where the request's string parsed as one.
    pub tool_calls: Option<serde_json::Value>,
    /// A `tool` message's call id.
    pub tool_call_id: Option<String>,
    /// A `tool` message's function name.
    pub name: Option<String>,
    /// An assistant's reasoning (thinking templates render it back inside `<think>`).
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            ..ChatMessage::default()
        }
    }

    fn to_value(&self) -> Value {
        let mut m = BTreeMap::new();
        m.insert("role", Value::from(self.role.as_str()));
        m.insert("content", Value::from(self.content.as_str()));
        if let Some(calls) = &self.tool_calls {
            m.insert("tool_calls", Value::from(minijinja::value::Serde(calls)));
        }
        for (k, v) in [
            ("tool_call_id", &self.tool_call_id),
            ("name", &self.name),
            ("reasoning_content", &self.reasoning_content),
        ] {
            if let Some(v) = v {
                m.insert(k, Value::from(v.as_str()));
            }
        }
        Value::from(m)
    }
}

/// A compiled chat template with the BOS/EOS texts it may reference.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    /// Drop a leading `bos_token` / trailing `eos_token` text from the rendering (the
    /// tokenizer adds the token itself).
    strip_bos: bool,
    strip_eos: bool,
    source: String,
}

/// Read a template file (`--chat-template-file`).
pub fn read_template_file(path: &Path) -> Result<String, TokenizerError> {
    std::fs::read_to_string(path).map_err(|source| TokenizerError::ChatTemplateFile {
        path: path.display().to_string(),
        source,
    })
}

/// Instructions one rendering may run (minijinja's fuel): past them it fails with an error.
pub const RENDER_FUEL: u64 = 20_000_000;

impl ChatTemplate {
    /// Compile `source`; syntax errors are reported here, with the line.
    pub fn new(
        source: &str,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, TokenizerError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()?;
        env.set_syntax(syntax);
        // A template's loops are bounded: one render runs at most this many instructions
        // (a long chat takes a few hundred per message).
        env.set_fuel(Some(RENDER_FUEL));
        env.set_unknown_method_callback(pycompat::unknown_method);
        env.add_function("raise_exception", pycompat::raise_exception);
        env.add_function("strftime_now", pycompat::strftime_now);
        env.add_filter("tojson", pycompat::tojson);
        env.add_template_owned(NAME, source.to_string())?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            strip_bos: false,
            strip_eos: false,
            source: source.to_string(),
        })
    }

    /// Drop a leading `bos_token` text from renderings when `add_bos` and a trailing
    /// `eos_token` text when `add_eos` (llama.cpp's `common_chat_templates_apply`: the
    /// tokenizer adds those tokens itself). Empty texts are never stripped.
    pub fn strip_added_special(mut self, add_bos: bool, add_eos: bool) -> ChatTemplate {
        self.strip_bos = add_bos && !self.bos_token.is_empty();
        self.strip_eos = add_eos && !self.eos_token.is_empty();
        self
    }

    /// Compile the template in the file at `path`.
    pub fn from_file(
        path: &Path,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, TokenizerError> {
        ChatTemplate::new(&read_template_file(path)?, bos_token, eos_token)
    }

    /// The template's source text (tool-call formats are detected from it).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Render `messages`; with `add_generation_prompt` the template opens the assistant turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        self.render_with(messages, add_generation_prompt, &[])
    }

    /// Render with extra context variables (`tools`, `date_string`, …), which may override
    /// the defaults.
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &[(&str, Value)],
    ) -> Result<String, TokenizerError> {
        let mut ctx: BTreeMap<&str, Value> = BTreeMap::new();
        ctx.insert(
            "messages",
            messages.iter().map(ChatMessage::to_value).collect(),
        );
        ctx.insert("add_generation_prompt", Value::from(add_generation_prompt));
        ctx.insert("bos_token", Value::from(self.bos_token.as_str()));
        ctx.insert("eos_token", Value::from(self.eos_token.as_str()));
        for (k, v) in extra {
            ctx.insert(k, v.clone());
        }
        let tmpl = self.env.get_template(NAME)?;
        let mut text = tmpl.render(Value::from(ctx))?;
        if self.strip_bos && text.starts_with(&self.bos_token) {
            text.drain(..self.bos_token.len());
        }
        if self.strip_eos && text.ends_with(&self.eos_token) {
            text.truncate(text.len() - self.eos_token.len());
        }
        Ok(text)
    }
}
