//! The incremental [`Streamer`] held to the reading it replaces: for every reader and text,
//! piece sizes from 1 byte up, its deltas are exactly those of reading the whole text so far
//! again after every piece ([`Reader::parse`], partial, diffed against what was sent), and its
//! work is linear in the text (a long reasoning, content and many calls streamed a byte at a
//! time read each byte a bounded number of times; the re-reading read ~n²/2).

use serde_json::{json, Value};

use super::delta::{call_id, Streamer};
use super::parse::{Call, Parsed, Reader};
use super::tests::{setup, HERMES_CALL, XML_CALL, XML_SWAPPED};
use super::{Choice, Format};

/// The deltas of re-reading the whole text after each piece (what the streamer replaced).
fn reread(reader: &Reader, pieces: &[&str]) -> Vec<Value> {
    let ext = |sent: &str, now: &str| -> Option<String> {
        now.strip_prefix(sent)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let mut sent = Parsed::default();
    let mut text = String::new();
    let mut out = Vec::new();
    let n = pieces.len();
    for (k, p) in pieces.iter().chain([&""]).enumerate() {
        text.push_str(p);
        let now = reader.parse(&text, k < n);
        if let Some(r) = ext(&sent.reasoning, &now.reasoning) {
            out.push(json!({"reasoning_content": r}));
            sent.reasoning = now.reasoning.clone();
        }
        if sent.calls.is_empty() {
            if let Some(c) = ext(&sent.content, &now.content) {
                out.push(json!({"content": c}));
                sent.content = now.content.clone();
            }
        }
        // Calls only once ended (a cut one is never sent).
        for (i, call) in now.calls.iter().enumerate().take_while(|(_, c)| c.done) {
            if i == sent.calls.len() {
                out.push(
                    json!({"tool_calls": [{"index": i, "id": call_id("call_x", i),
                    "type": "function", "function": {"name": call.name, "arguments": ""}}]}),
                );
                sent.calls.push(Call {
                    name: call.name.clone(),
                    ..Default::default()
                });
            }
            let s = &mut sent.calls[i];
            if s.name != call.name {
                continue;
            }
            if let Some(a) = ext(&s.arguments, &call.arguments) {
                out.push(json!({"tool_calls": [{"index": i, "function": {"arguments": a}}]}));
                s.arguments = call.arguments.clone();
            }
        }
    }
    out
}

fn pieces(text: &str, step: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let mut j = (i + step).min(text.len());
        while !text.is_char_boundary(j) {
            j += 1;
        }
        out.push(&text[i..j]);
        i = j;
    }
    out
}

fn streamed(reader: &Reader, pieces: &[&str]) -> (Vec<Value>, usize) {
    let mut s = Streamer::new(reader.clone(), "call_x".into());
    let mut out = Vec::new();
    for p in pieces {
        out.extend(s.push(p));
    }
    out.extend(s.finish().0);
    (out, s.work())
}

fn readers() -> Vec<Reader> {
    let mut out = Vec::new();
    for (thinking_open, think_tags) in [(false, false), (true, false), (false, true)] {
        out.push(Reader {
            tools: None,
            thinking_open,
            think_tags,
        });
        for f in [
            Format::QwenXml,
            Format::Hermes,
            Format::Llama3,
            Format::Generic,
        ] {
            out.push(Reader {
                tools: Some((f, setup(Choice::Auto, true))),
                thinking_open,
                think_tags,
            });
        }
    }
    out
}

#[test]
fn the_streamer_sends_what_rereading_sent() {
    let texts = [
        format!("Plan: call it.\n</think>\n\nOne moment.\n\n{XML_CALL}\n{XML_SWAPPED}"),
        format!("Hm </thi </think>   \n Sure <tool_ \n{HERMES_CALL}\n  {HERMES_CALL}\nbye"),
        r#"{"name": "get_weather", "parameters": {"city": "Rome", "days": 1}}"#.to_string(),
        r#"  </think>{"tool_calls": [{"name": "now", "arguments": {}}]}"#.to_string(),
        "Déjà vu – naïve 🙂 text\n\n  with trailing space  ".to_string(),
        format!("{XML_CALL}{XML_CALL}<tool_call>\n<function=now>\n"),
        format!(" \n<think>Plan </thi it.</think>\n\nOne moment.\n{HERMES_CALL}\n{XML_CALL}"),
        "<think>only reasoning, cut".to_string(),
        "<thin".to_string(),
        "<thinking about it".to_string(),
        String::new(),
    ];
    for reader in readers() {
        for text in &texts {
            for step in [1, 2, 3, 5, 11, 64, 4096] {
                let p = pieces(text, step);
                let (got, _) = streamed(&reader, &p);
                assert_eq!(got, reread(&reader, &p), "{reader:?} step {step}: {text:?}");
            }
        }
    }
}

/// A long answer: `n` sentences of reasoning, `n` of content, `n / 20` calls.
fn long_answer(n: usize) -> String {
    let mut text = "I think about the weather. ".repeat(n);
    text.push_str("</think>\n");
    text.push_str(&"Here is what I found. ".repeat(n));
    text.push('\n');
    for _ in 0..n / 20 {
        text.push_str(XML_CALL);
        text.push('\n');
    }
    text
}

#[test]
fn the_streamer_reads_each_byte_a_bounded_number_of_times() {
    let reader = Reader {
        tools: Some((Format::QwenXml, setup(Choice::Auto, true))),
        thinking_open: true,
        think_tags: false,
    };
    let work = |n: usize| {
        let text = long_answer(n);
        let (_, work) = streamed(&reader, &pieces(&text, 1));
        (text.len(), work)
    };
    let (len1, w1) = work(2000);
    let (len2, w2) = work(4000);
    eprintln!("{w1} bytes read for {len1}, {w2} for {len2}");
    // Twice the text, twice the work (re-reading the whole text after each byte: four times).
    // Measured: 2 449 781 bytes read for 112 710 and 4 904 381 for 225 410 (×2.00, 21.8 per
    // byte: each ~130-byte call is read again while it and the next call's head are being
    // generated, the rest a few times).
    let ratio = w2 as f64 / w1 as f64;
    assert!(
        ratio < 2.1,
        "{w1} bytes read for {len1}, {w2} for {len2}: ×{ratio:.2}"
    );
    assert!(w2 < 25 * len2, "{w2} bytes read for a {len2}-byte text");
}
