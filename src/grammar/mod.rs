//! Constrained decoding: what a request asks its output to match.
//!
//! A [`GrammarSpec`] is the request-side description (a JSON schema, a regular expression or a
//! Lark grammar); the engine compiles it once per request into a matcher over the model's
//! vocabulary and masks every sampled position with it.

/// What the generated text must match. Compiled per request; a spec that cannot be compiled
/// ends that request alone with an error naming the offending part.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// A JSON Schema (draft 2020-12 subset); the output is one JSON value it accepts.
    JsonSchema(serde_json::Value),
    /// A regular expression the whole output must match.
    Regex(String),
    /// A Lark grammar (llguidance's dialect: `%json { … }`, `<special>` tokens, lazy triggers).
    Lark(String),
}
