//! `POST /infill`: llama-server's fill-in-the-middle for code editors (llama.vim,
//! llama.vscode). The request is `/completion`'s with `input_prefix`, `input_suffix`,
//! `input_extra` (`[{"filename", "text"}]`, other files as context) and `prompt` (the start of
//! the middle); the answer is `/completion`'s. The prompt is laid out as llama-server's
//! `format_prompt_infill` does (prefix-suffix-middle): `[BOS] [REPO "repo\n"] ([SEP] name "\n"
//! text)… PRE prefix SUF suffix MID prompt`, with the model's FIM tokens from the GGUF
//! (`tokenizer.ggml.fim_*_token_id`, the older `prefix/suffix/middle_token_id`) or, as
//! llama.cpp finds them, by their text in the vocabulary. A model with none is refused (400).
//!
//! Source: llama.cpp's `tools/server/README.md` (`POST /infill`) and `tools/server/utils.hpp`.

use serde_json::{Map, Value};

use super::error::ApiError;
use crate::gguf::Metadata;
use crate::tokenizer::Tokenizer;

/// A model's fill-in-the-middle tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fim {
    pub pre: u32,
    pub suf: u32,
    pub mid: u32,
    /// The repository-name token (context files), if any.
    pub rep: Option<u32>,
    /// The file-separator token (context files), if any.
    pub sep: Option<u32>,
}

/// The token texts llama.cpp recognises for each role (`llama-vocab.cpp`).
const PRE: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<PRE>",
    "▁<PRE>",
];
const SUF: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<SUF>",
    "▁<SUF>",
];
const MID: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<MID>",
    "▁<MID>",
];
const REP: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const SEP: &[&str] = &["<|file_sep|>", "<file_sep>"];

/// The FIM tokens of a model: its metadata's ids first, then the texts llama.cpp knows.
pub fn fim_tokens(meta: &Metadata, tok: &Tokenizer) -> Option<Fim> {
    let find = |keys: &[&str], texts: &[&str]| -> Option<u32> {
        let by_key = keys
            .iter()
            .find_map(|k| meta.u32(&format!("tokenizer.ggml.{k}")).ok());
        by_key
            .filter(|&id| id < tok.n_vocab())
            .or_else(|| texts.iter().find_map(|t| tok.token_id(t)))
    };
    Some(Fim {
        pre: find(&["fim_pre_token_id", "prefix_token_id"], PRE)?,
        suf: find(&["fim_suf_token_id", "suffix_token_id"], SUF)?,
        mid: find(&["fim_mid_token_id", "middle_token_id"], MID)?,
        rep: find(&["fim_rep_token_id"], REP),
        sep: find(&["fim_sep_token_id"], SEP),
    })
}

type Obj = Map<String, Value>;

fn text<'a>(o: &'a Obj, key: &str) -> Result<&'a str, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(ApiError::invalid(key, format!("`{key}` must be a string"))),
    }
}

/// The `/completion` body of an `/infill` body: the infill fields taken out, `prompt` the laid
/// out token ids. `fim` is `None` for a model without FIM tokens (the 400).
pub fn completion_body(body: &Value, tok: &Tokenizer, fim: Option<Fim>) -> Result<Value, ApiError> {
    let o = body
        .as_object()
        .ok_or_else(|| ApiError::bad_body("the request body must be a JSON object"))?;
    let fim = fim.ok_or_else(|| {
        ApiError::invalid(
            "input_prefix",
            "this model has no fill-in-the-middle tokens (no tokenizer.ggml.fim_pre_token_id, \
             fim_suf_token_id and fim_mid_token_id, nor their texts in the vocabulary): \
             /infill needs a code model trained for it",
        )
    })?;
    let enc = |key: &str, s: &str| {
        tok.encode(s, false, false)
            .map_err(|e| ApiError::invalid(key, format!("cannot tokenize `{key}`: {e}")))
    };
    let mut ids = Vec::new();
    if tok.add_bos() {
        ids.extend(tok.bos_id());
    }
    let extra = match o.get("input_extra") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                "input_extra",
                "`input_extra` must be an array",
            ))
        }
    };
    if !extra.is_empty() {
        if let Some(rep) = fim.rep {
            ids.push(rep);
            ids.extend(enc("input_extra", "myproject\n")?);
        }
    }
    for chunk in &extra {
        let c = chunk.as_object().ok_or_else(|| {
            ApiError::invalid(
                "input_extra",
                "each `input_extra` item is {\"filename\", \"text\"}",
            )
        })?;
        let (name, body) = (text(c, "filename")?, text(c, "text")?);
        match fim.sep {
            Some(sep) => {
                ids.push(sep);
                ids.extend(enc("input_extra", &format!("{name}\n"))?);
            }
            None => ids.extend(enc("input_extra", &format!("// {name}\n"))?),
        }
        ids.extend(enc("input_extra", body)?);
    }
    ids.push(fim.pre);
    ids.extend(enc("input_prefix", text(o, "input_prefix")?)?);
    ids.push(fim.suf);
    ids.extend(enc("input_suffix", text(o, "input_suffix")?)?);
    ids.push(fim.mid);
    ids.extend(enc("prompt", text(o, "prompt")?)?);
    let mut out = o.clone();
    for k in ["input_prefix", "input_suffix", "input_extra"] {
        out.remove(k);
    }
    out.insert("prompt".into(), Value::from(ids));
    Ok(Value::Object(out))
}
