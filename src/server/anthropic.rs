//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages API over
//! flint's chat generation. A body is checked field by field, translated into the OpenAI chat
//! body it means (system prompt first, text blocks joined, `stop_sequences` → `stop`) and parsed
//! by the chat endpoint's own parser ([`request::parse`]), then generated through the same path
//! as `/v1/chat/completions` ([`super::http::submit_request`]); only the answer's shape differs: a
//! `message` object, or Anthropic's named SSE events ([`super::anthropic_stream`]). Errors take
//! Anthropic's shape `{"type": "error", "error": {"type", "message"}}`. Tool use, images,
//! documents and extended thinking are refused with a 400 naming them.
//! API reference: <https://docs.anthropic.com/en/api/messages>.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::http::{read_json, submit_request, tokens};
use super::request::{self, Endpoint};
use super::slots::{Event, Outcome};
use super::state::App;

type Obj = Map<String, Value>;

/// The request fields flint honours (`metadata` is accepted and unused).
const FIELDS: &[&str] = &[
    "model",
    "max_tokens",
    "system",
    "messages",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "stream",
    "metadata",
];

/// An [`ApiError`] answered in Anthropic's shape (same status; its `type` mapped to
/// Anthropic's error types).
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        AnthropicError(e)
    }
}

impl AnthropicError {
    /// The error object of a body or an `error` event.
    pub fn body(&self) -> Value {
        let e = &self.0;
        let kind = match (e.status, e.kind) {
            (StatusCode::UNAUTHORIZED, _) => "authentication_error",
            (StatusCode::NOT_FOUND, _) => "not_found_error",
            (StatusCode::PAYLOAD_TOO_LARGE, _) => "request_too_large",
            (StatusCode::TOO_MANY_REQUESTS, _) => "rate_limit_error",
            (StatusCode::SERVICE_UNAVAILABLE, _) => "overloaded_error",
            (s, _) if s.is_client_error() => "invalid_request_error",
            _ => "api_error",
        };
        json!({"type": "error", "error": {"type": kind, "message": e.message}})
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        (self.0.status, Json(self.body())).into_response()
    }
}

fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

/// Refuses a field or block flint does not serve, naming it and why.
fn unsupported(param: &str, what: &str) -> ApiError {
    let why = match what {
        "tools" | "tool_choice" | "tool_use" | "tool_result" | "server_tool_use" => {
            "tool use is not supported yet"
        }
        "image" | "document" | "search_result" => "only text content is supported",
        "thinking" | "redacted_thinking" => "extended thinking is not supported",
        _ => "not supported by flint's /v1/messages",
    };
    invalid(param, format!("`{what}` ({param}): {why}"))
}

/// The text of a `content` (a string or text blocks) at `field`.
fn text_of(v: &Value, field: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut out = String::new();
            for (i, b) in blocks.iter().enumerate() {
                let at = format!("{field}[{i}]");
                let ty = b.get("type").and_then(Value::as_str).ok_or_else(|| {
                    invalid(&at, format!("`{at}` must be a content block with a `type`"))
                })?;
                if ty != "text" {
                    return Err(unsupported(&format!("{at}.type"), ty));
                }
                let t = b.get("text").and_then(Value::as_str).ok_or_else(|| {
                    invalid(&format!("{at}.text"), "a text block needs a string `text`")
                })?;
                out.push_str(t);
            }
            Ok(out)
        }
        _ => Err(invalid(
            field,
            format!("`{field}` must be a string or an array of content blocks"),
        )),
    }
}

fn messages(o: &Obj) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::new();
    match o.get("system") {
        None | Some(Value::Null) => {}
        Some(v) => out.push(json!({"role": "system", "content": text_of(v, "system")?})),
    }
    let list = match o.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(invalid("messages", "`messages` is empty")),
        Some(_) => return Err(invalid("messages", "`messages` must be an array")),
        None => return Err(invalid("messages", "`messages` is required")),
    };
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = match m.get("role").and_then(Value::as_str) {
            Some(r @ ("user" | "assistant")) => r,
            Some(r) => {
                return Err(invalid(
                    &format!("{at}.role"),
                    format!("role {r:?}: it must be \"user\" or \"assistant\""),
                ))
            }
            None => return Err(invalid(&format!("{at}.role"), "`role` must be a string")),
        };
        let content = m
            .get("content")
            .ok_or_else(|| invalid(&format!("{at}.content"), "`content` is required"))?;
        let text = text_of(content, &format!("{at}.content"))?;
        if role == "assistant" && i + 1 == list.len() {
            return Err(invalid(
                &at,
                "the last message is the assistant's: continuing a prefilled assistant turn \
                 is not supported (end with a user message)",
            ));
        }
        out.push(json!({"role": role, "content": text}));
    }
    Ok(out)
}

/// The OpenAI chat body an Anthropic body means (`count`: for `count_tokens`, where
/// `max_tokens` is not asked).
pub fn to_chat(body: &Value, count: bool) -> Result<Value, ApiError> {
    let o = body
        .as_object()
        .ok_or_else(|| ApiError::bad_body("the request body must be a JSON object"))?;
    // count_tokens also takes `tools` etc. in Anthropic's API; flint refuses them alike.
    if let Some(k) = o.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(unsupported(k, k));
    }
    let mut chat = Obj::new();
    chat.insert("messages".into(), Value::Array(messages(o)?));
    match o.get("max_tokens") {
        Some(v @ Value::Number(_)) => {
            chat.insert("max_tokens".into(), v.clone());
        }
        None | Some(Value::Null) if count => {}
        None | Some(Value::Null) => return Err(invalid("max_tokens", "`max_tokens` is required")),
        Some(_) => return Err(invalid("max_tokens", "`max_tokens` must be an integer")),
    }
    if let Some(t) = o.get("temperature").and_then(Value::as_f64) {
        if !(0.0..=1.0).contains(&t) {
            return Err(invalid(
                "temperature",
                format!("`temperature` is {t}: it must be in [0, 1]"),
            ));
        }
    }
    for (from, to) in [
        ("model", "model"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("top_k", "top_k"),
        ("stop_sequences", "stop"),
    ] {
        if let Some(v) = o.get(from).filter(|v| !v.is_null()) {
            let strings = v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
            if from == "stop_sequences" && !strings {
                return Err(invalid(
                    from,
                    "`stop_sequences` must be an array of strings",
                ));
            }
            chat.insert(to.into(), v.clone());
        }
    }
    match o.get("metadata") {
        None | Some(Value::Null | Value::Object(_)) => {}
        Some(_) => return Err(invalid("metadata", "`metadata` must be an object")),
    }
    match o.get("stream") {
        None | Some(Value::Null | Value::Bool(_)) => {}
        Some(_) => return Err(invalid("stream", "`stream` must be a boolean")),
    }
    Ok(Value::Object(chat))
}

/// What a `message` object (and its stream) repeats.
#[derive(Debug, Clone)]
pub struct MessageMeta {
    pub id: String,
    pub model: String,
    pub input_tokens: usize,
}

impl MessageMeta {
    /// The `message` object: `content` holds one text block (none while streaming starts).
    pub fn message(&self, text: Option<String>, o: Option<&Outcome>) -> Value {
        let content = match text {
            Some(t) => json!([{"type": "text", "text": t}]),
            None => json!([]),
        };
        let (reason, seq) = o.map_or((Value::Null, Value::Null), stop_reason);
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": self.model,
            "stop_reason": reason,
            "stop_sequence": seq,
            "usage": {
                "input_tokens": self.input_tokens,
                "output_tokens": o.map_or(0, |o| o.completion_tokens),
            },
        })
    }
}

/// Anthropic's `stop_reason` and `stop_sequence` of an outcome.
pub fn stop_reason(o: &Outcome) -> (Value, Value) {
    match (o.finish_reason, &o.stop_word) {
        ("length", _) => (json!("max_tokens"), Value::Null),
        (_, Some(w)) => (json!("stop_sequence"), json!(w)),
        _ => (json!("end_turn"), Value::Null),
    }
}

pub async fn messages_route(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(app, &headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn handle(
    app: Arc<App>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, AnthropicError> {
    let value = read_json(headers, body, app.timeouts.body).await?;
    let ready = app.ready()?;
    let stream = value.get("stream").and_then(Value::as_bool) == Some(true);
    let chat = to_chat(&value, false)?;
    let req = request::parse(Endpoint::Chat, &chat, &ready.limits)?;
    let sub = submit_request(&app, &ready, req).await?;
    let (mut rx, input_tokens) = (sub.rx, sub.prompt_tokens);
    let id = app.next_id(Endpoint::Chat);
    let meta = MessageMeta {
        id: format!("msg_{}", id.trim_start_matches("chatcmpl-")),
        model: app.alias.clone(),
        input_tokens,
    };
    if stream {
        return Ok(super::anthropic_stream::stream(meta, rx));
    }
    let mut text = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Logprobs(_) => {}
            Event::Done(o) => return Ok(Json(meta.message(Some(text), Some(&o))).into_response()),
            Event::Error(m) => return Err(ApiError::internal(m).into()),
            Event::Shutdown => {
                return Err(ApiError::unavailable("the server is shutting down").into())
            }
        }
    }
    Err(ApiError::internal("the generation ended without a result").into())
}

pub async fn count_tokens_route(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    count_tokens(app, &headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `{"input_tokens": N}`: the tokens of the prompt `/v1/messages` would run for this body.
async fn count_tokens(
    app: Arc<App>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, AnthropicError> {
    let value = read_json(headers, body, app.timeouts.body).await?;
    let ready = app.ready()?;
    let chat = to_chat(&value, true)?;
    let req = request::parse(Endpoint::Chat, &chat, &ready.limits)?;
    let counted = {
        let ready = Arc::clone(&ready);
        tokio::task::spawn_blocking(move || tokens(&ready, &req.prompt, false).map(|t| t.len()))
    };
    let n = counted
        .await
        .map_err(|e| ApiError::internal(format!("tokenizer task: {e}")))??;
    Ok(Json(json!({"input_tokens": n})).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(body: Value) -> String {
        let e = to_chat(&body, false).unwrap_err();
        e.param.unwrap_or_default()
    }

    #[test]
    fn translates_system_blocks_and_stops() {
        let body = json!({
            "model": "m", "max_tokens": 8, "system": [{"type": "text", "text": "Be brief."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                       {"type": "text", "text": " there"}]}],
            "stop_sequences": ["\n"], "temperature": 0, "metadata": {"user_id": "u"},
        });
        let chat = to_chat(&body, false).unwrap();
        assert_eq!(
            chat["messages"],
            json!([{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Hi there"}])
        );
        assert_eq!(chat["stop"], json!(["\n"]));
        assert_eq!(chat["max_tokens"], 8);
    }

    #[test]
    fn refusals_name_their_field() {
        let msgs = json!([{"role": "user", "content": "Hi"}]);
        let base = |k: &str, v: Value| {
            let mut b = json!({"max_tokens": 4, "messages": msgs});
            b[k] = v;
            b
        };
        assert_eq!(param(base("tools", json!([]))), "tools");
        assert_eq!(
            param(base("tool_choice", json!({"type": "auto"}))),
            "tool_choice"
        );
        assert_eq!(
            param(base("thinking", json!({"type": "enabled"}))),
            "thinking"
        );
        assert_eq!(param(base("temperature", json!(1.5))), "temperature");
        assert_eq!(param(base("stop_sequences", json!([1]))), "stop_sequences");
        assert_eq!(param(json!({"messages": msgs})), "max_tokens");
        let img = json!([{"role": "user", "content": [{"type": "image", "source": {}}]}]);
        assert_eq!(param(base("messages", img)), "messages[0].content[0].type");
        let prefill =
            json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]);
        assert_eq!(param(base("messages", prefill)), "messages[1]");
        assert!(to_chat(&json!({"messages": msgs}), true).is_ok());
    }

    #[test]
    fn stop_reasons() {
        let o = |r: &'static str, w: Option<&str>| Outcome {
            finish_reason: r,
            stop_word: w.map(str::to_string),
            ..Outcome::default()
        };
        assert_eq!(stop_reason(&o("length", None)).0, "max_tokens");
        assert_eq!(stop_reason(&o("stop", None)).0, "end_turn");
        assert_eq!(
            stop_reason(&o("stop", Some("\n"))),
            (json!("stop_sequence"), json!("\n"))
        );
    }
}
