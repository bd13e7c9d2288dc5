//! Structured output of a request: `response_format` (`text`, `json_object`, `json_schema`),
//! llama-server's `json_schema` and `grammar` (GBNF, converted by [`crate::grammar::gbnf`], or
//! Lark), vLLM's `guided_json` / `guided_regex` / `guided_grammar` / `guided_choice`, and the tools (see [`super::tools`]) become one
//! [`GrammarSpec`] for the engine, and a [`Reader`] that turns the generated text back into
//! the answer. Every grammar is compiled once, for the model, on the blocking thread that
//! prepares the request ([`super::state::Ready::compile`]) and handed on to the worker, so a
//! schema llguidance cannot honour is a 400 naming what it refused (fail closed: never an
//! unconstrained answer in its place).
//!
//! Sources: <https://platform.openai.com/docs/api-reference/chat/create> (`response_format`),
//! llama.cpp's `tools/server/README.md` (`json_schema`, `grammar`, `chat_template_kwargs`).
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::request::Endpoint;
use super::tools::grammar::{self, Think};
use super::tools::parse::Reader;
use super::tools::{self, Choice, Format, ToolSetup};
use crate::grammar::GrammarSpec;

/// What a request asks its output to be, before the template is known.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Structured {
    /// A JSON schema for the whole answer (`{"type": "object"}` for `json_object`).
    pub json: Option<Value>,
    /// A Lark grammar (`grammar` in llguidance's dialect, or GBNF converted to it).
    pub lark: Option<String>,
    /// A regular expression for the whole answer (`guided_regex`, `guided_choice`).
    pub regex: Option<String>,
    pub tools: Option<ToolSetup>,
    /// `chat_template_kwargs`: extra variables of the chat template.
    pub template_kwargs: Map<String, Value>,
    /// The field the constraint came from (what a compile error names).
    pub field: &'static str,
    /// `max_reasoning_chars` (flint's): the reasoning of an open `<think>` is cut to this many
    /// characters by the grammar, which then asks for `</think>`.
    pub max_reasoning: Option<u64>,
    /// `reasoning_format: "none"`: reasoning stays in `content` as generated (llama-server's
    /// `none`); otherwise it is split out as `reasoning_content` (`auto`, `deepseek`).
    pub reasoning_none: bool,
}

type Obj = Map<String, Value>;

/// Reads the structured-output fields of a request body.
pub fn parse(endpoint: Endpoint, o: &Obj) -> Result<Structured, ApiError> {
    let mut s = Structured::default();
    let mut asked: Vec<&'static str> = Vec::new();
    if let Some(schema) = response_format(o.get("response_format"))? {
        s.json = Some(schema);
        asked.push("response_format");
    }
    match o.get("json_schema") {
        None | Some(Value::Null) => {}
        Some(v @ (Value::Object(_) | Value::Bool(true))) => {
            s.json = Some(v.clone());
            asked.push("json_schema");
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "json_schema",
                "`json_schema` must be a JSON schema object",
            ))
        }
    }
    let key = "guided_json";
    match o.get(key) {
        None | Some(Value::Null) => {}
        Some(v @ (Value::Object(_) | Value::Bool(true))) => {
            s.json = Some(v.clone());
            asked.push(key);
        }
        // vLLM takes the schema as JSON text too.
        Some(Value::String(t)) => {
            let v: Value = serde_json::from_str(t)
                .map_err(|e| ApiError::invalid(key, format!("`guided_json` is not JSON: {e}")))?;
            s.json = Some(v);
            asked.push(key);
        }
        Some(_) => {
            return Err(ApiError::invalid(
                key,
                format!("`{key}` must be a JSON schema object"),
            ))
        }
    }
    for key in ["grammar", "guided_grammar"] {
        match o.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(g)) if g.trim().is_empty() => {}
            Some(Value::String(g)) => {
                let lark = crate::grammar::gbnf::to_lark(g).map_err(|e| {
                    ApiError::invalid(key, format!("`{key}` cannot be converted: {e}"))
                })?;
                s.lark = Some(lark);
                asked.push(key);
            }
            Some(_) => return Err(ApiError::invalid(key, format!("`{key}` must be a string"))),
        }
    }
    match o.get("guided_regex") {
        None | Some(Value::Null) => {}
        Some(Value::String(r)) => {
            s.regex = Some(r.clone());
            asked.push("guided_regex");
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "guided_regex",
                "`guided_regex` must be a string",
            ))
        }
    }
    match o.get("guided_choice") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_string) => {
            let alts: Vec<String> = a
                .iter()
                .filter_map(Value::as_str)
                .map(regex_literal)
                .collect();
            s.regex = Some(format!("(?:{})", alts.join("|")));
            asked.push("guided_choice");
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "guided_choice",
                "`guided_choice` must be a non-empty array of strings",
            ))
        }
    }
    if asked.len() > 1 {
        return Err(ApiError::invalid(
            asked[1],
            format!(
                "`{}` and `{}` both constrain the output: send one",
                asked[0], asked[1]
            ),
        ));
    }
    s.field = asked.first().copied().unwrap_or("tools");
    if endpoint == Endpoint::Chat {
        s.tools = tools::parse(o)?;
        if let (Some(t), Some(f)) = (&s.tools, asked.first()) {
            if t.choice != Choice::None {
                return Err(ApiError::invalid(
                    f,
                    format!(
                        "`{f}` with `tools` is not supported: a tool call and a constrained \
                         answer are two grammars (set `tool_choice` to \"none\")"
                    ),
                ));
            }
        }
        s.template_kwargs = match o.get("chat_template_kwargs") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => {
                const OWN: [&str; 5] = [
                    "messages",
                    "tools",
                    "add_generation_prompt",
                    "bos_token",
                    "eos_token",
                ];
                if let Some(k) = m.keys().find(|k| OWN.contains(&k.as_str())) {
                    return Err(ApiError::invalid(
                        "chat_template_kwargs",
                        format!("`chat_template_kwargs` cannot set `{k}`: the request sets it"),
                    ));
                }
                m.clone()
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    "chat_template_kwargs",
                    "`chat_template_kwargs` must be an object",
                ))
            }
        };
    }
    s.max_reasoning =
        match o.get("max_reasoning_chars") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|n| (1..=1 << 20).contains(n))
                    .ok_or_else(|| {
                        ApiError::invalid(
                "max_reasoning_chars",
                format!("`max_reasoning_chars` is {v}: it must be an integer in [1, 1048576]"),
            )
                    })?,
            ),
        };
    // The constraint is compiled once, for the model, when the request is prepared.
    Ok(s)
}

/// llama-server's reasoning formats: `Some(true)` for `none` (reasoning left in the content),
/// `Some(false)` for `auto`, `deepseek` and `deepseek-legacy` (split out), `None` otherwise.
pub fn reasoning_none(format: &str) -> Option<bool> {
    match format {
        "none" => Some(true),
        "auto" | "deepseek" | "deepseek-legacy" => Some(false),
        _ => None,
    }
}

/// `text` as a regex matching itself (ASCII punctuation escaped).
fn regex_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_punctuation() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `response_format`: `None` for text, the schema otherwise.
fn response_format(v: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let f = "response_format";
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let o = v
        .as_object()
        .ok_or_else(|| ApiError::invalid(f, "`response_format` must be an object"))?;
    match o.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "object"}))),
        Some("json_schema") => {
            let js = o
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ApiError::invalid(f, "`response_format.json_schema` must be an object")
                })?;
            let name = js.get("name").and_then(Value::as_str).unwrap_or_default();
            let ok = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                return Err(ApiError::invalid(
                    f,
                    format!(
                        "`response_format.json_schema.name` is {name:?}: it must be 1 to 64 of \
                         a-z, A-Z, 0-9, _ and -"
                    ),
                ));
            }
            match js.get("strict") {
                None | Some(Value::Null) | Some(Value::Bool(_)) => {}
                Some(_) => {
                    return Err(ApiError::invalid(
                        f,
                        "`response_format.json_schema.strict` must be a boolean",
                    ))
                }
            }
            match js.get("schema") {
                None | Some(Value::Null) => Ok(Some(json!({}))),
                Some(s @ Value::Object(_)) => Ok(Some(s.clone())),
                Some(_) => Err(ApiError::invalid(
                    f,
                    "`response_format.json_schema.schema` must be an object",
                )),
            }
        }
        Some(t) => Err(ApiError::invalid(
            f,
            format!("`response_format.type` is {t:?}: it must be text, json_object or json_schema"),
        )),
        None => Err(ApiError::invalid(f, "`response_format.type` is required")),
    }
}

/// Compiles `spec` with no model loaded; a refusal is a 400 on `field` quoting llguidance's
/// reason (which names the keyword or rule it cannot honour). (The server compiles for the
/// model instead, [`super::state::Ready::compile`], with the same answer.)
#[cfg(test)]
pub fn check(spec: &GrammarSpec, field: &str) -> Result<(), ApiError> {
    crate::grammar::compile(spec).map(|_| ()).map_err(|e| {
        ApiError::invalid(
            field,
            format!("`{field}` cannot be compiled into a constraint: {e}"),
        )
    })
}

/// Whether a rendered prompt leaves the model inside `<think>` (the template opened it).
pub fn thinking_open(prompt: &str) -> bool {
    prompt.trim_end().ends_with("<think>")
}

/// The grammar and the reader of a request whose prompt is `prompt` (the rendered chat, or
/// the completion prompt), on a model whose chat template is `template` (its source).
pub fn plan(
    s: &Structured,
    template: Option<&str>,
    prompt: &str,
    chat: bool,
) -> Result<(Option<GrammarSpec>, Reader), ApiError> {
    let open = chat && thinking_open(prompt);
    let think = Think {
        open,
        budget: s.max_reasoning,
    };
    let format = Format::detect(template.unwrap_or(""));
    // `tool_choice: "none"` answers in text: nothing is read as a call.
    let reader = Reader {
        tools: s
            .tools
            .clone()
            .filter(|t| t.choice != Choice::None)
            .map(|t| (format, t)),
        thinking_open: open && !s.reasoning_none,
        think_tags: chat && !s.reasoning_none,
    };
    let spec = if let Some(t) = &s.tools {
        grammar::tools(t, format, think).map(GrammarSpec::Lark)
    } else if let Some(schema) = &s.json {
        Some(if open {
            GrammarSpec::Lark(grammar::json_answer(schema, think))
        } else {
            GrammarSpec::JsonSchema(grammar::bounded_json(schema))
        })
    } else if s.lark.is_some() {
        s.lark.clone().map(GrammarSpec::Lark)
    } else if s.regex.is_some() {
        s.regex.clone().map(GrammarSpec::Regex)
    } else if open && s.max_reasoning.is_some() {
        Some(GrammarSpec::Lark(grammar::free_answer(think)))
    } else {
        None
    };
    Ok((spec, reader))
}

#[cfg(test)]
#[path = "structured_tests.rs"]
pub(crate) mod tests;
