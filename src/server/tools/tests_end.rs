//! Tool calls that end: the grammar bounds the calls of one answer, and an answer cut by
//! `max_tokens` gives its complete calls back as calls, the cut one dropped, never the
//! envelope as content, in every format, read whole or streamed.

use serde_json::json;

use super::parse::Reader;
use super::tests::{lark, ok, setup, stream};
use super::{Choice, Format, MAX_PARALLEL_CALLS};

fn reader(f: Format) -> Reader {
    Reader {
        tools: Some((f, setup(Choice::Required, true))),
        thinking_open: false,
        think_tags: false,
    }
}

const NOW_JSON: &str = r#"{"name": "now", "arguments": {}}"#;

/// The generic envelope of `n` calls to `now`.
fn envelope(n: usize) -> String {
    let items: Vec<&str> = std::iter::repeat_n(NOW_JSON, n).collect();
    format!("{{\"tool_calls\": [{}]}}", items.join(", "))
}

#[test]
fn parallel_calls_are_bounded_and_one_is_the_default() {
    let g = lark(&setup(Choice::Required, true), Format::Generic, false);
    assert!(ok(&g, &envelope(MAX_PARALLEL_CALLS)));
    assert!(!ok(&g, &envelope(MAX_PARALLEL_CALLS + 1)));
    let one = lark(&setup(Choice::Required, false), Format::Generic, false);
    assert!(ok(&one, &envelope(1)) && !ok(&one, &envelope(2)));
    let call = format!("<tool_call>\n{NOW_JSON}\n</tool_call>");
    let g = lark(&setup(Choice::Required, true), Format::Hermes, false);
    let calls = |n: usize| vec![call.as_str(); n].join("\n");
    assert!(ok(&g, &calls(MAX_PARALLEL_CALLS)));
    assert!(!ok(&g, &calls(MAX_PARALLEL_CALLS + 1)));
    let one = lark(&setup(Choice::Required, false), Format::Hermes, false);
    assert!(ok(&one, &calls(1)) && !ok(&one, &calls(2)));
}

#[test]
fn a_cut_call_is_dropped_and_the_complete_ones_kept() {
    let weather = r#"{"name": "get_weather", "arguments": {"city": "Par"#;
    let cases = [
        (
            Format::Generic,
            format!("{{\"tool_calls\": [{NOW_JSON}, {weather}"),
        ),
        (
            Format::Hermes,
            format!("<tool_call>\n{NOW_JSON}\n</tool_call>\n<tool_call>\n{weather}"),
        ),
        (
            Format::QwenXml,
            "<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n\
             <function=get_weather>\n<parameter=city>\nPar"
                .to_string(),
        ),
    ];
    for (f, text) in cases {
        let r = reader(f);
        for cut in [text.len(), text.len() - 3] {
            let t = &text[..cut];
            let whole = r.parse(t, false);
            assert_eq!(whole.content, "", "{f:?}: {t}");
            assert_eq!(whole.calls.len(), 1, "{f:?}: {whole:?}");
            assert_eq!(
                (whole.calls[0].name.as_str(), whole.calls[0].done),
                ("now", true)
            );
            let args: serde_json::Value = serde_json::from_str(&whole.calls[0].arguments)
                .unwrap_or_else(|e| panic!("{f:?}: {e}: {}", whole.calls[0].arguments));
            assert_eq!(args, json!({}));
            for step in [1, 7] {
                let (_, content, calls) = stream(&r, t, step);
                assert_eq!(content, "", "{f:?} streamed");
                assert_eq!(calls.len(), 1, "{f:?} streamed: {calls:?}");
                assert_eq!(calls[0].0, "now");
            }
        }
    }
    // Only a cut call: no call and no content.
    let r = reader(Format::Generic);
    let p = r.parse(&format!("{{\"tool_calls\": [{weather}"), false);
    assert!(p.calls.is_empty() && p.content.is_empty(), "{p:?}");
}

#[test]
fn a_cut_generic_response_keeps_its_text() {
    let r = Reader {
        tools: Some((Format::Generic, setup(Choice::Auto, false))),
        thinking_open: false,
        think_tags: false,
    };
    let p = r.parse(r#"{"response": "Hello,\n wor\u00e9ld and mo\u00"#, false);
    assert_eq!(p.content, "Hello,\n woréld and mo");
    assert!(p.calls.is_empty());
}

#[test]
fn a_think_the_model_opens_itself_is_reasoning() {
    let split = Reader {
        tools: None,
        thinking_open: false,
        think_tags: true,
    };
    let text = "<think>\nIt is 4.\n</think>\n\nThe answer is 4.";
    let p = split.parse(text, false);
    assert_eq!(
        (p.reasoning.as_str(), p.content.as_str()),
        ("\nIt is 4.\n", "The answer is 4.")
    );
    for step in [1, 3] {
        let (r, c, _) = stream(&split, text, step);
        assert_eq!(
            (r.as_str(), c.as_str()),
            ("\nIt is 4.\n", "The answer is 4.")
        );
    }
    // Not at the start, or not the tag: content as written.
    for t in ["So <think>x</think>", "<thin", "<b>x</b>"] {
        let p = split.parse(t, false);
        assert_eq!((p.reasoning.as_str(), p.content.as_str()), ("", t));
        assert_eq!(stream(&split, t, 1).1, t);
    }
    // reasoning_format none: nothing is split.
    let none = Reader {
        think_tags: false,
        ..split
    };
    assert_eq!(none.parse(text, false).content, text);
}

#[test]
fn arguments_take_only_declared_properties() {
    let g = lark(&setup(Choice::Required, false), Format::Generic, false);
    let with =
        |args: &str| format!(r#"{{"tool_calls": [{{"name": "now", "arguments": {args}}}]}}"#);
    assert!(ok(&g, &with("{}")));
    assert!(!ok(&g, &with(r#"{"required": []}"#)));
}
