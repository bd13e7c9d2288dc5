//! Tool calls (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`): the request's tools,
//! which of them the model may or must call, and the model's tool-call format, detected from
//! its chat template. [`grammar`] turns a choice into a Lark grammar over that format,
//! [`parse`] reads the generated text back into content, reasoning and calls, and [`delta`]
//! streams that reading as OpenAI's chunks without ever retracting one.
//!
//! Shapes: <https://platform.openai.com/docs/api-reference/chat/create> (`tools`,
//! `tool_choice`, `parallel_tool_calls`).

pub mod delta;
pub mod grammar;
pub mod parse;

use serde_json::{Map, Value};

use super::error::ApiError;

/// One function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    /// The JSON schema of the arguments (`{"type": "object"}` when the request gives none).
    pub parameters: Value,
    /// The request's `{"type": "function", "function": {…}}`, as the template receives it.
    pub raw: Value,
}

impl Tool {
    /// Whether parameter `p` is a string (`"type": "string"`, or an `enum` of strings): the
    /// Qwen XML format writes such values raw, every other value as JSON.
    pub fn is_string(&self, p: &str) -> bool {
        let Some(s) = self.parameters.get("properties").and_then(|ps| ps.get(p)) else {
            return false;
        };
        s.get("type").and_then(Value::as_str) == Some("string")
            || s.get("enum")
                .and_then(Value::as_array)
                .is_some_and(|e| !e.is_empty() && e.iter().all(Value::is_string))
    }

    /// The declared parameters (name, schema), in the schema's order.
    pub fn params(&self) -> Vec<(&str, &Value)> {
        self.parameters
            .get("properties")
            .and_then(Value::as_object)
            .map(|o| o.iter().map(|(k, v)| (k.as_str(), v)).collect())
            .unwrap_or_default()
    }

    /// The names in `required` that are declared properties.
    pub fn required(&self) -> Vec<&str> {
        self.parameters
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }
}

/// What the model may do with the tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Answer in text only (the tools are still shown to the template).
    None,
    /// Text, or calls: text runs free until a call starts; the call is constrained.
    Auto,
    /// At least one call, nothing else.
    Required,
}

/// The tools of a request and what it asks of them.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSetup {
    /// Every tool of the request (the template lists them all).
    pub tools: Vec<Tool>,
    /// The names the model may call (`tool_choice` named or `allowed_tools` narrow it).
    pub allowed: Vec<String>,
    pub choice: Choice,
    /// `parallel_tool_calls` (default false, as llama-server's: a small model otherwise
    /// repeats calls; OpenAI's default is true). Never with a named `tool_choice`.
    pub parallel: bool,
}

impl ToolSetup {
    /// The callable tools, in the request's order.
    pub fn callable(&self) -> Vec<&Tool> {
        self.tools
            .iter()
            .filter(|t| self.allowed.iter().any(|a| a == &t.name))
            .collect()
    }

    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }
}

/// Calls in one answer at most when `parallel_tool_calls` is true (the grammar's bound: a
/// model cannot repeat calls until `max_tokens`).
pub const MAX_PARALLEL_CALLS: usize = 8;

/// The tool-call formats flint writes and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Qwen3-Coder / Qwen3.5: `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n
    /// </function>\n</tool_call>`.
    QwenXml,
    /// Hermes 2 Pro / Qwen3: `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`.
    Hermes,
    /// Llama 3.1+: a bare `{"name": …, "parameters": {…}}` object.
    Llama3,
    /// Templates that know no tools: the tools described in a system turn and the answer a
    /// JSON envelope, `{"tool_calls": [{"name": …, "arguments": {…}}]}` or `{"response": …}`.
    Generic,
}

impl Format {
    /// The format a template's source speaks (the markers llama.cpp's `common/chat.cpp` keys
    /// on: <https://github.com/ggml-org/llama.cpp/blob/master/common/chat.cpp>).
    pub fn detect(source: &str) -> Format {
        if source.contains("<tool_call>")
            && source.contains("<function=")
            && source.contains("<parameter=")
        {
            Format::QwenXml
        } else if source.contains("<tool_call>") {
            Format::Hermes
        } else if source.contains("<|start_header_id|>") && source.contains("tools") {
            Format::Llama3
        } else {
            Format::Generic
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::QwenXml => "qwen-xml",
            Format::Hermes => "hermes",
            Format::Llama3 => "llama3",
            Format::Generic => "generic",
        }
    }
}

type Obj = Map<String, Value>;

fn tool_name(v: &Value) -> Option<&str> {
    v.get("function")?.get("name")?.as_str()
}

/// One entry of `tools`.
fn tool(v: &Value, i: usize) -> Result<Tool, ApiError> {
    let field = format!("tools[{i}]");
    let bad = |why: &str| ApiError::invalid(&field, format!("`{field}` {why}"));
    match v.get("type").and_then(Value::as_str) {
        Some("function") => {}
        Some(t) => {
            return Err(bad(&format!(
                "has type {t:?}: only \"function\" tools are supported"
            )))
        }
        None => return Err(bad("needs `\"type\": \"function\"`")),
    }
    let f = v
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("needs a `function` object"))?;
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("needs `function.name`, a string"))?;
    let ok_name = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if !ok_name {
        return Err(bad(&format!(
            "is named {name:?}: a function name is 1 to 64 of a-z, A-Z, 0-9, _, - and ."
        )));
    }
    let parameters = match f.get("parameters") {
        None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return Err(bad("has `function.parameters` that is not an object")),
    };
    Ok(Tool {
        name: name.to_string(),
        parameters,
        raw: v.clone(),
    })
}

/// The tools of a chat request; `None` when it has none (or `tool_choice` is `none` with no
/// tools).
pub fn parse(o: &Obj) -> Result<Option<ToolSetup>, ApiError> {
    let tools: Vec<Tool> = match o.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| tool(v, i))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::invalid("tools", "`tools` must be an array")),
    };
    for (i, t) in tools.iter().enumerate() {
        if tools[..i].iter().any(|u| u.name == t.name) {
            return Err(ApiError::invalid(
                "tools",
                format!("two tools are named {:?}", t.name),
            ));
        }
    }
    let known = |name: &str, field: &str| -> Result<String, ApiError> {
        if tools.iter().any(|t| t.name == name) {
            Ok(name.to_string())
        } else {
            Err(ApiError::invalid(
                field,
                format!("`{field}` names {name:?}, which is not in `tools`"),
            ))
        }
    };
    let all: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
    let named = o
        .get("tool_choice")
        .is_some_and(|c| c.get("type").and_then(Value::as_str) == Some("function"));
    let (choice, allowed) = match o.get("tool_choice") {
        None | Some(Value::Null) => (Choice::Auto, all),
        Some(Value::String(s)) => match s.as_str() {
            "none" => (Choice::None, all),
            "auto" => (Choice::Auto, all),
            "required" => (Choice::Required, all),
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!(
                        "`tool_choice` is {other:?}: it must be \"none\", \"auto\", \
                         \"required\" or an object"
                    ),
                ))
            }
        },
        Some(v @ Value::Object(c)) => match c.get("type").and_then(Value::as_str) {
            Some("function") => {
                let name = tool_name(v).ok_or_else(|| {
                    ApiError::invalid("tool_choice", "`tool_choice.function.name` is required")
                })?;
                (Choice::Required, vec![known(name, "tool_choice")?])
            }
            Some("allowed_tools") => {
                let a = c.get("allowed_tools").and_then(Value::as_object);
                let mode = a.and_then(|a| a.get("mode")).and_then(Value::as_str);
                let choice = match mode {
                    Some("auto") => Choice::Auto,
                    Some("required") => Choice::Required,
                    _ => {
                        return Err(ApiError::invalid(
                            "tool_choice",
                            "`tool_choice.allowed_tools.mode` must be \"auto\" or \"required\"",
                        ))
                    }
                };
                let list = a
                    .and_then(|a| a.get("tools"))
                    .and_then(Value::as_array)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "tool_choice",
                            "`tool_choice.allowed_tools.tools` must be an array",
                        )
                    })?;
                let names = list
                    .iter()
                    .map(|t| {
                        tool_name(t)
                            .ok_or_else(|| {
                                ApiError::invalid(
                                    "tool_choice",
                                    "each allowed tool is {\"type\": \"function\", \
                                     \"function\": {\"name\": …}}",
                                )
                            })
                            .and_then(|n| known(n, "tool_choice"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                (choice, names)
            }
            _ => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    "`tool_choice` objects have type \"function\" or \"allowed_tools\"",
                ))
            }
        },
        Some(_) => {
            return Err(ApiError::invalid(
                "tool_choice",
                "`tool_choice` must be a string or an object",
            ))
        }
    };
    let parallel = match o.get("parallel_tool_calls") {
        None | Some(Value::Null) => false,
        // A named function is called exactly once.
        Some(Value::Bool(b)) => *b && !named,
        Some(_) => {
            return Err(ApiError::invalid(
                "parallel_tool_calls",
                "`parallel_tool_calls` must be a boolean",
            ))
        }
    };
    if tools.is_empty() {
        if choice != Choice::None && o.get("tool_choice").is_some_and(|v| !v.is_null()) {
            if choice == Choice::Auto {
                return Ok(None);
            }
            return Err(ApiError::invalid(
                "tool_choice",
                "`tool_choice` asks for a call but `tools` is empty",
            ));
        }
        return Ok(None);
    }
    if choice != Choice::None && allowed.is_empty() {
        return Err(ApiError::invalid(
            "tool_choice",
            "`tool_choice` allows no tool",
        ));
    }
    Ok(Some(ToolSetup {
        tools,
        allowed,
        choice,
        parallel,
    }))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_end;
#[cfg(test)]
mod tests_loop;
#[cfg(test)]
mod tests_stream;
