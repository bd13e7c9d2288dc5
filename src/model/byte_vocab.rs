//! A byte-level vocabulary for generated models (`flint gguf preset … --weights random`): a
//! GPT-2-style BPE tokenizer whose first 256 tokens are the bytes (in GPT-2's byte-to-unicode
//! spelling) and that has no merges, so any text encodes (one token per byte) and any token
//! decodes; Qwen's ChatML specials and template, and control fillers up to the model's
//! vocabulary size. A model written with it runs `generate`, `chat` and `bench -md` like a
//! downloaded one, which is all a random model needs.

use crate::gguf::{GgufWriter, MetaArray, MetaValue};
use crate::tokenizer::bpe::byte_chars;

/// ChatML, as Qwen models ship it (without tools).
const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' \
+ message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}\
{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// The specials after the 256 byte tokens: end of text, ChatML's start and end of a turn.
const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// Sets the `tokenizer.*` keys of a byte-level vocabulary of `n_vocab` tokens (at least 259).
pub fn set_byte_tokenizer(w: &mut GgufWriter, n_vocab: u32) {
    let n = n_vocab.max(256 + SPECIALS.len() as u32) as usize;
    // GPT-2's byte-to-character spelling, as the byte-level BPE tokenizer decodes it.
    let mut tokens: Vec<String> = byte_chars().iter().map(char::to_string).collect();
    tokens.extend(SPECIALS.iter().map(|s| s.to_string()));
    let first_filler = tokens.len();
    tokens.extend((first_filler..n).map(|i| format!("<|filler_{i}|>")));
    // llama.cpp's token types: 1 normal, 3 control.
    let types: Vec<i32> = (0..n).map(|i| if i < 256 { 1 } else { 3 }).collect();
    let eos = 256 + SPECIALS.len() as u32 - 1;
    w.set("tokenizer.ggml.model", MetaValue::String("gpt2".into()));
    w.set("tokenizer.ggml.pre", MetaValue::String("qwen2".into()));
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(tokens)),
    );
    w.set(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(types)),
    );
    w.set(
        "tokenizer.ggml.merges",
        MetaValue::Array(MetaArray::String(Vec::new())),
    );
    w.set("tokenizer.ggml.eos_token_id", MetaValue::U32(eos));
    w.set("tokenizer.ggml.padding_token_id", MetaValue::U32(256));
    w.set("tokenizer.ggml.bos_token_id", MetaValue::U32(256));
    w.set("tokenizer.ggml.add_bos_token", MetaValue::Bool(false));
    w.set("tokenizer.chat_template", MetaValue::String(CHATML.into()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::Gguf;
    use crate::tokenizer::Tokenizer;

    #[test]
    fn any_text_round_trips_one_token_per_byte() {
        let mut w = GgufWriter::new();
        w.set("general.architecture", MetaValue::String("qwen3".into()));
        set_byte_tokenizer(&mut w, 400);
        let g = Gguf::parse(&w.to_bytes().unwrap()).unwrap();
        let tok = Tokenizer::from_gguf(&g).unwrap();
        let text = "Hé ✓\n";
        let ids = tok.encode(text, false, false).unwrap();
        assert_eq!(ids.len(), text.len());
        assert!(ids.iter().all(|&id| id < 256));
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
    }
}
