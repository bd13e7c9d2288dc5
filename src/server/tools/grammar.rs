//! Lark grammars (llguidance's dialect, <https://github.com/guidance-ai/llguidance/blob/main/docs/syntax.md>)
//! for each tool-call format and choice. Argument schemas ride inside as `%json { … }`; a
//! thinking prompt left open (`<think>\n`) gets a free `… </think>` prefix, so the reasoning is
//! never constrained and the answer is. Under `auto` the text runs free until the call marker
//! (a lazy rule ends at its first occurrence), and the call after it is constrained; the free
//! text cannot contain the marker, so every call the grammar lets through is a call.

use serde_json::{json, Value};

use super::{Choice, Format, Tool, ToolSetup};

/// Required parameters up to this many are accepted in any order (their permutations are
/// alternatives); above it, in the schema's order.
pub const MAX_PERMUTED: usize = 4;

/// A Lark string literal (JSON's escapes are Lark's).
pub fn lit(s: &str) -> String {
    Value::from(s).to_string()
}

/// llguidance's JSON options for every schema flint compiles: whitespace between JSON tokens
/// allowed (pretty-printing) but at most 24 characters per gap, so a model cannot spin in
/// whitespace until `max_tokens` (llguidance's default is unbounded). A schema that sets its own
/// `x-guidance` keeps it.
pub fn bounded_json(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Some(o) = s.as_object_mut() {
        o.entry("x-guidance").or_insert_with(|| {
            json!({"whitespace_flexible": false, "whitespace_pattern": "[\\x20\\x0A\\x0D\\x09]{1,24}"})
        });
    }
    s
}

/// Where the answer starts: after the prompt, or inside a `<think>` the template opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Think {
    /// The prompt leaves `<think>` open: a free reasoning up to `</think>` comes first.
    pub open: bool,
    /// At most this many characters of reasoning (`max_reasoning_chars`); `None`: unbounded.
    pub budget: Option<u64>,
}

impl Think {
    /// The rule of the reasoning: everything up to the first `</think>`.
    fn rule(self) -> String {
        let reps = match self.budget {
            Some(n) => format!("{{0,{n}}}"),
            None => "*".to_string(),
        };
        format!("think[lazy]: /(.|\\n){reps}<\\/think>/\n")
    }
}

/// The grammar of a tool-using answer; `None` when `tool_choice` is `none` (no constraint).
pub fn tools(setup: &ToolSetup, format: Format, think: Think) -> Option<String> {
    if setup.choice == Choice::None {
        return None;
    }
    let callable = setup.callable();
    let required = setup.choice == Choice::Required;
    let mut g = String::new();
    if format == Format::Generic {
        let env = generic_envelope(&callable, required, setup.parallel);
        g.push_str(&format!("answer: %json {}\n", bounded_json(&env)));
        return Some(finish(g, "answer", think));
    }
    match format {
        Format::QwenXml => xml(&mut g, &callable),
        Format::Hermes => hermes(&mut g, &callable),
        _ => llama3(&mut g, &callable),
    }
    // Calls after the first, when parallel (at most `MAX_PARALLEL_CALLS` in all): separated by
    // whitespace, as the templates join them.
    let many = if setup.parallel && format != Format::Llama3 {
        format!("(WS? call){{0,{}}}", super::MAX_PARALLEL_CALLS - 1)
    } else {
        String::new()
    };
    let top = match (required, format) {
        (true, _) => format!("calls: call {many}\n"),
        // Text that does not start with `{`, or one call object.
        (false, Format::Llama3) => "calls: TEXT | call\nTEXT: /[^{](.|\\n)*/\n".to_string(),
        (false, _) => format!(
            "calls: text | text_head call_tail {many}\n\
             text: TEXT\n\
             TEXT: /(.|\\n)*/ & ~/(?s:.*)<tool_call>(?s:.*)/\n\
             text_head[lazy]: /(.|\\n)*<tool_call>/\n"
        ),
    };
    g.push_str(&top);
    Some(finish(g, "calls", think))
}

/// The grammar of a JSON answer (`response_format`, `json_schema`): the schema, after a free
/// reasoning when thinking is open.
pub fn json_answer(schema: &Value, think: Think) -> String {
    let schema = bounded_json(schema);
    finish(format!("answer: %json {schema}\n"), "answer", think)
}

/// Free text after a bounded reasoning (`max_reasoning_chars` with nothing else asked).
pub fn free_answer(think: Think) -> String {
    finish(
        "answer: TEXT?\nTEXT: /(.|\\n)+/\n".to_string(),
        "answer",
        think,
    )
}

/// The start rule (with the free reasoning first when thinking is open) over `rules`.
fn finish(rules: String, top: &str, think: Think) -> String {
    let ws = "WS: /[ \\t\\r\\n]+/\n";
    if think.open {
        format!("start: think WS? {top}\n{}{ws}{rules}", think.rule())
    } else {
        format!("start: {top}\n{ws}{rules}")
    }
}

/// The permutations of `items` (all of them: `items` has at most [`MAX_PERMUTED`]).
fn permutations(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for (i, &x) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(i);
        for mut p in permutations(&rest) {
            p.insert(0, x);
            out.push(p);
        }
    }
    out
}

/// Qwen3-Coder / Qwen3.5 XML: strings raw up to `\n</parameter>`, other values JSON; the
/// required parameters in any order, then the optional ones in the schema's order.
fn xml(g: &mut String, callable: &[&Tool]) {
    g.push_str("call: \"<tool_call>\" call_tail\n");
    let fns: Vec<String> = (0..callable.len()).map(|i| format!("f{i}")).collect();
    g.push_str(&format!(
        "call_tail: \"\\n<function=\" ({}) \"</function>\\n</tool_call>\"\n",
        fns.join(" | ")
    ));
    g.push_str("str_value[lazy]: /(.|\\n)*\\n<\\/parameter>\\n/\n");
    for (i, t) in callable.iter().enumerate() {
        let params = t.params();
        let required = t.required();
        let mut req_idx = Vec::new();
        let mut optional = Vec::new();
        for (j, (name, schema)) in params.iter().enumerate() {
            let value = if t.is_string(name) {
                raw_string(g, schema, &format!("f{i}_p{j}_v"))
            } else {
                format!("%json {} \"\\n</parameter>\\n\"", bounded_json(schema))
            };
            g.push_str(&format!(
                "f{i}_p{j}: {} {value}\n",
                lit(&format!("<parameter={name}>\n"))
            ));
            if required.contains(name) {
                req_idx.push(j);
            } else {
                optional.push(j);
            }
        }
        let orders = if req_idx.len() <= MAX_PERMUTED {
            permutations(&req_idx)
        } else {
            vec![req_idx.clone()]
        };
        let alts: Vec<String> = orders
            .iter()
            .map(|o| {
                let mut s: Vec<String> = o.iter().map(|j| format!("f{i}_p{j}")).collect();
                s.extend(optional.iter().map(|j| format!("f{i}_p{j}?")));
                if s.is_empty() {
                    "\"\"".to_string()
                } else {
                    s.join(" ")
                }
            })
            .collect();
        g.push_str(&format!(
            "f{i}: {} ({})\n",
            lit(&format!("{}>\n", t.name)),
            alts.join(" | ")
        ));
    }
}

/// A raw string value up to `\n</parameter>\n`: one of its `enum`, at most `maxLength`
/// characters, or free (the shared lazy `str_value`).
fn raw_string(g: &mut String, schema: &Value, rule: &str) -> String {
    let end = "\"\\n</parameter>\\n\"";
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        let alts: Vec<String> = e.iter().filter_map(Value::as_str).map(lit).collect();
        if !alts.is_empty() {
            return format!("({}) {end}", alts.join(" | "));
        }
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
        let min = schema
            .get("minLength")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(max);
        g.push_str(&format!(
            "{rule}[lazy]: /(.|\\n){{{min},{max}}}\\n<\\/parameter>\\n/\n"
        ));
        return rule.to_string();
    }
    "str_value".to_string()
}

/// One call object: `{"name": NAME, KEY: ARGUMENTS}`, nothing else. The arguments take no
/// property the tool does not declare unless its schema sets `additionalProperties` (llama.cpp's
/// schema converter reads an absent `additionalProperties` so too): a small model otherwise
/// invents properties until `max_tokens`.
fn call_schema(t: &Tool, key: &str) -> Value {
    let mut args = t.parameters.clone();
    if let Some(o) = args.as_object_mut() {
        if o.contains_key("properties") || o.get("type") == Some(&json!("object")) {
            o.entry("additionalProperties").or_insert(json!(false));
        }
    }
    json!({
        "type": "object",
        "properties": {"name": {"const": t.name}, key: args},
        "required": ["name", key],
        "additionalProperties": false,
    })
}

/// Any one of the callable tools' call objects (not bounded: [`bounded_json`] goes on the
/// schema at the top of a `%json`).
fn any_call(callable: &[&Tool], key: &str) -> Value {
    json!({"anyOf": callable.iter().map(|t| call_schema(t, key)).collect::<Vec<_>>()})
}

/// Hermes 2 Pro / Qwen3: a JSON call object between `<tool_call>\n` and `\n</tool_call>`.
fn hermes(g: &mut String, callable: &[&Tool]) {
    g.push_str("call: \"<tool_call>\" call_tail\n");
    g.push_str(&format!(
        "call_tail: \"\\n\" %json {} \"\\n</tool_call>\"\n",
        bounded_json(&any_call(callable, "arguments"))
    ));
}

/// Llama 3.1+: one bare `{"name": …, "parameters": …}` object; text otherwise, not starting
/// with `{` (Meta's JSON tool-calling format:
/// <https://www.llama.com/docs/model-cards-and-prompt-formats/llama3_1/>).
fn llama3(g: &mut String, callable: &[&Tool]) {
    g.push_str(&format!(
        "call: %json {}\n",
        bounded_json(&any_call(callable, "parameters"))
    ));
}

/// The generic envelope (llama.cpp's generic format:
/// <https://github.com/ggml-org/llama.cpp/blob/master/docs/function-calling.md>).
pub fn generic_envelope(callable: &[&Tool], required: bool, parallel: bool) -> Value {
    let mut calls =
        json!({"type": "array", "items": any_call(callable, "arguments"), "minItems": 1});
    calls["maxItems"] = json!(if parallel {
        super::MAX_PARALLEL_CALLS
    } else {
        1
    });
    let with_calls = json!({"type": "object", "properties": {"tool_calls": calls},
                            "required": ["tool_calls"], "additionalProperties": false});
    if required {
        return with_calls;
    }
    let text = json!({"type": "object", "properties": {"response": {"type": "string"}},
                      "required": ["response"], "additionalProperties": false});
    json!({"anyOf": [with_calls, text]})
}
