//! `POST /v1/embeddings` (OpenAI's embeddings API). Each input (a string, an array of strings,
//! token ids, or arrays of token ids) runs as an "embed these rows" job in a free slot
//! ([`super::embed_job`]): its vector is the model's final hidden state (after the output norm,
//! before the LM head), mean-pooled over the input's tokens and L2-normalised, as llama-server's
//! `/v1/embeddings` answers for a generative model started with `--embeddings --pooling mean`.
//! `encoding_format` `float` (default) or `base64` (little-endian f32 bytes, what the `openai`
//! Python client asks for); `dimensions` is accepted only equal to the model's width.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::http::{enqueue, read_json};
use super::slots::{Event, Job};
use super::state::{App, Ready};

/// Inputs in one request at most (OpenAI's own limit).
pub const MAX_INPUTS: usize = 2048;

/// The fields of OpenAI's request; any other is refused by name.
const FIELDS: &[&str] = &["input", "model", "encoding_format", "dimensions", "user"];

/// One input as sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Text(String),
    Tokens(Vec<u32>),
}

/// A validated request.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedRequest {
    pub inputs: Vec<Input>,
    pub base64: bool,
    pub dimensions: Option<u64>,
}

/// Parse and bound a body (`n_vocab` bounds token ids).
pub fn parse(body: &Value, n_vocab: u32) -> Result<EmbedRequest, ApiError> {
    let o: &Map<String, Value> = body
        .as_object()
        .ok_or_else(|| ApiError::bad_body("the request body must be a JSON object"))?;
    if let Some(k) = o.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            k,
            format!("`{k}` is not supported by /v1/embeddings (fields: {FIELDS:?})"),
        ));
    }
    match o.get("model") {
        None | Some(Value::Null | Value::String(_)) => {}
        Some(_) => return Err(ApiError::invalid("model", "`model` must be a string")),
    }
    if !matches!(o.get("user"), None | Some(Value::Null | Value::String(_))) {
        return Err(ApiError::invalid("user", "`user` must be a string"));
    }
    let base64 = match o.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(v) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("`encoding_format` is {v}: it must be \"float\" or \"base64\""),
            ))
        }
    };
    let dimensions = match o.get("dimensions") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().filter(|&d| d > 0).ok_or_else(|| {
            ApiError::invalid(
                "dimensions",
                format!("`dimensions` is {v}: a positive integer"),
            )
        })?),
    };
    Ok(EmbedRequest {
        inputs: inputs(o.get("input"), n_vocab)?,
        base64,
        dimensions,
    })
}

fn inputs(v: Option<&Value>, n_vocab: u32) -> Result<Vec<Input>, ApiError> {
    let bad = |m: String| ApiError::invalid("input", m);
    let ids = |a: &[Value], at: &str| -> Result<Input, ApiError> {
        if a.is_empty() {
            return Err(bad(format!("input{at} holds no token ids")));
        }
        a.iter()
            .enumerate()
            .map(|(i, t)| {
                t.as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .filter(|&id| id < n_vocab)
                    .ok_or_else(|| {
                        bad(format!(
                            "input{at}[{i}] is {t}: a token id is an integer in 0..{n_vocab}"
                        ))
                    })
            })
            .collect::<Result<Vec<u32>, _>>()
            .map(Input::Tokens)
    };
    let list = match v {
        None | Some(Value::Null) => return Err(bad("`input` is required".into())),
        Some(Value::String(s)) => vec![Input::Text(s.clone())],
        Some(Value::Array(a)) if a.is_empty() => return Err(bad("`input` is empty".into())),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => vec![ids(a, "")?],
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, x)| match x {
                Value::String(s) => Ok(Input::Text(s.clone())),
                Value::Array(t) => ids(t, &format!("[{i}]")),
                _ => Err(bad(format!(
                    "input[{i}] is {x}: a string or an array of token ids"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(x) => {
            return Err(bad(format!(
                "`input` is {x}: a string, an array of strings, token ids or arrays of token ids"
            )))
        }
    };
    if list.len() > MAX_INPUTS {
        return Err(bad(format!("{} inputs: at most {MAX_INPUTS}", list.len())));
    }
    Ok(list)
}

/// Standard base64 (with padding) of `bytes`.
pub fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(c.get(1).copied().unwrap_or(0)) << 8)
            | u32::from(c.get(2).copied().unwrap_or(0));
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= c.len() {
                out.push(ABC[(n >> shift) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The `embedding` value: floats, or base64 of their little-endian bytes.
fn encode(v: &[f32], base64_out: bool) -> Value {
    if base64_out {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        json!(base64(&bytes))
    } else {
        json!(v)
    }
}

pub async fn embeddings(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    handle(app, &headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn handle(app: Arc<App>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let value = read_json(headers, body, app.timeouts.body).await?;
    let ready = app.ready()?;
    let req = parse(&value, ready.limits.n_vocab)?;
    let pooling = ready
        .pooling
        .clone()
        .map_err(|why| ApiError::invalid("input", format!("no embeddings here: {why}")))?;
    let tokenize = {
        let (ready, inputs) = (Arc::clone(&ready), req.inputs.clone());
        tokio::task::spawn_blocking(move || token_rows(&ready, &inputs))
    };
    let rows = tokenize
        .await
        .map_err(|e| ApiError::internal(format!("tokenizer task: {e}")))??;
    let mut data = Vec::with_capacity(rows.len());
    let mut n_tokens = 0usize;
    for (index, ids) in rows.into_iter().enumerate() {
        n_tokens += ids.len();
        let v = embed_one(&app, ids, pooling).await?;
        if let Some(d) = req.dimensions.filter(|&d| d != v.len() as u64) {
            return Err(ApiError::invalid(
                "dimensions",
                format!(
                    "`dimensions` is {d}: this model's embeddings have {} (it cannot shorten them)",
                    v.len()
                ),
            ));
        }
        data.push(
            json!({"object": "embedding", "index": index, "embedding": encode(&v, req.base64)}),
        );
    }
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": app.alias,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    }))
    .into_response())
}

/// Each input's token ids (text: with the model's own added tokens, special-token text kept as
/// text), each non-empty and within a slot.
fn token_rows(ready: &Ready, inputs: &[Input]) -> Result<Vec<Vec<u32>>, ApiError> {
    let n_ctx = ready.limits.n_ctx as usize;
    let at = |i: usize| {
        if inputs.len() == 1 {
            String::new()
        } else {
            format!("[{i}]")
        }
    };
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let ids = match input {
                Input::Tokens(ids) => ids.clone(),
                Input::Text(t) => ready.tok.encode(t, true, false).map_err(|e| {
                    ApiError::invalid("input", format!("cannot tokenize input{}: {e}", at(i)))
                })?,
            };
            if ids.is_empty() {
                return Err(ApiError::invalid(
                    "input",
                    format!("input{} gives no tokens: there is nothing to embed", at(i)),
                ));
            }
            if ids.len() > n_ctx {
                return Err(ApiError::invalid(
                    "input",
                    format!(
                        "input{} has {} tokens and a slot holds {n_ctx}",
                        at(i),
                        ids.len()
                    ),
                ));
            }
            Ok(ids)
        })
        .collect()
}

/// Runs one input as an embedding job in the next free slot.
async fn embed_one(
    app: &App,
    prompt: Vec<u32>,
    pooling: super::embed_job::Pooling,
) -> Result<Vec<f32>, ApiError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (told, admitted) = tokio::sync::oneshot::channel();
    let (reply, vector) = tokio::sync::oneshot::channel();
    let job = Job {
        logprobs: None,
        id: 0,
        prompt,
        max_tokens: 0,
        sampling: None,
        bias: Vec::new(),
        stop: Vec::new(),
        tx,
        queued_at: std::time::Instant::now(),
        admitted: Some(told),
        embed: Some(reply),
        grammar: None,
        guide: None,
        stop_ids: Vec::new(),
        pooling,
    };
    enqueue(app, job, admitted, None).await?;
    if let Ok(v) = vector.await {
        return Ok(v);
    }
    // The job ended without a vector: its events say why.
    Err(match rx.recv().await {
        Some(Event::Error(m)) => ApiError::internal(m),
        Some(Event::Shutdown) => ApiError::unavailable("the server is shutting down"),
        _ => ApiError::internal("the embedding ended without a result"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        // RFC 4648 §10 test vectors.
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), enc, "{plain:?}");
        }
    }

    #[test]
    fn inputs_of_every_shape_and_refusals_by_name() {
        let p = |v: Value| parse(&v, 100);
        let r = p(json!({"input": "hi"})).unwrap();
        assert_eq!(r.inputs, vec![Input::Text("hi".into())]);
        assert!(!r.base64);
        let r = p(json!({"input": ["a", [1, 2]], "encoding_format": "base64"})).unwrap();
        assert_eq!(
            r.inputs,
            vec![Input::Text("a".into()), Input::Tokens(vec![1, 2])]
        );
        assert!(r.base64);
        assert_eq!(
            p(json!({"input": [5, 6]})).unwrap().inputs,
            vec![Input::Tokens(vec![5, 6])]
        );
        for (body, param) in [
            (json!({}), "input"),
            (json!({"input": []}), "input"),
            (json!({"input": [[]]}), "input"),
            (json!({"input": [100]}), "input"),
            (json!({"input": [{"x": 1}]}), "input"),
            (
                json!({"input": "a", "encoding_format": "int8"}),
                "encoding_format",
            ),
            (json!({"input": "a", "dimensions": 0}), "dimensions"),
            (json!({"input": "a", "pooling": "cls"}), "pooling"),
        ] {
            let e = p(body.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e:?}");
        }
    }
}
