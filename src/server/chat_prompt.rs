//! A request's prompt ids together with its constraint: the chat is rendered with the
//! request's tools and `chat_template_kwargs` as template variables, then the grammar and the
//! output reader are planned on the rendered text (a prompt that leaves `<think>` open keeps
//! the reasoning free). Templates that know no tools (the [`Format::Generic`] format) get the
//! tools described in a system turn, and earlier calls written back as the JSON envelope.

use minijinja::Value as JValue;
use serde_json::{json, Value};

use super::error::ApiError;
use super::http::tokens;
use super::request::Prompt;
use super::state::Ready;
use super::structured::{plan, Structured};
use super::tools::parse::Reader;
use super::tools::{grammar, Choice, Format};
use crate::grammar::steps::Guide;
use crate::grammar::GrammarSpec;
use crate::tokenizer::ChatMessage;

/// What a request runs with.
#[derive(Debug)]
pub struct Prepared {
    pub ids: Vec<u32>,
    pub grammar: Option<GrammarSpec>,
    /// The grammar compiled for the model (the request's one compile).
    pub guide: Option<Guide>,
    /// How to read the output back (chat only).
    pub reader: Option<Reader>,
}

/// The system text that teaches the generic envelope to a template that knows no tools.
fn generic_system(s: &Structured) -> Option<String> {
    let t = s.tools.as_ref().filter(|t| t.choice != Choice::None)?;
    let callable = t.callable();
    let listed: Vec<String> = callable
        .iter()
        .map(|t| t.raw["function"].to_string())
        .collect();
    let envelope = grammar::generic_envelope(&callable, t.choice == Choice::Required, t.parallel);
    Some(format!(
        "You can call these tools:\n{}\n\nAnswer with one JSON object that matches this \
         schema: {{\"tool_calls\": [{{\"name\": …, \"arguments\": {{…}}}}]}} to call tools, or \
         {{\"response\": \"…\"}} to answer in text.\nSchema: {envelope}",
        listed.join("\n")
    ))
}

/// `messages` for a template that knows no tools: the tool description joined to the system
/// turn (or a new one first), and an assistant's calls written as the envelope it answered.
fn generic_messages(messages: &[ChatMessage], s: &Structured) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = messages
        .iter()
        .map(|m| match &m.tool_calls {
            Some(Value::Array(calls)) if m.role == "assistant" => {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|c| {
                        json!({"name": c["function"]["name"],
                                    "arguments": c["function"]["arguments"]})
                    })
                    .collect();
                ChatMessage::new("assistant", json!({ "tool_calls": calls }).to_string())
            }
            _ => m.clone(),
        })
        .collect();
    if let Some(sys) = generic_system(s) {
        match out.first_mut() {
            Some(first) if first.role == "system" => {
                first.content = format!("{}\n\n{sys}", first.content);
            }
            _ => out.insert(0, ChatMessage::new("system", sys)),
        }
    }
    out
}

/// Tokenize the prompt and plan the constraint.
pub fn prepare(
    ready: &Ready,
    prompt: &Prompt,
    parse_special: bool,
    s: &Structured,
) -> Result<Prepared, ApiError> {
    let Prompt::Chat(messages) = prompt else {
        let ids = tokens(ready, prompt, parse_special)?;
        let (grammar, _) = plan(s, None, "", false)?;
        return Ok(Prepared {
            ids,
            guide: compile(ready, s, grammar.as_ref())?,
            grammar,
            reader: None,
        });
    };
    let template = ready.template.as_ref().ok_or_else(|| {
        ApiError::invalid(
            "messages",
            "the model has no chat template: use /v1/completions",
        )
    })?;
    let source = template.source();
    let format = Format::detect(source);
    let generic;
    let messages = if format == Format::Generic && s.tools.is_some() {
        generic = generic_messages(messages, s);
        &generic
    } else {
        messages
    };
    let mut extra: Vec<(&str, JValue)> = s
        .template_kwargs
        .iter()
        .map(|(k, v)| (k.as_str(), JValue::from(minijinja::value::Serde(v))))
        .collect();
    if let Some(t) = &s.tools {
        let raw: Vec<&Value> = t.tools.iter().map(|t| &t.raw).collect();
        extra.push(("tools", JValue::from(minijinja::value::Serde(&raw))));
    }
    let chat = ready
        .tok
        .render_chat_with(template, messages, true, &extra)
        .map_err(|e| ApiError::invalid("messages", format!("chat template: {e}")))?;
    let ids = ready
        .tok
        .encode_rendered(&chat)
        .map_err(|e| ApiError::invalid("messages", format!("cannot tokenize the messages: {e}")))?;
    let (grammar, reader) = plan(s, Some(source), chat.text(), true)?;
    let reader =
        (reader.tools.is_some() || reader.thinking_open || reader.think_tags).then_some(reader);
    Ok(Prepared {
        ids,
        guide: compile(ready, s, grammar.as_ref())?,
        grammar,
        reader,
    })
}

/// The request's grammar compiled for the model (none without one).
fn compile(
    ready: &Ready,
    s: &Structured,
    spec: Option<&GrammarSpec>,
) -> Result<Option<Guide>, ApiError> {
    spec.map(|spec| ready.compile(spec, s.field)).transpose()
}
