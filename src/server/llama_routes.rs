//! llama-server's own routes (llama.cpp's tools/server/README.md): `POST /completion`,
//! `POST /tokenize`, `POST /detokenize`, `POST /apply-template` and `GET /props`, in its request
//! and response shapes, so front-ends and scripts written for llama-server work unchanged.
//! Their bodies go through the same gate, limits and field rules as the OpenAI routes: an
//! unknown field is refused by name.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::http::{read_json, submit};
use super::llama_completion::{self, LlamaMeta};
use super::request::{self, Endpoint};
use super::state::App;

type Obj = Map<String, Value>;

/// The body as an object whose every field is one of `known`.
fn object<'v>(v: &'v Value, known: &[&str]) -> Result<&'v Obj, ApiError> {
    let o = v
        .as_object()
        .ok_or_else(|| ApiError::bad_body("the request body must be a JSON object"))?;
    if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            k,
            format!("unknown field `{k}`: this route takes {}", known.join(", ")),
        ));
    }
    Ok(o)
}

/// A boolean field, `default` when absent or null.
fn flag(o: &Obj, key: &str, default: bool) -> Result<bool, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid(key, format!("`{key}` must be a boolean"))),
    }
}

/// `POST /completion`: llama-server's completion (request fields: [`super::fields`]).
pub async fn completion(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    completion_or_infill(app, headers, body, false).await
}

/// `POST /infill`: llama-server's fill-in-the-middle ([`super::infill`]), answered as
/// `/completion`.
pub async fn infill(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    completion_or_infill(app, headers, body, true).await
}

async fn completion_or_infill(
    app: Arc<App>,
    headers: HeaderMap,
    body: Body,
    infill: bool,
) -> Response {
    let run = async {
        let mut value = read_json(&headers, body, app.timeouts.body).await?;
        if infill {
            let ready = app.ready()?;
            value = super::infill::completion_body(&value, &ready.tok, ready.fim)?;
        }
        let sub = submit(&app, Endpoint::LlamaCompletion, &value).await?;
        let meta = LlamaMeta {
            model: app.alias.clone(),
            prompt_tokens: sub.prompt_tokens,
            n_ctx: sub.n_ctx,
            probs: sub.logprobs.top.map(|_| sub.logprobs.post_sampling),
        };
        let r = if sub.stream {
            llama_completion::stream(meta, sub.rx, app.timeouts.keep_alive)
        } else {
            llama_completion::collect(meta, sub.rx).await?
        };
        Ok(super::http::name_ignored(r, &sub.ignored))
    };
    run.await.unwrap_or_else(|e: ApiError| e.into_response())
}

/// `POST /tokenize`: `content` (required), `add_special` (default false), `parse_special`
/// (default true), `with_pieces` (default false) → `{"tokens": [id…]}` or, with pieces,
/// `[{"id", "piece"}]` where a piece is a string when its bytes are UTF-8, else a byte list.
pub async fn tokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let run = async {
        let value = read_json(&headers, body, app.timeouts.body).await?;
        let o = object(
            &value,
            &["content", "add_special", "parse_special", "with_pieces"],
        )?;
        let content = match o.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(ApiError::invalid("content", "`content` must be a string")),
            None => return Err(ApiError::invalid("content", "`content` is required")),
        };
        let add_special = flag(o, "add_special", false)?;
        let parse_special = flag(o, "parse_special", true)?;
        let with_pieces = flag(o, "with_pieces", false)?;
        let ready = app.ready()?;
        let job = tokio::task::spawn_blocking(move || {
            let tok = &ready.tok;
            let ids = tok
                .encode(&content, add_special, parse_special)
                .map_err(|e| ApiError::invalid("content", format!("cannot tokenize: {e}")))?;
            if !with_pieces {
                return Ok(json!({ "tokens": ids }));
            }
            let list = ids
                .iter()
                .map(|&id| {
                    let bytes = tok
                        .token_to_piece(id, true)
                        .map_err(|e| ApiError::internal(format!("token {id}: {e}")))?;
                    let piece = match std::str::from_utf8(bytes) {
                        Ok(s) => json!(s),
                        Err(_) => json!(bytes),
                    };
                    Ok(json!({"id": id, "piece": piece}))
                })
                .collect::<Result<Vec<Value>, ApiError>>()?;
            Ok(json!({ "tokens": list }))
        });
        let out = job
            .await
            .map_err(|e| ApiError::internal(format!("tokenizer task: {e}")))??;
        Ok(Json(out).into_response())
    };
    run.await.unwrap_or_else(|e: ApiError| e.into_response())
}

/// `POST /detokenize`: `tokens` (ids in the vocabulary) → `{"content": text}`, control tokens
/// rendered, as llama-server does.
pub async fn detokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let run = async {
        let value = read_json(&headers, body, app.timeouts.body).await?;
        let o = object(&value, &["tokens"])?;
        let ready = app.ready()?;
        let n_vocab = ready.limits.n_vocab;
        let ids: Vec<u32> = match o.get("tokens") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_u64()
                        .and_then(|id| u32::try_from(id).ok())
                        .filter(|&id| id < n_vocab)
                        .ok_or_else(|| {
                            ApiError::invalid(
                                "tokens",
                                format!(
                                    "tokens[{i}] is {v}: a token id is an integer in 0..{n_vocab}"
                                ),
                            )
                        })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(ApiError::invalid("tokens", "`tokens` must be an array")),
        };
        let job = tokio::task::spawn_blocking(move || ready.tok.decode(&ids, true));
        let text = job
            .await
            .map_err(|e| ApiError::internal(format!("tokenizer task: {e}")))?
            .map_err(|e| ApiError::invalid("tokens", format!("cannot detokenize: {e}")))?;
        Ok(Json(json!({ "content": text })).into_response())
    };
    run.await.unwrap_or_else(|e: ApiError| e.into_response())
}

/// `POST /apply-template`: `messages` → `{"prompt": text}`, the chat template rendered with
/// the generation prompt, exactly as `/v1/chat/completions` would tokenize it.
pub async fn apply_template(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        let value = read_json(&headers, body, app.timeouts.body).await?;
        let o = object(&value, &["messages"])?;
        let messages = request::messages(o)?;
        let ready = app.ready()?;
        // Rendering runs template code: on a blocking thread, never the runtime's.
        let render = {
            let ready = Arc::clone(&ready);
            tokio::task::spawn_blocking(move || {
                let template = ready.template.as_ref()?;
                Some(ready.tok.render_chat(template, &messages, true))
            })
        };
        let rendered = render
            .await
            .map_err(|e| ApiError::internal(format!("template task: {e}")))?
            .ok_or_else(|| ApiError::invalid("messages", "the model has no chat template"))?
            .map_err(|e| ApiError::invalid("messages", format!("chat template: {e}")))?;
        Ok(Json(json!({ "prompt": rendered.text() })).into_response())
    };
    run.await.unwrap_or_else(|e: ApiError| e.into_response())
}

/// `GET /props`: llama-server's server properties (read-only).
pub async fn props(State(app): State<Arc<App>>) -> Response {
    let ready = match app.ready() {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let (busy, _) = app.slots.snapshot();
    let l = &ready.limits;
    let d = &l.defaults;
    let tok = &ready.tok;
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("");
    let params = json!({
        "n_predict": -1,
        // llama-server's "random" seed is u32::MAX.
        "seed": l.seed.unwrap_or(u64::from(u32::MAX)),
        "temperature": d.temp,
        "top_k": d.top_k,
        "top_p": d.top_p,
        "min_p": d.min_p,
        "typical_p": 1.0,
        "repeat_last_n": d.repeat_last_n,
        "repeat_penalty": d.repeat_penalty,
        "presence_penalty": d.presence_penalty,
        "frequency_penalty": d.frequency_penalty,
        "mirostat": 0,
        "dry_multiplier": 0.0,
        "xtc_probability": 0.0,
        "stop": [],
        "max_tokens": -1,
        "n_keep": 0,
        "ignore_eos": false,
        "stream": false,
        "n_probs": 0,
        "min_keep": 0,
        "samplers": ["penalties", "top_k", "top_p", "min_p", "temperature"],
        "timings_per_token": false,
    });
    Json(json!({
        "default_generation_settings": {
            "id": 0,
            "id_task": -1,
            "n_ctx": l.n_ctx,
            "speculative": ready.speculative,
            "is_processing": false,
            "params": params,
            "prompt": "",
        },
        "total_slots": busy.len(),
        "model_path": ready.model_path,
        "chat_template": tok.chat_template_source().unwrap_or(""),
        "bos_token": text(tok.bos_id()),
        "eos_token": text(tok.eos_id()),
        "modalities": {"vision": false, "audio": false},
        "build_info": concat!("flint-", env!("CARGO_PKG_VERSION")),
    }))
    .into_response()
}
