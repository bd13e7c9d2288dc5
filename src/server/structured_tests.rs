//! Tests of the structured-output fields, and the llguidance oracles the tool tests share:
//! [`accepts`] (llguidance's matcher takes a text) and [`random_walk`] (what a random-weight
//! model writes under the masks).

use super::*;
use serde_json::json;

fn body(v: Value) -> Result<Structured, ApiError> {
    parse(Endpoint::Chat, v.as_object().unwrap())
}

/// [`body`], planned and compiled (what a request's preparation does, over bytes).
fn checked(v: Value) -> Result<Structured, ApiError> {
    let s = body(v)?;
    let (spec, _) = plan(&s, None, "", true)?;
    if let Some(spec) = spec {
        check(&spec, s.field)?;
    }
    Ok(s)
}

#[test]
fn response_formats_become_schemas_held_by_llguidance() {
    let s = body(json!({"response_format": {"type": "json_object"}})).unwrap();
    let spec = GrammarSpec::JsonSchema(s.json.unwrap());
    assert_eq!(accepts(&spec, r#"{"a": [1, 2]}"#), Ok(true));
    assert_eq!(accepts(&spec, "[1]"), Ok(false));
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                        "required": ["n"], "additionalProperties": false});
    let s = body(json!({"response_format": {"type": "json_schema",
        "json_schema": {"name": "n_only", "schema": schema, "strict": true}}}))
    .unwrap();
    let spec = GrammarSpec::JsonSchema(s.json.clone().unwrap());
    assert_eq!(accepts(&spec, r#"{"n": 3}"#), Ok(true));
    assert_eq!(accepts(&spec, r#"{"n": "3"}"#), Ok(false));
    // Whitespace between JSON tokens: pretty-printing passes, a run past 24 does not.
    let (spec, _) = plan(&s, None, "", true).unwrap();
    let spec = spec.unwrap();
    assert_eq!(accepts(&spec, "{\n  \"n\": 3\n}"), Ok(true));
    assert_eq!(
        accepts(&spec, &format!("{{\"n\":{}3}}", " ".repeat(30))),
        Ok(false)
    );
    // Thinking left open: free reasoning, then the schema.
    let (spec, reader) = plan(&s, None, "<|im_start|>assistant\n<think>\n", true).unwrap();
    assert!(reader.thinking_open);
    let spec = spec.unwrap();
    assert_eq!(
        accepts(&spec, "hmm {\"n\": 1}? no.\n</think>\n\n{\"n\": 2}"),
        Ok(true)
    );
    assert_eq!(accepts(&spec, "</think>\n\n{\"n\": \"x\"}"), Ok(false));
    assert_eq!(accepts(&spec, "{\"n\": 2}"), Ok(false));
}

#[test]
fn gbnf_and_vllm_guides_constrain() {
    let s = body(json!({"json_schema": {"type": "integer"}})).unwrap();
    assert_eq!(s.field, "json_schema");
    let s = body(json!({"grammar": "root ::= (\"yes\" | \"no\") [.!]"})).unwrap();
    let spec = plan(&s, None, "", false).unwrap().0.unwrap();
    assert_eq!(accepts(&spec, "yes!"), Ok(true));
    assert_eq!(accepts(&spec, "yes"), Ok(false));
    let s = body(json!({"guided_choice": ["a.b", "c|d"]})).unwrap();
    let spec = plan(&s, None, "", false).unwrap().0.unwrap();
    assert_eq!(accepts(&spec, "c|d"), Ok(true));
    assert_eq!(accepts(&spec, "axb"), Ok(false));
    let s = body(json!({"guided_json": "{\"type\": \"integer\"}"})).unwrap();
    let spec = plan(&s, None, "", false).unwrap().0.unwrap();
    assert_eq!(accepts(&spec, "12"), Ok(true));
    assert_eq!(accepts(&spec, "\"12\""), Ok(false));
    let s = body(json!({"guided_regex": "[0-9]{3}"})).unwrap();
    let spec = plan(&s, None, "", false).unwrap().0.unwrap();
    assert_eq!(accepts(&spec, "123"), Ok(true));
    assert_eq!(accepts(&spec, "1234"), Ok(false));
}

#[test]
fn refusals_name_their_field() {
    for (v, param) in [
        (json!({"grammar": "root ::= <think> \"a\""}), "grammar"),
        (
            json!({"guided_grammar": "root ::= missing"}),
            "guided_grammar",
        ),
        (json!({"guided_json": "{not json"}), "guided_json"),
        (json!({"guided_regex": "(ab"}), "guided_regex"),
        (json!({"guided_choice": []}), "guided_choice"),
        (
            json!({"guided_regex": "a", "grammar": "root ::= \"a\""}),
            "guided_regex",
        ),
        (
            json!({"response_format": {"type": "xml"}}),
            "response_format",
        ),
        (
            json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "bad name", "schema": {}}}}),
            "response_format",
        ),
        (
            json!({"json_schema": {"type": "object"},
                "response_format": {"type": "json_object"}}),
            "json_schema",
        ),
        (
            json!({"grammar": "%llguidance {}\nstart: missing_rule"}),
            "grammar",
        ),
        (json!({"chat_template_kwargs": [1]}), "chat_template_kwargs"),
        (
            json!({"chat_template_kwargs": {"messages": []}}),
            "chat_template_kwargs",
        ),
        (
            json!({"json_schema": {"type": "object"}, "tools": [{"type": "function",
            "function": {"name": "f"}}]}),
            "json_schema",
        ),
    ] {
        let e = checked(v.clone()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some(param), "{v}: {e:?}");
    }
}

#[test]
fn a_schema_llguidance_cannot_honour_is_refused_naming_the_keyword() {
    let bad = json!({"type": "string", "format": "flint-no-such-format"});
    let e = checked(json!({"response_format": {"type": "json_schema",
        "json_schema": {"name": "x", "schema": bad}}}))
    .unwrap_err();
    assert_eq!(e.param.as_deref(), Some("response_format"));
    assert!(e.message.contains("format"), "{}", e.message);
}

#[test]
fn llguidance_lark_grammars_pass() {
    let s = body(json!({"grammar": "%llguidance {}\nstart: \"yes\" | \"no\""})).unwrap();
    let (spec, _) = plan(&s, None, "", false).unwrap();
    let spec = spec.unwrap();
    assert_eq!(accepts(&spec, "yes"), Ok(true));
    assert_eq!(accepts(&spec, "maybe"), Ok(false));
}

/// Whether llguidance's matcher for `spec` takes every byte of `text` and then accepts (the
/// tests' oracle: the engine masks with the same matcher).
pub(crate) fn accepts(spec: &GrammarSpec, text: &str) -> Result<bool, String> {
    let f = crate::grammar::byte_factory()
        .as_ref()
        .map_err(|e| e.to_string())?;
    let parser = f
        .create_parser(crate::grammar::top_level(spec))
        .map_err(|e| e.to_string())?;
    let mut m = llguidance::Matcher::new(Ok(parser));
    let ids: Vec<u32> = text.bytes().map(u32::from).collect();
    if m.validate_tokens(&ids).map_err(|e| e.to_string())? < ids.len() {
        return Ok(false);
    }
    m.consume_tokens(&ids).map_err(|e| e.to_string())?;
    m.is_accepting().map_err(|e| e.to_string())
}

/// A random walk under `spec`'s masks over the byte vocabulary (each step a uniformly chosen
/// allowed byte, the end token with probability 1/2 when allowed): the text a model with
/// random weights may write under the constraint; an error if it had not ended by `max` steps.
pub(crate) fn random_walk(spec: &GrammarSpec, seed: u64, max: usize) -> Result<String, String> {
    let f = crate::grammar::byte_factory()
        .as_ref()
        .map_err(|e| e.to_string())?;
    let mut m = llguidance::Matcher::new(f.create_parser(crate::grammar::top_level(spec)));
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut rnd = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    let mut out = Vec::new();
    for _ in 0..max {
        let so_far =
            |out: &[u8], why: String| format!("{why} after {:?}", String::from_utf8_lossy(out));
        if m.is_stopped() {
            return String::from_utf8(out).map_err(|e| e.to_string());
        }
        let mask = m.compute_mask().map_err(|e| so_far(&out, e.to_string()))?;
        let allowed: Vec<u32> = (0..256u32).filter(|&t| mask.is_allowed(t)).collect();
        if mask.is_allowed(256) && (allowed.is_empty() || rnd() % 2 == 0) {
            return String::from_utf8(out).map_err(|e| e.to_string());
        }
        let Some(&t) = allowed.get(rnd() as usize % allowed.len().max(1)) else {
            return Err(so_far(&out, "no token allowed".into()));
        };
        m.consume_token(t)
            .map_err(|e| so_far(&out, e.to_string()))?;
        out.push(t as u8);
    }
    Err(so_far_end(&out, max))
}

fn so_far_end(out: &[u8], max: usize) -> String {
    let s = String::from_utf8_lossy(out);
    format!(
        "no end in {max} steps: ...{:?}",
        &s[s.len().saturating_sub(300)..]
    )
}
