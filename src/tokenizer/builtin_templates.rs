//! Chat templates by name (`--chat-template NAME`), for models whose GGUF carries none or a
//! wrong one: Jinja renderings of the built-in formats llama.cpp names the same way
//! (`llama_chat_apply_template`'s `chatml`, `llama3`, `gemma`, `phi3`, `mistral-v7`), each held
//! by `tests/chat_template_names.rs` to the output llama.cpp's own template test expects.

/// `(name, Jinja source)` of every built-in template.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "chatml",
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}\
         {% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    ),
    (
        "llama3",
        "{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' \
         + m['content'] | trim + '<|eot_id|>' }}{% endfor %}\
         {% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
    ),
    // Gemma has no system turn: the system text opens the next user turn.
    (
        "gemma",
        "{% set ns = namespace(sys='') %}{% for m in messages %}{% if m['role'] == 'system' %}\
         {% set ns.sys = ns.sys + m['content'] | trim + '\\n\\n' %}{% else %}\
         {{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\\n' + ns.sys \
         + m['content'] | trim + '<end_of_turn>\\n' }}{% set ns.sys = '' %}{% endif %}{% endfor %}\
         {% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}",
    ),
    (
        "phi3",
        "{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}{% endfor %}\
         {% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}",
    ),
    (
        "mistral-v7",
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + m['content'] + '[/SYSTEM_PROMPT]' }}\
         {% elif m['role'] == 'user' %}{{ '[INST] ' + m['content'] + '[/INST]' }}\
         {% else %}{{ ' ' + m['content'] + '</s>' }}{% endif %}{% endfor %}",
    ),
];

/// The Jinja source of the built-in template `name`.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The built-in names, comma-separated (for messages).
pub fn names() -> String {
    BUILTIN
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}
