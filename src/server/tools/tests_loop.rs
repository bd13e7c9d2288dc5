//! The tool formats in a loop: the preset template renders calls the grammar takes back,
//! random walks under each grammar read back as valid calls, and the request side
//! (`tools`, `tool_choice`, `parallel_tool_calls`, format detection).

use serde_json::{json, Value};

use super::grammar::Think;
use super::parse::Reader;
use super::tests::{lark, ok, setup, stream};
use super::{grammar, parse, Choice, Format, ToolSetup};
use crate::grammar::GrammarSpec;
use crate::server::error::ApiError;
use crate::server::structured::tests::random_walk;

/// The Qwen3.5-style preset template writes an assistant's calls back in exactly the spelling
/// the grammar takes and the reader reads (a multi-turn loop sees its own calls again).
#[test]
fn the_preset_template_renders_calls_the_grammar_takes_back() {
    use crate::tokenizer::{ChatMessage, ChatTemplate};
    let src = crate::model::presets::chat_template("qwen35-tiny-tools-f32").unwrap();
    assert_eq!(Format::detect(src), Format::QwenXml);
    let t = ChatTemplate::new(src, "", "<|im_end|>").unwrap();
    let s = setup(Choice::Required, true);
    let tools: Vec<&Value> = s.tools.iter().map(|t| &t.raw).collect();
    let args = json!({"city": "Paris", "days": 3, "units": "c"});
    let mut assistant = ChatMessage::new("assistant", "");
    assistant.tool_calls = Some(json!([{"id": "c0", "type": "function",
        "function": {"name": "get_weather", "arguments": args}},
        {"id": "c1", "type": "function", "function": {"name": "now", "arguments": {}}}]));
    let mut result = ChatMessage::new("tool", "sunny");
    result.tool_call_id = Some("c0".into());
    let msgs = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Weather in Paris?"),
        assistant,
        result,
        ChatMessage::new("tool", "12:00"),
    ];
    let kw = |on: bool| {
        vec![
            (
                "tools",
                minijinja::Value::from(minijinja::value::Serde(&tools)),
            ),
            ("enable_thinking", minijinja::Value::from(on)),
        ]
    };
    let text = t.render_with(&msgs, true, &kw(false)).unwrap();
    assert!(
        text.contains("<tools>\n{\"function\": {\"name\": \"get_weather\""),
        "{text}"
    );
    assert!(text.contains("<tool_response>\nsunny\n</tool_response>\n<tool_response>\n12:00"));
    assert!(text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    assert!(t
        .render_with(&msgs, true, &kw(true))
        .unwrap()
        .ends_with("assistant\n<think>\n"));
    let turn = text.split("<|im_start|>assistant\n").nth(1).unwrap();
    let calls = turn.split("<|im_end|>").next().unwrap();
    let g = lark(&s, Format::QwenXml, false);
    assert!(ok(&g, calls), "{calls}");
    let reader = Reader {
        tools: Some((Format::QwenXml, s)),
        thinking_open: false,
        think_tags: false,
    };
    let p = reader.parse(calls, false);
    assert_eq!(p.calls.len(), 2);
    assert_eq!(
        serde_json::from_str::<Value>(&p.calls[0].arguments).unwrap(),
        args
    );
}

// The request side: `tools`, `tool_choice`, `parallel_tool_calls`, and format detection.

fn req(v: Value) -> Result<Option<ToolSetup>, ApiError> {
    parse(v.as_object().unwrap())
}

fn weather() -> Value {
    json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}})
}

#[test]
fn choices_follow_openai_spellings() {
    let t = json!([weather(), {"type": "function", "function": {"name": "now"}}]);
    let s = req(json!({"tools": t})).unwrap().unwrap();
    // llama-server's default: one call.
    assert_eq!(
        (s.choice.clone(), s.allowed.len(), s.parallel),
        (Choice::Auto, 2, false)
    );
    let s = req(json!({"tools": t, "tool_choice": "required", "parallel_tool_calls": false}))
        .unwrap()
        .unwrap();
    assert_eq!((s.choice, s.parallel), (Choice::Required, false));
    let named = json!({"type": "function", "function": {"name": "now"}});
    let s = req(json!({"tools": t, "tool_choice": named, "parallel_tool_calls": true}))
        .unwrap()
        .unwrap();
    // A named function is called exactly once, parallel or not.
    assert_eq!(
        (s.choice, s.allowed, s.parallel),
        (Choice::Required, vec!["now".to_string()], false)
    );
    let allowed = json!({"type": "allowed_tools", "allowed_tools": {"mode": "auto",
        "tools": [{"type": "function", "function": {"name": "get_weather"}}]}});
    let s = req(json!({"tools": t, "tool_choice": allowed}))
        .unwrap()
        .unwrap();
    assert_eq!(s.callable().len(), 1);
    assert!(s.tool("get_weather").unwrap().is_string("city"));
}

#[test]
fn refusals_name_the_field() {
    let t = json!([weather()]);
    for (body, param) in [
        (
            json!({"tools": t, "tool_choice": {"type": "function",
            "function": {"name": "nope"}}}),
            "tool_choice",
        ),
        (
            json!({"tools": t, "tool_choice": "sometimes"}),
            "tool_choice",
        ),
        (json!({"tools": [{"type": "code_interpreter"}]}), "tools[0]"),
        (json!({"tools": [weather(), weather()]}), "tools"),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (
            json!({"tools": t, "parallel_tool_calls": 1}),
            "parallel_tool_calls",
        ),
    ] {
        let e = req(body).unwrap_err();
        assert_eq!(e.param.as_deref(), Some(param), "{e:?}");
    }
}

#[test]
fn formats_are_detected_from_template_markers() {
    let qwen = "{{'<tool_call>\\n<function=' + n + '>\\n<parameter=' + p }}";
    assert_eq!(Format::detect(qwen), Format::QwenXml);
    assert_eq!(
        Format::detect("<tool_call>\\n{{ tc | tojson }}"),
        Format::Hermes
    );
    assert_eq!(
        Format::detect("<|start_header_id|>ipython{% if tools %}"),
        Format::Llama3
    );
    assert_eq!(
        Format::detect("<|im_start|>{{ m.content }}"),
        Format::Generic
    );
}

/// What a random-weight model writes under each format's grammar (random walks over the masks)
/// is read back into calls of allowed tools whose arguments are JSON objects with every
/// required parameter, and the stream of it assembles to the same calls.
#[test]
fn random_walks_under_the_grammars_read_back_as_valid_calls() {
    let bounded = json!({"tools": [
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                           "days": {"type": "integer", "minimum": 1, "maximum": 7},
                           "metric": {"type": "boolean"}},
            "required": ["city", "days"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {
            "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
            "required": ["zone"], "additionalProperties": false}}}
    ], "tool_choice": "required", "parallel_tool_calls": false});
    let s = super::parse(bounded.as_object().unwrap()).unwrap().unwrap();
    for format in [
        Format::QwenXml,
        Format::Hermes,
        Format::Llama3,
        Format::Generic,
    ] {
        for open in [false, true] {
            let think = Think {
                open,
                budget: Some(24),
            };
            let g = GrammarSpec::Lark(grammar::tools(&s, format, think).unwrap());
            let reader = Reader {
                tools: Some((format, s.clone())),
                thinking_open: open,
                think_tags: false,
            };
            for seed in 0..12 {
                let text = random_walk(&g, seed, 4000)
                    .unwrap_or_else(|e| panic!("{format:?} open={open} seed {seed}: {e}"));
                let p = reader.parse(&text, false);
                assert_eq!(
                    p.calls.len(),
                    1,
                    "{format:?} {open} {seed}: {text:?} -> {p:?}"
                );
                let call = &p.calls[0];
                let tool = s.tool(&call.name).unwrap_or_else(|| panic!("{text:?}"));
                let a: Value = serde_json::from_str(&call.arguments)
                    .unwrap_or_else(|e| panic!("{e}: {text:?} -> {call:?}"));
                for r in tool.required() {
                    assert!(a.get(r).is_some(), "{r} missing: {text:?} -> {a}");
                }
                let (_, c, calls) = stream(&reader, &text, 1 + seed as usize % 5);
                assert_eq!(c, p.content);
                assert_eq!(calls, vec![(call.name.clone(), call.arguments.clone())]);
            }
        }
    }
}
