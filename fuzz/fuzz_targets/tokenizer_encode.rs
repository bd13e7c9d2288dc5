//! Arbitrary text into the tokenizers (a byte-level BPE with the Qwen2 pre-tokenizer and a
//! SentencePiece vocabulary with byte fallback, both synthetic): encoding must return `Ok`,
//! never panic, and the BPE must decode back to the exact input; the streaming decoder must
//! agree with the one-shot decoder.
#![no_main]

use std::sync::OnceLock;

use flint::gguf::{Gguf, GgufWriter, MetaArray, MetaValue};
use flint::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fn build(
    model: &str,
    tokens: Vec<String>,
    types: Vec<i32>,
    merges: Option<Vec<String>>,
) -> Tokenizer {
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", MetaValue::String(model.into()));
    w.set("tokenizer.ggml.pre", MetaValue::String("qwen2".into()));
    let scores = (0..tokens.len()).map(|i| -(i as f32) / 8.0).collect();
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(tokens)),
    );
    w.set(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(types)),
    );
    w.set(
        "tokenizer.ggml.scores",
        MetaValue::Array(MetaArray::F32(scores)),
    );
    if let Some(m) = merges {
        w.set(
            "tokenizer.ggml.merges",
            MetaValue::Array(MetaArray::String(m)),
        );
    }
    let g = Gguf::parse(&w.to_bytes().expect("writer")).expect("parse");
    Tokenizer::from_gguf(&g).expect("tokenizer")
}

/// Byte-level BPE: the 256 byte characters, a few merges, one control token.
fn bpe() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let chars: Vec<String> = (0..=255u8)
            .map(|b| {
                let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
                let n = (0..b)
                    .filter(|&x| !matches!(x, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF))
                    .count();
                let cp = if printable {
                    u32::from(b)
                } else {
                    256 + n as u32
                };
                char::from_u32(cp).unwrap_or('?').to_string()
            })
            .collect();
        let mut tokens = chars;
        let mut types = vec![1; 256];
        for t in ["he", "ll", "hell", "hello", "Ġt", "Ġthe", "<|end|>"] {
            tokens.push(t.into());
            types.push(if t.starts_with("<|") { 3 } else { 1 });
        }
        let merges = [
            "h e",
            "l l",
            "he ll",
            "hell o",
            "Ġ t",
            "Ġt he",
            "x notatoken",
        ];
        build(
            "gpt2",
            tokens,
            types,
            Some(merges.map(String::from).to_vec()),
        )
    })
}

/// SentencePiece: <unk> <s> </s>, 256 byte tokens, a few pieces.
fn spm() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
        let mut types = vec![2, 3, 3];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
        }
        for t in ["▁", "a", "b", "ab", "▁a", "▁ab", "ba", "é"] {
            tokens.push(t.into());
            types.push(1);
        }
        build("llama", tokens, types, None)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let (add_special, parse_special) = (flags & 1 != 0, flags & 2 != 0);
    let t = if flags & 4 != 0 { spm() } else { bpe() };
    let ids = t
        .encode(&text, add_special, parse_special)
        .expect("encode never fails here");
    let whole = t.decode(&ids, true).expect("ids are in range");
    if flags & 4 == 0 && !add_special {
        assert_eq!(whole, text, "byte-level BPE round trip");
    }
    let mut d = t.stream_decoder(true);
    let mut streamed = String::new();
    for &id in &ids {
        streamed.push_str(&d.push(id).expect("in range"));
    }
    streamed.push_str(&d.finish());
    if flags & 4 == 0 {
        assert_eq!(streamed, whole, "stream and one-shot decoding agree");
    }
});
