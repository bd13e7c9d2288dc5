//! Chat templates against Jinja2 with Hugging Face's settings (the oracle,
//! tests/data/tokenizer/chat_templates.json, is written by scripts/gen_tokenizer_chat.py):
//! SmolLM2's own template (ChatML), Llama 3, Qwen2.5 with and without tools, and a template
//! that exercises the Python string/dict methods. Plus literal expectations derived by reading
//! the templates, the override file, and template errors.

use crate::common;

use flint::gguf::{Gguf, GgufFile, GgufWriter, MetaArray, MetaValue};
use flint::tokenizer::{
    read_template_file, strftime, ChatMessage, ChatTemplate, Tokenizer, TokenizerError,
};
use serde_json::Value;

fn cases() -> Vec<Value> {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/tokenizer/chat_templates.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn messages(v: &Value) -> Vec<ChatMessage> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

#[test]
fn renders_like_jinja2() {
    let cases = cases();
    assert_eq!(cases.len(), 15);
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let t = ChatTemplate::new(
            c["template"].as_str().unwrap(),
            c["bos_token"].as_str().unwrap(),
            c["eos_token"].as_str().unwrap(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let extra: Vec<(&str, minijinja::Value)> = c
            .get("extra")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        (
                            k.as_str(),
                            minijinja::Value::from(minijinja::value::Serde(v)),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let gen = c["add_generation_prompt"].as_bool().unwrap();
        let got = t
            .render_with(&messages(&c["messages"]), gen, &extra)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            got,
            c["expected"].as_str().unwrap(),
            "{name} (generation prompt: {gen})"
        );
    }
}

const SMOLLM_SYSTEM: &str =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";

#[test]
fn smollm2_template_from_the_model() {
    let f = GgufFile::open(&common::model_path()).unwrap();
    let tok = Tokenizer::from_gguf(&f).unwrap();
    let t = tok.chat_template(None).unwrap();
    let msgs = [ChatMessage::new("user", "Hi")];
    // ChatML: a default system turn when the first message is not a system message, then
    // each message as <|im_start|>role\ncontent<|im_end|>\n, then the assistant opener.
    let want = format!("{SMOLLM_SYSTEM}<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    assert_eq!(t.render(&msgs, true).unwrap(), want);
    let want = format!("{SMOLLM_SYSTEM}<|im_start|>user\nHi<|im_end|>\n");
    assert_eq!(t.render(&msgs, false).unwrap(), want);
    let msgs = [
        ChatMessage::new("system", "S"),
        ChatMessage::new("user", "U"),
    ];
    let want = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n";
    assert_eq!(t.render(&msgs, false).unwrap(), want);
    // The rendered prompt tokenizes with its control tokens parsed.
    let ids = tok
        .encode(&t.render(&msgs, true).unwrap(), false, true)
        .unwrap();
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.iter().filter(|&&i| i == 1).count(), 3);
}

#[test]
fn llama3_literal() {
    let src = cases().into_iter().find(|c| c["name"] == "llama3").unwrap();
    let t = ChatTemplate::new(src["template"].as_str().unwrap(), "<|begin_of_text|>", "").unwrap();
    let msgs = [
        ChatMessage::new("system", "Be brief. "),
        ChatMessage::new("user", "Hi"),
    ];
    // BOS once, before the first header; content trimmed; <|eot_id|> after each message.
    let want = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
                <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
                <|start_header_id|>assistant<|end_header_id|>\n\n";
    assert_eq!(t.render(&msgs, true).unwrap(), want);
}

#[test]
fn override_file_replaces_the_model_template() {
    let dir = std::env::temp_dir().join(format!("flint-chat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.jinja");
    std::fs::write(
        &path,
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\n",
    )
    .unwrap();
    let f = GgufFile::open(&common::model_path()).unwrap();
    let tok = Tokenizer::from_gguf(&f).unwrap();
    let src = read_template_file(&path).unwrap();
    let t = tok.chat_template(Some(&src)).unwrap();
    // trim_blocks removes the newline after a block tag; the template's last newline is dropped.
    assert_eq!(
        t.render(&[ChatMessage::new("user", "x")], false).unwrap(),
        "user: x\n"
    );
    let t = ChatTemplate::from_file(&path, "", "").unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "");
    assert!(matches!(
        read_template_file(&dir.join("missing.jinja")),
        Err(TokenizerError::ChatTemplateFile { .. })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn template_errors_are_typed() {
    let err = ChatTemplate::new("{% for %}", "", "").unwrap_err();
    assert!(matches!(err, TokenizerError::ChatTemplate { .. }), "{err}");
    let t = ChatTemplate::new(
        "{% if messages[0].role != 'system' %}{{ raise_exception('need a system turn') }}{% endif %}",
        "",
        "",
    )
    .unwrap();
    let err = t
        .render(&[ChatMessage::new("user", "x")], false)
        .unwrap_err();
    assert!(err.to_string().contains("need a system turn"), "{err}");
    let t = ChatTemplate::new("{{ 'x'.no_such_method() }}", "", "").unwrap();
    assert!(t.render(&[], false).is_err());
    // A vocabulary without tokenizer.chat_template and no override.
    let mut w = GgufWriter::new();
    w.set("tokenizer.ggml.model", MetaValue::String("llama".into()));
    let toks = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(toks)),
    );
    let tok = Tokenizer::from_gguf(&Gguf::parse(&w.to_bytes().unwrap()).unwrap()).unwrap();
    assert!(matches!(
        tok.chat_template(None),
        Err(TokenizerError::NoChatTemplate)
    ));
    // bos_token / eos_token come from the vocabulary.
    let t = tok
        .chat_template(Some("x{{ bos_token }}|{{ eos_token }}"))
        .unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "x<s>|</s>");
    // This vocabulary adds BOS (SentencePiece's default), so a leading bos_token text is dropped
    // from the rendering, as llama.cpp's common_chat_templates_apply does; EOS is not added, so
    // a trailing eos_token stays.
    let t = tok
        .chat_template(Some("{{ bos_token }}|{{ eos_token }}"))
        .unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "|</s>");
    let mut tok = tok;
    tok.set_add_bos(false).unwrap();
    tok.set_add_eos(true).unwrap();
    let t = tok
        .chat_template(Some("{{ bos_token }}|{{ eos_token }}"))
        .unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "<s>|");
}

#[test]
fn strftime_now_formats_dates() {
    // 2024-07-26 13:05:09 UTC was a Friday, day 208 of a leap year.
    let t = 1_721_999_109;
    assert_eq!(
        strftime("%d %b %Y %H:%M:%S %A %j %p %I %y %B %%", t),
        "26 Jul 2024 13:05:09 Friday 208 PM 01 24 July %"
    );
    assert_eq!(strftime("%Y-%m-%d", 0), "1970-01-01");
    assert_eq!(strftime("%Y-%m-%d %a", 951_782_400), "2000-02-29 Tue");
    let t = ChatTemplate::new("{{ strftime_now('%Y') }}", "", "").unwrap();
    let year: i32 = t.render(&[], false).unwrap().parse().unwrap();
    assert!(year >= 2024);
}
