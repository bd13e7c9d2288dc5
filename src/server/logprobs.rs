//! Log-probabilities in the shapes clients read (the values come from the engine,
//! `crate::engine::logprobs`):
//!
//! - OpenAI chat: `choices[].logprobs = {"content": [{token, logprob, bytes, top_logprobs:
//!   [{token, logprob, bytes}]}]}`, `top_logprobs` holding the N best.
//! - OpenAI legacy completions: `{tokens, token_logprobs, top_logprobs, text_offset}`, each
//!   `top_logprobs` entry a `{token: logprob}` dict of the N best plus the chosen token when it
//!   is not among them (N + 1); with `echo` the prompt's tokens come first, the first one with
//!   `null`s. A token that is not UTF-8 on its own is written `bytes:\xNN…`.
//! - llama-server: `completion_probabilities = [{id, token, bytes, logprob, top_logprobs:
//!   [{id, token, bytes, logprob}]}]`, or with `post_sampling_probs` `prob` and `top_probs`
//!   (the engine then gives the sampler's distribution: see docs/SERVER.md).
//!
//! Streamed, each chunk carries the entries of the tokens since the previous chunk.

use serde_json::{json, Map, Value};

use crate::engine::logprobs::TokenLogprob;
use crate::tokenizer::Tokenizer;

/// One token's entry with its text: what the worker sends the response.
#[derive(Debug, Clone, PartialEq)]
pub struct LpToken {
    pub id: u32,
    pub bytes: Vec<u8>,
    /// `None`: the prompt's first token.
    pub logprob: Option<f32>,
    /// `(id, bytes, logprob)`, best first.
    pub top: Vec<(u32, Vec<u8>, f32)>,
    pub prompt: bool,
}

/// `e` with each token's bytes (special tokens as their text).
pub fn with_text(tok: &Tokenizer, e: TokenLogprob) -> LpToken {
    let bytes = |id: u32| {
        tok.token_to_piece(id, true)
            .map_or_else(|_| Vec::new(), <[u8]>::to_vec)
    };
    LpToken {
        id: e.token,
        bytes: bytes(e.token),
        logprob: e.logprob,
        top: e.top.iter().map(|&(id, lp)| (id, bytes(id), lp)).collect(),
        prompt: e.prompt,
    }
}

/// A token's text: its bytes as UTF-8, or OpenAI's `bytes:\xNN…` when they are not.
pub fn token_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(_) => {
            let hex: String = bytes.iter().map(|b| format!("\\x{b:02x}")).collect();
            format!("bytes:{hex}")
        }
    }
}

/// A JSON number for a log-probability: the f32's shortest decimal (`-0.1`, not the f64
/// widening `-0.10000000149011612`); `-9999` for minus infinity, as OpenAI writes it.
fn num(lp: f32) -> Value {
    if lp.is_finite() {
        short(lp)
    } else {
        json!(-9999.0)
    }
}

fn short(x: f32) -> Value {
    json!(x.to_string().parse::<f64>().unwrap_or(f64::from(x)))
}

/// OpenAI chat's `{"content": [...]}` of `entries`.
pub fn chat(entries: &[LpToken]) -> Value {
    let item = |bytes: &[u8], lp: f32| json!({"token": token_text(bytes), "logprob": num(lp), "bytes": bytes});
    let content: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = item(&e.bytes, e.logprob.unwrap_or(0.0));
            let top: Vec<Value> = e.top.iter().map(|(_, b, lp)| item(b, *lp)).collect();
            v["top_logprobs"] = Value::Array(top);
            v
        })
        .collect();
    json!({ "content": content })
}

/// Where the next legacy token's `text_offset` starts: the characters of the text so far.
#[derive(Debug, Default, Clone)]
pub struct Offsets {
    bytes: Vec<u8>,
}

impl Offsets {
    /// Characters of the complete UTF-8 prefix of the bytes so far.
    fn chars(&self) -> usize {
        let valid = match std::str::from_utf8(&self.bytes) {
            Ok(s) => s,
            Err(e) => std::str::from_utf8(&self.bytes[..e.valid_up_to()]).unwrap_or(""),
        };
        valid.chars().count()
    }
}

/// OpenAI legacy completions' `logprobs` object of `entries`, `top` alternatives each; `at`
/// carries the text offsets across a stream's chunks.
pub fn legacy(entries: &[LpToken], top: u32, at: &mut Offsets) -> Value {
    let (mut tokens, mut lps, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    for e in entries {
        tokens.push(json!(token_text(&e.bytes)));
        offsets.push(json!(at.chars()));
        at.bytes.extend_from_slice(&e.bytes);
        let Some(lp) = e.logprob else {
            lps.push(Value::Null);
            tops.push(Value::Null);
            continue;
        };
        lps.push(num(lp));
        let mut dict = Map::new();
        for (_, b, v) in e.top.iter().take(top as usize) {
            dict.entry(token_text(b)).or_insert_with(|| num(*v));
        }
        if !e
            .top
            .iter()
            .take(top as usize)
            .any(|(id, _, _)| *id == e.id)
        {
            dict.entry(token_text(&e.bytes)).or_insert_with(|| num(lp));
        }
        tops.push(Value::Object(dict));
    }
    json!({
        "tokens": tokens,
        "token_logprobs": lps,
        "top_logprobs": tops,
        "text_offset": offsets,
    })
}

/// llama-server's `completion_probabilities` of `entries` (`post`: `prob` / `top_probs`).
pub fn llama(entries: &[LpToken], post: bool) -> Value {
    let item = |id: u32, bytes: &[u8], lp: f32| {
        let mut v = json!({"id": id, "token": token_text(bytes), "bytes": bytes});
        match post {
            true => v["prob"] = short(lp.exp()),
            false => v["logprob"] = num(lp),
        }
        v
    };
    let list: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = item(e.id, &e.bytes, e.logprob.unwrap_or(0.0));
            let top: Vec<Value> = e.top.iter().map(|(id, b, lp)| item(*id, b, *lp)).collect();
            v[if post { "top_probs" } else { "top_logprobs" }] = Value::Array(top);
            v
        })
        .collect();
    Value::Array(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(id: u32, bytes: &[u8], lp: Option<f32>, top: &[(u32, &[u8], f32)]) -> LpToken {
        LpToken {
            id,
            bytes: bytes.to_vec(),
            logprob: lp,
            top: top.iter().map(|&(i, b, v)| (i, b.to_vec(), v)).collect(),
            prompt: false,
        }
    }

    #[test]
    fn legacy_tops_add_the_chosen_token_and_write_bytes() {
        let entries = [
            e(1, b"He", None, &[]),
            e(2, b"llo", Some(-0.5), &[(2, b"llo", -0.5), (3, b"y", -1.0)]),
            e(4, &[0xe2, 0x80], Some(-3.0), &[(5, b"!", -0.1)]),
        ];
        let v = legacy(&entries, 1, &mut Offsets::default());
        assert_eq!(v["tokens"], json!(["He", "llo", "bytes:\\xe2\\x80"]));
        assert_eq!(v["token_logprobs"], json!([null, -0.5, -3.0]));
        assert_eq!(v["top_logprobs"][0], Value::Null);
        assert_eq!(v["top_logprobs"][1], json!({"llo": -0.5}));
        assert_eq!(
            v["top_logprobs"][2],
            json!({"!": -0.1, "bytes:\\xe2\\x80": -3.0})
        );
        assert_eq!(v["text_offset"], json!([0, 2, 5]));
    }

    #[test]
    fn chat_and_llama_shapes() {
        let entries = [e(7, b"Hi", Some(-0.25), &[(7, b"Hi", -0.25)])];
        let c = chat(&entries);
        assert_eq!(c["content"][0]["bytes"], json!([72, 105]));
        assert_eq!(c["content"][0]["top_logprobs"][0]["token"], json!("Hi"));
        let l = llama(&entries, true);
        let p = l[0]["prob"].as_f64().unwrap();
        assert!((p - (-0.25f64).exp()).abs() < 1e-6, "{p}");
        assert_eq!(l[0]["top_probs"][0]["id"], json!(7));
    }
}
