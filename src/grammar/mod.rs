//! Constrained decoding: what a request asks its output to match, and the matcher that keeps
//! every generated token inside it.
//!
//! A [`GrammarSpec`] is the request-side description (a JSON schema, a regular expression or a
//! Lark grammar). [`compile`] checks one without a model (what a server handler calls before
//! admission, so a bad schema is a 400 naming the keyword); [`Grammars`] (one per model, built
//! from its vocabulary) compiles it into a [`Constraint`], one per request, that gives the
//! allowed-token bitmask of every position (`ceil(V/32)` u32 words, bit `t % 32` of word
//! `t / 32` set = token `t` allowed), the forced (fast-forward) tokens, and draft validation
//! with rollback for speculation. The engine behind the trait is llguidance
//! (<https://github.com/guidance-ai/llguidance>); grammars are compiled fail-closed: a schema
//! keyword it cannot honour is an error naming it, never unconstrained output.

mod env;
pub mod gbnf;
mod llg;
pub mod steps;

pub use llg::{byte_factory, compile, top_level, Checked, Grammars, LlgConstraint};

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

impl GrammarSpec {
    /// The kind, as error messages name it.
    pub fn kind(&self) -> &'static str {
        match self {
            GrammarSpec::JsonSchema(_) => "JSON schema",
            GrammarSpec::Regex(_) => "regex",
            GrammarSpec::Lark(_) => "Lark grammar",
        }
    }
}

/// Why a grammar could not be compiled or followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    /// The spec does not compile; for a JSON schema the message names the unsupported keyword
    /// (e.g. `Unimplemented keys: ["uniqueItems"]`).
    #[error("the {kind} cannot be compiled: {message}")]
    Compile { kind: &'static str, message: String },
    /// The vocabulary could not be turned into a token environment.
    #[error("the vocabulary cannot drive a grammar: {0}")]
    Vocab(String),
    /// The matcher refused a token the engine committed (a bug, or a token outside the mask).
    #[error("token {token} is not allowed by the grammar here: {message}")]
    Rejected { token: u32, message: String },
    /// The matcher failed (its state is unusable for this request).
    #[error("the grammar matcher failed: {0}")]
    Matcher(String),
}

/// One request's grammar state over a model's vocabulary. Tokens are the model's ids.
pub trait Constraint: Send {
    /// Words of the mask (`ceil(n_vocab / 32)`).
    fn mask_words(&self) -> usize;
    /// The allowed tokens after what was consumed, into `out` (`mask_words()` u32 words). When
    /// the grammar is complete and nothing may follow, only the end-of-generation tokens.
    fn fill_mask(&mut self, out: &mut [u32]) -> Result<(), GrammarError>;
    /// Advances over `tokens` (each must be allowed).
    fn consume(&mut self, tokens: &[u32]) -> Result<(), GrammarError>;
    /// The length of the longest prefix of `tokens` the grammar allows; the state is unchanged.
    fn validate(&mut self, tokens: &[u32]) -> Result<usize, GrammarError>;
    /// Undoes the last `n` consumed tokens.
    fn rollback(&mut self, n: usize) -> Result<(), GrammarError>;
    /// The tokens the grammar forces next (fast-forward), consumed; empty when none are.
    fn take_forced(&mut self) -> Result<Vec<u32>, GrammarError>;
    /// The tokens the grammar forces next, not consumed.
    fn peek_forced(&mut self) -> Vec<u32>;
    /// The output so far is a complete match.
    fn is_accepting(&mut self) -> bool;
    /// Nothing more may be generated (the grammar is complete and closed).
    fn is_stopped(&self) -> bool;
}

/// Is token `t` allowed by `mask` (words as [`Constraint::fill_mask`] writes them)?
pub fn allowed(mask: &[u32], t: u32) -> bool {
    mask.get((t / 32) as usize)
        .is_some_and(|w| (w >> (t % 32)) & 1 == 1)
}

#[cfg(test)]
mod tests;
