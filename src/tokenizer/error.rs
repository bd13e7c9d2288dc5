//! `TokenizerError`: why a tokenizer could not be built from GGUF metadata, why a text could not
//! be encoded or ids decoded, or why a chat template failed. Every variant names its values.

use crate::gguf::GgufError;

/// A tokenizer, detokenizer or chat-template failure.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A metadata key is missing or has the wrong type.
    #[error("tokenizer metadata: {0}")]
    Metadata(#[from] GgufError),
    #[error("tokenizer model '{model}' is not supported (flint supports 'gpt2' and 'llama')")]
    UnsupportedModel { model: String },
    #[error("pre-tokenizer '{pre}' is not supported (see docs/TOKENIZER.md for the list)")]
    UnsupportedPreTokenizer { pre: String },
    #[error("the vocabulary is empty (tokenizer.ggml.tokens has no entries)")]
    EmptyVocab,
    #[error("tokenizer.ggml.tokens has {n_tokens} entries, more than the {max} flint accepts")]
    VocabTooLarge { n_tokens: usize, max: usize },
    #[error("token '{text}' appears twice in the vocabulary (ids {first} and {second})")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },
    #[error("byte-level BPE tokenizer needs tokenizer.ggml.merges, which is missing")]
    MissingMerges,
    #[error("{flag} is set but {key} is not (or is out of range)")]
    MissingSpecialToken {
        flag: &'static str,
        key: &'static str,
    },
    #[error("pre-tokenizer regex {pattern:?} failed: {message}")]
    Regex { pattern: String, message: String },
    #[error("byte {byte:#04x} has no token (no <0x{byte:02X}> byte token and no unknown token)")]
    NoTokenForByte { byte: u8 },
    #[error("token id {id} is out of range (vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange { id: u32, n_vocab: u32 },
    #[error("the model has no chat template (tokenizer.chat_template) and none was given")]
    NoChatTemplate,
    #[error("cannot read chat template file {path}: {source}")]
    ChatTemplateFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("chat template: {message}")]
    ChatTemplate { message: String },
}

impl From<minijinja::Error> for TokenizerError {
    fn from(e: minijinja::Error) -> Self {
        // `{:#}` includes the template line and the cause chain.
        TokenizerError::ChatTemplate {
            message: format!("{e:#}"),
        }
    }
}
