//! The llguidance engine behind [`Constraint`]: one [`Grammars`] (parser factory over the
//! model's token environment) per model, one [`LlgConstraint`] (matcher) per request.

use std::sync::{Arc, OnceLock};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};

use crate::tokenizer::Tokenizer;

use super::env::FlintTokEnv;
use super::{Constraint, GrammarError, GrammarSpec};

/// llguidance's grammar for `spec`. Lark grammars keep llguidance's dialect as written.
pub fn top_level(spec: &GrammarSpec) -> TopLevelGrammar {
    match spec {
        GrammarSpec::JsonSchema(v) => TopLevelGrammar::from_json_schema(v.clone()),
        GrammarSpec::Regex(r) => TopLevelGrammar::from_regex(r),
        GrammarSpec::Lark(l) => TopLevelGrammar::from_lark(l.clone()),
    }
}

fn compile_error(spec: &GrammarSpec, e: impl std::fmt::Display) -> GrammarError {
    GrammarError::Compile {
        kind: spec.kind(),
        message: e.to_string(),
    }
}

/// A factory with llguidance's stderr logging off (errors come back as values).
fn factory(env: &TokEnv) -> Result<ParserFactory, GrammarError> {
    let mut f = ParserFactory::new_simple(env).map_err(|e| GrammarError::Vocab(e.to_string()))?;
    f.quiet();
    Ok(f)
}

/// A spec that compiled against a byte-level vocabulary: it is well formed and every schema
/// keyword in it is honoured (what [`compile`] proves; the model's own compile follows).
#[derive(Debug, Clone, PartialEq)]
pub struct Checked(pub GrammarSpec);

/// Checks `spec` without a model: compiles it over a vocabulary of the 256 bytes. A JSON
/// schema keyword llguidance cannot honour, a bad regex or a Lark syntax error is a
/// [`GrammarError::Compile`] naming it. A server handler calls this before admission.
pub fn compile(spec: &GrammarSpec) -> Result<Checked, GrammarError> {
    let f = byte_factory().as_ref().map_err(Clone::clone)?;
    f.create_parser(top_level(spec))
        .map_err(|e| compile_error(spec, e))?;
    Ok(Checked(spec.clone()))
}

/// The parser factory over a byte-level vocabulary: ids 0..=255 are the bytes, id 256 the end
/// token. Enough to compile any grammar and find what it refuses with no model loaded; also
/// the tests' oracle matcher over text.
pub fn byte_factory() -> &'static Result<ParserFactory, GrammarError> {
    static BYTES: OnceLock<Result<ParserFactory, GrammarError>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        words.push(b"\xFF<|end|>".to_vec());
        let info = TokRxInfo::new(words.len() as u32, words.len() as u32 - 1);
        factory(&(Arc::new(ApproximateTokEnv::new(TokTrie::from(&info, &words))) as TokEnv))
    })
}

/// One model's grammar compiler: its token environment and parser factory (shared by every
/// request; cheap to clone).
#[derive(Clone)]
pub struct Grammars {
    factory: Arc<ParserFactory>,
    n_vocab: u32,
}

impl Grammars {
    /// The compiler for `tok` over `n_vocab` logits (the LM head's rows).
    pub fn new(tok: &Tokenizer, n_vocab: u32) -> Result<Grammars, GrammarError> {
        let env: TokEnv = Arc::new(FlintTokEnv::new(tok, n_vocab)?);
        Ok(Grammars {
            factory: Arc::new(factory(&env)?),
            n_vocab,
        })
    }

    /// The vocabulary size masks cover.
    pub fn n_vocab(&self) -> u32 {
        self.n_vocab
    }

    /// A fresh matcher for `spec` (one per request).
    pub fn compile(&self, spec: &GrammarSpec) -> Result<LlgConstraint, GrammarError> {
        let parser = self
            .factory
            .create_parser(top_level(spec))
            .map_err(|e| compile_error(spec, e))?;
        let m = Matcher::new(Ok(parser));
        if let Some(e) = m.get_error() {
            return Err(compile_error(spec, e));
        }
        Ok(LlgConstraint {
            m,
            words: self.n_vocab.div_ceil(32) as usize,
        })
    }
}

/// One request's llguidance matcher.
pub struct LlgConstraint {
    m: Matcher,
    words: usize,
}

impl LlgConstraint {
    fn failed(&self, what: &str) -> GrammarError {
        GrammarError::Matcher(format!(
            "{what}: {}",
            self.m.get_error().unwrap_or_else(|| "no detail".into())
        ))
    }
}

impl Constraint for LlgConstraint {
    fn mask_words(&self) -> usize {
        self.words
    }

    fn fill_mask(&mut self, out: &mut [u32]) -> Result<(), GrammarError> {
        let v = self
            .m
            .compute_mask_or_eos()
            .map_err(|e| GrammarError::Matcher(e.to_string()))?;
        let src = v.as_slice();
        for (i, w) in out.iter_mut().enumerate() {
            *w = src.get(i).copied().unwrap_or(0);
        }
        Ok(())
    }

    fn consume(&mut self, tokens: &[u32]) -> Result<(), GrammarError> {
        for &t in tokens {
            self.m
                .consume_token(t)
                .map_err(|e| GrammarError::Rejected {
                    token: t,
                    message: e.to_string(),
                })?;
        }
        Ok(())
    }

    fn validate(&mut self, tokens: &[u32]) -> Result<usize, GrammarError> {
        self.m
            .validate_tokens(tokens)
            .map_err(|e| GrammarError::Matcher(e.to_string()))
    }

    fn rollback(&mut self, n: usize) -> Result<(), GrammarError> {
        if n == 0 {
            return Ok(());
        }
        self.m
            .rollback(n)
            .map_err(|e| GrammarError::Matcher(format!("rollback of {n} tokens: {e}")))
    }

    fn take_forced(&mut self) -> Result<Vec<u32>, GrammarError> {
        let t = self.m.consume_ff_tokens();
        if self.m.is_error() {
            return Err(self.failed("forced tokens"));
        }
        Ok(t)
    }

    fn peek_forced(&mut self) -> Vec<u32> {
        self.m.compute_ff_tokens()
    }

    fn is_accepting(&mut self) -> bool {
        self.m.is_accepting().unwrap_or(false)
    }

    fn is_stopped(&self) -> bool {
        self.m.is_stopped()
    }
}
