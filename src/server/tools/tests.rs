//! The tool grammars held to llguidance's own matcher (texts in each format's documented
//! spelling are accepted, wrong ones refused), and the reader and streamer held to the
//! calls those texts spell.

use serde_json::{json, Value};

use super::delta::Streamer;
use super::grammar::Think;
use super::parse::{Parsed, Reader};
use super::{grammar, Choice, Format, ToolSetup};
use crate::grammar::GrammarSpec;
use crate::server::structured::tests::accepts;

pub(super) fn setup(choice: Choice, parallel: bool) -> ToolSetup {
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

pub(super) fn lark(s: &ToolSetup, f: Format, open: bool) -> GrammarSpec {
    let think = Think { open, budget: None };
    GrammarSpec::Lark(grammar::tools(s, f, think).unwrap())
}

pub(super) fn ok(g: &GrammarSpec, text: &str) -> bool {
    match accepts(g, text) {
        Ok(b) => b,
        Err(e) => panic!("grammar does not compile: {e}\n{g:?}"),
    }
}

/// The Qwen3.5 template's spelling of a call.
pub(super) const XML_CALL: &str =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis, \"FR\"\n\
                        on two lines\n</parameter>\n<parameter=days>\n3\n</parameter>\n\
                        </function>\n</tool_call>";
pub(super) const XML_SWAPPED: &str =
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

pub(super) const HERMES_CALL: &str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
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
pub(super) fn stream(
    reader: &Reader,
    text: &str,
    step: usize,
) -> (String, String, Vec<(String, String)>) {
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
        think_tags: false,
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
        think_tags: false,
    };
    let h = hermes.parse(&format!("{HERMES_CALL}\n{HERMES_CALL}"), false);
    assert_eq!(h.calls.len(), 2);
    assert_eq!(args(&h, 1), json!({"city": "Paris", "days": 2}));
    let llama = Reader {
        tools: Some((Format::Llama3, setup(Choice::Auto, true))),
        thinking_open: false,
        think_tags: false,
    };
    let l = llama.parse(r#"{"name": "now", "parameters": {}}"#, false);
    assert_eq!((l.calls[0].name.as_str(), args(&l, 0)), ("now", json!({})));
    let generic = Reader {
        tools: Some((Format::Generic, setup(Choice::Auto, true))),
        thinking_open: false,
        think_tags: false,
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
