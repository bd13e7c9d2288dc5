//! The `prompt` of a completion request (`/v1/completions`, llama-server's `/completion`): a
//! string, one string in an array, or token ids (each an integer in the vocabulary; a refusal
//! names its index and value). Several prompts in one `/v1/completions` request ([`several`])
//! run as one request each.

use serde_json::{Map, Value};

use super::error::ApiError;
use super::request::Prompt;

/// A token id of a prompt: an integer in `0..n_vocab` (the refusal names its place and value).
fn token_id(v: &Value, at: usize, n_vocab: u32) -> Result<u32, ApiError> {
    let id = match v.as_i64() {
        Some(id) => id,
        None => {
            return Err(ApiError::invalid(
                "prompt",
                format!("prompt[{at}] is {v}: a token id is an integer"),
            ))
        }
    };
    u32::try_from(id)
        .ok()
        .filter(|&t| t < n_vocab)
        .ok_or_else(|| {
            ApiError::invalid(
                "prompt",
                format!("prompt[{at}] is token id {id}: the vocabulary holds ids 0..{n_vocab}"),
            )
        })
}

pub fn completion_prompt(o: &Map<String, Value>, n_vocab: u32) -> Result<Prompt, ApiError> {
    let bad = || {
        ApiError::invalid(
            "prompt",
            "`prompt` must be a string, one string in an array, or token ids",
        )
    };
    let tokens = |a: &[Value]| -> Result<Prompt, ApiError> {
        if a.is_empty() {
            return Err(ApiError::invalid("prompt", "`prompt` holds no token ids"));
        }
        a.iter()
            .enumerate()
            .map(|(at, t)| token_id(t, at, n_vocab))
            .collect::<Result<Vec<u32>, _>>()
            .map(Prompt::Tokens)
    };
    match o.get("prompt") {
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(a)) => match a.as_slice() {
            [] => Err(ApiError::invalid("prompt", "`prompt` is empty")),
            [Value::String(s)] => Ok(Prompt::Text(s.clone())),
            [Value::Array(ids)] => tokens(ids),
            ids if ids.iter().all(Value::is_number) => tokens(ids),
            ids if ids.iter().any(Value::is_number) => Err(ApiError::invalid(
                "prompt",
                "token ids mixed with strings in one `prompt` are not supported: \
                 tokenize the text (/tokenize) and send ids only",
            )),
            _ => Err(ApiError::invalid(
                "prompt",
                "several prompts in one request: send them to /v1/completions, or one per request",
            )),
        },
        None => Err(ApiError::invalid("prompt", "`prompt` is required")),
        Some(_) => Err(bad()),
    }
}

/// Several prompts in one body (`["a", "b"]`, `[[1, 2], [3]]`): one body per prompt, each
/// with the others' fields; `None` for one prompt. A stream of several is refused.
pub fn several(body: &Value) -> Result<Option<Vec<Value>>, ApiError> {
    let Some(Value::Array(a)) = body.get("prompt") else {
        return Ok(None);
    };
    let many = a.len() > 1 && a.iter().all(|p| p.is_string() || p.is_array());
    if !many {
        return Ok(None);
    }
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err(ApiError::invalid(
            "stream",
            format!(
                "{} prompts in one streamed request: stream one prompt per request",
                a.len()
            ),
        ));
    }
    Ok(Some(
        a.iter()
            .map(|p| {
                let mut b = body.clone();
                b["prompt"] = p.clone();
                b
            })
            .collect(),
    ))
}
