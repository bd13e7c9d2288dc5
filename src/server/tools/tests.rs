//! The tool grammars held to llguidance's own matcher (texts in each format's documented
//! spelling are accepted, wrong ones refused), and the reader and streamer held to the
//! calls those texts spell.

use serde_json::{json, Value};

use super::delta::Streamer;
use super::grammar::Think;
use super::parse::{Parsed, Reader};
use super::{grammar, parse, Choice, Format, ToolSetup};
use crate::grammar::GrammarSpec;
use crate::server::error::ApiError;
use crate::server::structured::{accepts, random_walk};

fn setup(choice: Choice, parallel: bool) -> ToolSetup {
    let body = json!({"tools": [
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                           "units": {"enum": ["c", "f"]}},
            "required": ["city", "days"]}}},
        {"type": "function", "function": {"name": "now"}}
    ]});
    let mut s = super::parse(body.as_object().unwrap()).unwrap().unwrap();
    s.choice = choice;
    s.parallel = parallel;
    s
}

fn lark(s: &ToolSetup, f: Format, open: bool) -> GrammarSpec {
    let think = Think { open, budget: None };
    GrammarSpec::Lark(grammar::tools(s, f, think).unwrap())
}

fn ok(g: &GrammarSpec, text: &str) -> bool {
    match accepts(g, text) {
        Ok(b) => b,
        Err(e) => panic!("grammar does not compile: {e}\n{g:?}"),
    }
}

/// The Qwen3.5 template's spelling of a call.
const XML_CALL: &str = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis, \"FR\"\n\
                        on two lines\n</parameter>\n<parameter=days>\n3\n</parameter>\n\
                        </function>\n</tool_call>";
const XML_SWAPPED: &str =
    "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n\
                           <parameter=city>\nOslo\n</parameter>\n<parameter=units>\nc\n\
                           </parameter>\n</function>\n</tool_call>";
const XML_NOW: &str = "<tool_call>\n<function=now>\n</function>\n</tool_call>";

#[test]
fn qwen_xml_required_takes_calls_in_the_template_spelling_only() {
    let g = lark(&setup(Choice::Required, true), Format::QwenXml, false);
    for t in [XML_CALL, XML_SWAPPED, XML_NOW] {
        assert!(ok(&g, t), "{t}");
    }
    assert!(ok(&g, &format!("{XML_CALL}\n{XML_NOW}")));
    for bad in [
        "Sure!",
        &format!("Sure! {XML_CALL}"),
        // `days` is required.
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n</function>\n</tool_call>",
        // `days` is an integer.
        &XML_CALL.replace("\n3\n", "\nthree\n"),
        &XML_CALL.replace("get_weather", "get_time"),
        &XML_SWAPPED.replace("\nc\n", "\nk\n"),
    ] {
        assert!(!ok(&g, bad), "{bad}");
    }
    let one = lark(&setup(Choice::Required, false), Format::QwenXml, false);
    assert!(ok(&one, XML_CALL));
    assert!(!ok(&one, &format!("{XML_CALL}\n{XML_NOW}")));
}

#[test]
fn qwen_xml_auto_lets_text_run_until_a_call_and_thinking_stays_free() {
    let g = lark(&setup(Choice::Auto, true), Format::QwenXml, false);
    assert!(ok(&g, "It is sunny, no call needed."));
    assert!(ok(&g, &format!("Let me check.\n\n{XML_CALL}")));
    assert!(!ok(&g, "Let me check. <tool_call>\n<function=rm_rf>\n"));
    let t = lark(&setup(Choice::Required, true), Format::QwenXml, true);
    assert!(ok(
        &t,
        &format!("I think <tool_call> is needed.\n</think>\n\n{XML_CALL}")
    ));
    assert!(!ok(&t, "thinking\n</think>\n\nplain text"));
    let bounded = Think {
        open: true,
        budget: Some(8),
    };
    let b = GrammarSpec::Lark(
        grammar::tools(&setup(Choice::Required, true), Format::QwenXml, bounded).unwrap(),
    );
    assert!(ok(&b, &format!("short\n</think>\n\n{XML_NOW}")));
    assert!(!ok(
        &b,
        &format!("much longer thought\n</think>\n\n{XML_NOW}")
    ));
    assert!(grammar::tools(
        &setup(Choice::None, true),
        Format::QwenXml,
        Think::default()
    )
    .is_none());
}

const HERMES_CALL: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
                           {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>";

#[test]
fn hermes_llama3_and_generic_take_their_json() {
    let g = lark(&setup(Choice::Required, true), Format::Hermes, false);
    assert!(ok(&g, HERMES_CALL));
    assert!(!ok(&g, &HERMES_CALL.replace("2}", "\"2\"}")));
    let a = lark(&setup(Choice::Auto, true), Format::Hermes, false);
    assert!(ok(&a, &format!("Checking.\n{HERMES_CALL}")));
    assert!(ok(&a, "No tools today."));
    let l = lark(&setup(Choice::Auto, false), Format::Llama3, false);
    let call = r#"{"name": "get_weather", "parameters": {"city": "Rome", "days": 1}}"#;
    assert!(ok(&l, call));
    assert!(ok(&l, "Hello there."));
    assert!(!ok(
        &l,
        r#"{"name": "get_weather", "parameters": {"city": "Rome"}}"#
    ));
    let r = lark(&setup(Choice::Required, false), Format::Generic, false);
    let env = r#"{"tool_calls": [{"name": "now", "arguments": {}}]}"#;
    assert!(ok(&r, env));
    assert!(!ok(&r, r#"{"response": "hi"}"#));
    let a = lark(&setup(Choice::Auto, false), Format::Generic, false);
    assert!(ok(&a, r#"{"response": "hi"}"#));
    assert!(!ok(
        &a,
        r#"{"tool_calls": [{"name": "now", "arguments": {}}, {"name": "now", "arguments": {}}]}"#
    ));
}

/// Streams `text` a few bytes at a time; returns the assembled (reasoning, content, calls as
/// (name, arguments)) and checks every call's first delta carries index, id and name.
fn stream(reader: &Reader, text: &str, step: usize) -> (String, String, Vec<(String, String)>) {
    let mut s = Streamer::new(reader.clone(), "call_x".into());
    let mut deltas = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let mut j = (i + step).min(text.len());
        while !text.is_char_boundary(j) {
            j += 1;
        }
        deltas.extend(s.push(&text[i..j]));
        i = j;
    }
    deltas.extend(s.finish().0);
    let (mut r, mut c, mut calls) = (String::new(), String::new(), Vec::<(String, String)>::new());
    for d in deltas {
        r.push_str(d["reasoning_content"].as_str().unwrap_or(""));
        c.push_str(d["content"].as_str().unwrap_or(""));
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                assert!(
                    tc["id"].is_string() && tc["function"]["name"].is_string(),
                    "{tc}"
                );
                assert_eq!(
                    tc["function"]["arguments"], "",
                    "the first delta carries no arguments"
                );
                calls.push((
                    tc["function"]["name"].as_str().unwrap().into(),
                    String::new(),
                ));
            }
            calls[i]
                .1
                .push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    (r, c, calls)
}

fn args(p: &Parsed, i: usize) -> Value {
    serde_json::from_str(&p.calls[i].arguments).unwrap()
}

#[test]
fn calls_are_read_back_whole_and_streamed_without_retraction() {
    let xml = Reader {
        tools: Some((Format::QwenXml, setup(Choice::Auto, true))),
        thinking_open: true,
    };
    let text = format!("Plan: call it.\n</think>\n\nOne moment.\n\n{XML_CALL}\n{XML_SWAPPED}");
    let whole = xml.parse(&text, false);
    assert_eq!(whole.reasoning, "Plan: call it.\n");
    assert_eq!(whole.content, "One moment.");
    assert_eq!(whole.calls.len(), 2);
    assert_eq!(
        args(&whole, 0),
        json!({"city": "Paris, \"FR\"\non two lines", "days": 3})
    );
    assert_eq!(
        args(&whole, 1),
        json!({"days": 3, "city": "Oslo", "units": "c"})
    );
    let hermes = Reader {
        tools: Some((Format::Hermes, setup(Choice::Auto, true))),
        thinking_open: false,
    };
    let h = hermes.parse(&format!("{HERMES_CALL}\n{HERMES_CALL}"), false);
    assert_eq!(h.calls.len(), 2);
    assert_eq!(args(&h, 1), json!({"city": "Paris", "days": 2}));
    let llama = Reader {
        tools: Some((Format::Llama3, setup(Choice::Auto, true))),
        thinking_open: false,
    };
    let l = llama.parse(r#"{"name": "now", "parameters": {}}"#, false);
    assert_eq!((l.calls[0].name.as_str(), args(&l, 0)), ("now", json!({})));
    let generic = Reader {
        tools: Some((Format::Generic, setup(Choice::Auto, true))),
        thinking_open: false,
    };
    let g = generic.parse(
        r#"{"tool_calls": [{"name": "now", "arguments": {"a": 1}}]}"#,
        false,
    );
    assert_eq!(args(&g, 0), json!({"a": 1}));
    assert_eq!(generic.parse(r#"{"response": "hi"}"#, false).content, "hi");
    for (reader, text) in [
        (&xml, text.as_str()),
        (&hermes, &format!("Sure.\n{HERMES_CALL}\n{HERMES_CALL}")),
        (
            &llama,
            r#"{"name": "get_weather", "parameters": {"city": "Rome", "days": 1}}"#,
        ),
        (
            &generic,
            r#"{"tool_calls": [{"name": "now", "arguments": {}}]}"#,
        ),
    ] {
        let whole = reader.parse(text, false);
        for step in [1, 3, 7, 64] {
            let (r, c, calls) = stream(reader, text, step);
            assert_eq!((&r, &c), (&whole.reasoning, &whole.content), "step {step}");
            assert_eq!(calls.len(), whole.calls.len(), "step {step}: {text}");
            for (i, (name, a)) in calls.iter().enumerate() {
                assert_eq!(name, &whole.calls[i].name);
                assert_eq!(a, &whole.calls[i].arguments, "step {step}");
                serde_json::from_str::<Value>(a).unwrap();
            }
        }
    }
}

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
    assert_eq!(
        (s.choice.clone(), s.allowed.len(), s.parallel),
        (Choice::Auto, 2, true)
    );
    let s = req(json!({"tools": t, "tool_choice": "required", "parallel_tool_calls": false}))
        .unwrap()
        .unwrap();
    assert_eq!((s.choice, s.parallel), (Choice::Required, false));
    let named = json!({"type": "function", "function": {"name": "now"}});
    let s = req(json!({"tools": t, "tool_choice": named}))
        .unwrap()
        .unwrap();
    assert_eq!(
        (s.choice, s.allowed),
        (Choice::Required, vec!["now".to_string()])
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
