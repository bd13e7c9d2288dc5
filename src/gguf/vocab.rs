//! Checks on the tokenizer metadata, done at parse time because the tokenizer indexes tables by
//! these values: array element types, equal lengths, special ids in range, byte-token spelling,
//! and the vocabulary size against the embedding table.

use super::error::GgufError;
use super::metadata::Metadata;
use super::parse::Gguf;
use super::value::{MetaArray, MetaValue};

const TOKENS: &str = "tokenizer.ggml.tokens";
const SCORES: &str = "tokenizer.ggml.scores";
const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const MERGES: &str = "tokenizer.ggml.merges";
/// llama.cpp's token type id for byte-fallback tokens.
const TOKEN_TYPE_BYTE: i32 = 6;
/// Keys holding special token ids.
const SPECIAL_IDS: [&str; 8] = [
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.separator_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.mask_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
];

fn found(m: &Metadata, key: &str) -> String {
    m.get(key).map(MetaValue::type_name).unwrap_or_default()
}

/// Validate the tokenizer tables if the file has them.
pub(crate) fn validate_tokenizer(g: &Gguf) -> Result<(), GgufError> {
    let m = &g.metadata;
    let tokens = match m.get(TOKENS) {
        None => return Ok(()),
        Some(MetaValue::Array(MetaArray::String(t))) => t,
        Some(_) => {
            return Err(GgufError::TokensType {
                found: found(m, TOKENS),
            })
        }
    };
    let n_tokens = tokens.len() as u64;
    let scores = match m.get(SCORES) {
        None => None,
        Some(MetaValue::Array(MetaArray::F32(s))) => Some(s.len()),
        Some(_) => {
            return Err(GgufError::ScoresType {
                found: found(m, SCORES),
            })
        }
    };
    let types = match m.get(TOKEN_TYPE) {
        None => None,
        Some(MetaValue::Array(MetaArray::I32(t))) => Some(t),
        Some(_) => {
            return Err(GgufError::TokenTypesType {
                found: found(m, TOKEN_TYPE),
            })
        }
    };
    match m.get(MERGES) {
        None | Some(MetaValue::Array(MetaArray::String(_))) => {}
        Some(_) => {
            return Err(GgufError::MergesType {
                found: found(m, MERGES),
            })
        }
    }
    if let Some(len) = scores {
        if len as u64 != n_tokens {
            return Err(GgufError::TokenArrayLength {
                key: SCORES,
                len: len as u64,
                n_tokens,
            });
        }
    }
    if let Some(types) = types {
        if types.len() as u64 != n_tokens {
            return Err(GgufError::TokenArrayLength {
                key: TOKEN_TYPE,
                len: types.len() as u64,
                n_tokens,
            });
        }
        for (index, (text, &ty)) in tokens.iter().zip(types.iter()).enumerate() {
            if ty == TOKEN_TYPE_BYTE && !is_byte_token(text) {
                return Err(GgufError::BadByteToken {
                    index: index as u64,
                    text: text.clone(),
                });
            }
        }
    }
    for key in SPECIAL_IDS {
        let Some(v) = m.get(key) else { continue };
        let Some(id) = v.as_i128() else {
            return Err(GgufError::WrongType {
                key: key.to_string(),
                expected: "integer",
                found: v.type_name(),
            });
        };
        // -1 is llama.cpp's "none".
        if id != -1 && (id < 0 || id >= i128::from(n_tokens)) {
            return Err(GgufError::SpecialTokenOutOfRange {
                key: key.to_string(),
                id: i64::try_from(id).unwrap_or(i64::MAX),
                n_tokens,
            });
        }
    }
    if let Ok(arch) = m.architecture() {
        let key = format!("{arch}.vocab_size");
        if let Some(v) = m.get(&key).and_then(MetaValue::as_i128) {
            if v != i128::from(n_tokens) {
                return Err(GgufError::VocabSizeMismatch {
                    n_tokens,
                    what: key,
                    value: u64::try_from(v).unwrap_or(0),
                });
            }
        }
    }
    if let Some(t) = g.tensor("token_embd.weight") {
        let rows = t.shape.get(1).copied().unwrap_or(1);
        if rows != n_tokens {
            return Err(GgufError::VocabSizeMismatch {
                n_tokens,
                what: "token_embd.weight rows".to_string(),
                value: rows,
            });
        }
    }
    Ok(())
}

/// Exactly `<0xHH>` with two hex digits.
fn is_byte_token(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 6
        && b.starts_with(b"<0x")
        && b.get(5) == Some(&b'>')
        && b.get(3..5)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_tokens_are_strict() {
        use super::is_byte_token as b;
        assert!(b("<0x0A>") && b("<0xff>"));
        assert!(!b("<0x-1>") && !b("<0xA>") && !b("<0x0AA>") && !b("<0x+A>") && !b("0x0A"));
    }
}
