//! `logit_bias` in both spellings: OpenAI's object of token id → bias (`{"15043": -100}`, the
//! keys strings of integers, biases in [-100, 100]) and llama-server's list of pairs
//! (`[[15043, -1.0]]`, `[[15043, false]]`: `false` bans the token). The bias is added to the
//! token's logit before sampling and before the greedy argmax (`Sampler::with_bias`).
//! llama-server also takes a string in place of an id (the bias then goes to each of its tokens);
//! flint takes token ids only, and says so.

use serde_json::Value;

use super::error::ApiError;

/// OpenAI's bound on a bias.
pub const MAX_BIAS: f64 = 100.0;
/// Entries at most (one per vocabulary token is already more than any client sends).
pub const MAX_ENTRIES: usize = 1024;

const FIELD: &str = "logit_bias";

fn bad(message: String) -> ApiError {
    ApiError::invalid(FIELD, message)
}

/// A token id in `0..n_vocab` from a JSON number or (OpenAI's keys) a string of digits.
fn token(v: &Value, n_vocab: u32) -> Result<u32, ApiError> {
    let id = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    let Some(id) = id else {
        return Err(bad(format!(
            "`logit_bias` key {v} is not a token id (strings of text are not supported: \
             use /tokenize to find their ids)"
        )));
    };
    u32::try_from(id)
        .ok()
        .filter(|&t| t < n_vocab)
        .ok_or_else(|| {
            bad(format!(
                "`logit_bias` token id {id}: the vocabulary holds ids 0..{n_vocab}"
            ))
        })
}

/// A bias: a number in [-100, 100], or `false` (llama-server: never this token, -inf).
fn amount(v: &Value, id: u32) -> Result<f32, ApiError> {
    match v {
        Value::Bool(false) => Ok(f32::NEG_INFINITY),
        Value::Number(n) => match n.as_f64() {
            Some(x) if (-MAX_BIAS..=MAX_BIAS).contains(&x) => Ok(x as f32),
            _ => Err(bad(format!(
                "`logit_bias` of token {id} is {n}: it must be in [-{MAX_BIAS}, {MAX_BIAS}]"
            ))),
        },
        _ => Err(bad(format!(
            "`logit_bias` of token {id} is {v}: a bias is a number or false"
        ))),
    }
}

/// The `(id, bias)` list of a request (empty when absent or null).
pub fn parse(v: Option<&Value>, n_vocab: u32) -> Result<Vec<(u32, f32)>, ApiError> {
    let list: Vec<(u32, f32)> = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, b)| {
                let id = token(&Value::String(k.clone()), n_vocab)?;
                Ok((id, amount(b, id)?))
            })
            .collect::<Result<_, ApiError>>()?,
        Some(Value::Array(pairs)) => pairs
            .iter()
            .map(|p| match p.as_array().map(Vec::as_slice) {
                Some([id, b]) => {
                    let id = token(id, n_vocab)?;
                    Ok((id, amount(b, id)?))
                }
                _ => Err(bad(format!(
                    "`logit_bias` entry {p} is not a pair [token id, bias]"
                ))),
            })
            .collect::<Result<_, ApiError>>()?,
        Some(other) => {
            return Err(bad(format!(
                "`logit_bias` is {other}: an object of token id → bias or a list of pairs"
            )))
        }
    };
    if list.len() > MAX_ENTRIES {
        return Err(bad(format!(
            "`logit_bias` has {} entries: at most {MAX_ENTRIES}",
            list.len()
        )));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_spellings_and_their_bounds() {
        let v = json!({"5": -100, "7": 2.5});
        assert_eq!(parse(Some(&v), 10).unwrap(), vec![(5, -100.0), (7, 2.5)]);
        let v = json!([[3, false], [4, 1]]);
        assert_eq!(
            parse(Some(&v), 10).unwrap(),
            vec![(3, f32::NEG_INFINITY), (4, 1.0)]
        );
        for bad in [
            json!({"10": 1}),
            json!({"x": 1}),
            json!({"1": 101}),
            json!([[1]]),
            json!([["hello", 1]]),
            json!("5"),
            json!({"1": true}),
        ] {
            let e = parse(Some(&bad), 10).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("logit_bias"), "{bad}");
        }
    }
}
