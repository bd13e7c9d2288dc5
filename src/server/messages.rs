//! The `messages` of a chat request: roles, content (a string, null or text parts), and what
//! agent loops send back — an assistant's `tool_calls` and `reasoning_content`, a tool
//! result's `tool_call_id` and `name` — as [`ChatMessage`]s for the template.

use serde_json::{Map, Value};

use super::error::ApiError;
use crate::tokenizer::ChatMessage;

type Obj = Map<String, Value>;

/// Messages a request may hold (each is a turn the template renders).
pub const MAX_MESSAGES: usize = 4096;

/// `messages` of a chat request (also `/apply-template`'s).
pub fn messages(o: &Obj) -> Result<Vec<ChatMessage>, ApiError> {
    let list = match o.get("messages") {
        Some(Value::Array(a)) if a.len() > MAX_MESSAGES => {
            return Err(ApiError::invalid(
                "messages",
                format!(
                    "`messages` holds {} messages; at most {MAX_MESSAGES}",
                    a.len()
                ),
            ))
        }
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(ApiError::invalid("messages", "`messages` is empty")),
        Some(_) => return Err(ApiError::invalid("messages", "`messages` must be an array")),
        None => return Err(ApiError::invalid("messages", "`messages` is required")),
    };
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let field = format!("messages[{i}]");
            let m = m
                .as_object()
                .ok_or_else(|| ApiError::invalid(&field, format!("`{field}` must be an object")))?;
            let role = match m.get("role").and_then(Value::as_str) {
                Some(r @ ("system" | "developer" | "user" | "assistant" | "tool")) => {
                    if r == "developer" {
                        "system"
                    } else {
                        r
                    }
                }
                Some(r) => {
                    return Err(ApiError::invalid(
                        &format!("{field}.role"),
                        format!(
                            "role {r:?} is not one of system, developer, user, assistant, tool"
                        ),
                    ))
                }
                None => {
                    return Err(ApiError::invalid(
                        &format!("{field}.role"),
                        "`role` must be a string",
                    ))
                }
            };
            // A user or system turn with nothing in it (OpenAI and llama-server answer 400);
            // an assistant's may be empty beside its `tool_calls`, a tool's result too.
            if matches!(role, "user" | "system")
                && matches!(m.get("content"), None | Some(Value::Null))
            {
                return Err(ApiError::invalid(
                    &format!("{field}.content"),
                    format!("`{field}` ({role}) has no `content`"),
                ));
            }
            let mut msg = ChatMessage::new(role, content(m.get("content"), &field)?);
            let text = |k: &str| -> Result<Option<String>, ApiError> {
                match m.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(ApiError::invalid(
                        &format!("{field}.{k}"),
                        format!("`{k}` must be a string"),
                    )),
                }
            };
            msg.tool_call_id = text("tool_call_id")?;
            msg.name = text("name")?;
            msg.reasoning_content = text("reasoning_content")?;
            msg.tool_calls = tool_calls(m.get("tool_calls"), &field)?;
            Ok(msg)
        })
        .collect()
}

/// An assistant message's `tool_calls`, each `function.arguments` turned from its JSON text
/// into the object it holds (templates iterate the arguments; llama.cpp does the same).
fn tool_calls(v: Option<&Value>, field: &str) -> Result<Option<Value>, ApiError> {
    let field = format!("{field}.tool_calls");
    let list = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) if a.is_empty() => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ApiError::invalid(&field, "`tool_calls` must be an array")),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, c) in list.iter().enumerate() {
        let bad = || {
            ApiError::invalid(
                &format!("{field}[{i}]"),
                "a tool call is {\"id\", \"type\": \"function\", \"function\": {\"name\", \
                 \"arguments\"}}",
            )
        };
        let f = c
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(bad)?;
        let name = f.get("name").and_then(Value::as_str).ok_or_else(bad)?;
        let args = match f.get("arguments") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => v,
                _ => Value::String(s.clone()),
            },
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => return Err(bad()),
        };
        let mut call = serde_json::json!({"type": "function",
            "function": {"name": name, "arguments": args}});
        if let Some(id) = c.get("id").filter(|v| v.is_string()) {
            call["id"] = id.clone();
        }
        out.push(call);
    }
    Ok(Some(Value::Array(out)))
}

/// A message's content: a string, null, or text parts.
fn content(v: Option<&Value>, field: &str) -> Result<String, ApiError> {
    let field = format!("{field}.content");
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| {
                match (
                    p.get("type").and_then(Value::as_str),
                    p.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => Ok(t),
                    _ => Err(ApiError::invalid(
                        &field,
                        "only text content parts are supported",
                    )),
                }
            })
            .collect::<Result<Vec<&str>, _>>()
            .map(|t| t.concat()),
        Some(_) => Err(ApiError::invalid(
            &field,
            "`content` must be a string or an array of parts",
        )),
    }
}
