//! `--chat-template NAME`: each built-in template renders llama.cpp's test conversation exactly
//! as llama.cpp's own built-in formatter does. The expected strings are the `expected_output`
//! of the matching cases of llama.cpp's `tests/test-chat-template.cpp` (the conversation below is
//! that test's), so the Jinja here is held to llama.cpp, not to itself.

use flint::tokenizer::builtin_templates::builtin;
use flint::tokenizer::{ChatMessage, ChatTemplate};

fn conversation() -> Vec<ChatMessage> {
    [
        ("system", "You are a helpful assistant"),
        ("user", "Hello"),
        ("assistant", "Hi there"),
        ("user", "Who are you"),
        ("assistant", "   I am an assistant   "),
        ("user", "Another question"),
    ]
    .into_iter()
    .map(|(r, c)| ChatMessage::new(r, c))
    .collect()
}

fn render(name: &str) -> String {
    let src = builtin(name).unwrap_or_else(|| panic!("no built-in {name}"));
    ChatTemplate::new(src, "", "</s>")
        .unwrap()
        .render(&conversation(), true)
        .unwrap()
}

#[test]
fn chatml() {
    assert_eq!(render("chatml"), "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n");
}

#[test]
fn gemma() {
    assert_eq!(render("gemma"), "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n");
}

#[test]
fn llama3() {
    assert_eq!(render("llama3"), "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

#[test]
fn phi3() {
    assert_eq!(render("phi3"), "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n");
}

#[test]
fn mistral_v7() {
    assert_eq!(render("mistral-v7"), "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]");
}
