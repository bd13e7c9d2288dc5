//! Streaming a [`Reader`]'s reading as OpenAI chat deltas: only what extends what was sent
//! goes out: new reasoning, new content, and each call once its text has ended (its first delta
//! carries `index`, `id`, `type` and the name, with empty arguments, the next its arguments): a
//! call cut by `max_tokens` is never sent. Nothing sent is ever taken back; a reading that does
//! not extend what was sent (text no grammar held) sends nothing more for that part.
//!
//! The reading is incremental, as [`Reader::parse`] of the whole text so far would give it
//! (partial): markers (`<think>`, `</think>`, `<tool_call>`) are looked for only in the new
//! text (and the few bytes before it a marker may straddle), reasoning and content are sent as
//! byte ranges of the text, and calls that ended are kept: only the call being generated is
//! read again from its start. The work of a response is linear in its text but for that call.

use serde_json::{json, Value};

use super::parse::{
    calls_after_marker, json_call, safe_len, Call, Parsed, Reader, CALL, THINK_END, THINK_START,
};
use super::Format;

/// What was sent so far of one response, and where its reading stands.
#[derive(Debug)]
pub struct Streamer {
    reader: Reader,
    text: String,
    /// Calls sent (name and the arguments sent); reasoning and content are `sent_*` bytes.
    sent: Parsed,
    /// Where the reasoning starts: 0, or past a `<think>` the model opened itself.
    reason_at: usize,
    /// Bytes of reasoning sent (`text[reason_at..sent_reasoning]`).
    sent_reasoning: usize,
    /// The answer may still open with `<think>` (`think_tags`, not yet decided).
    may_think: bool,
    /// Bytes of content sent (from the body's start).
    sent_content: usize,
    /// Where `</think>` and `<tool_call>` are looked for from.
    scan: usize,
    /// Where the text after the reasoning starts (`None` while reasoning): the first byte past
    /// the whitespace after `</think>` once one came (`fixed`), else how far that went.
    body: Option<Body>,
    /// Where the calls' text starts (after the first `<tool_call>`), once it came.
    calls_from: Option<usize>,
    /// The calls that ended before `calls_from` (moved on past them), and how many of them
    /// were diffed since they ended (their deltas are all out).
    frozen: Vec<Call>,
    settled: usize,
    /// Bytes the reader went through (what tests hold to the text's length).
    work: usize,
    /// The prefix of call ids (`call_…`); call `i` is `{prefix}_{i}`.
    id_prefix: String,
}

#[derive(Debug, Clone, Copy)]
struct Body {
    at: usize,
    fixed: bool,
}

/// The id of call `index` of a response.
pub fn call_id(prefix: &str, index: usize) -> String {
    format!("{prefix}_{index}")
}

/// The part of `now` past `sent`, when `now` extends it.
fn extension<'a>(sent: &str, now: &'a str) -> Option<&'a str> {
    now.strip_prefix(sent).filter(|s| !s.is_empty())
}

/// The char boundary at or below `i`.
fn floor(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl Streamer {
    pub fn new(reader: Reader, id_prefix: String) -> Streamer {
        let body = (!reader.thinking_open).then_some(Body { at: 0, fixed: true });
        let may_think = !reader.thinking_open && reader.think_tags;
        Streamer {
            reader,
            text: String::new(),
            sent: Parsed::default(),
            reason_at: 0,
            sent_reasoning: 0,
            may_think,
            sent_content: 0,
            scan: 0,
            body,
            calls_from: None,
            frozen: Vec::new(),
            settled: 0,
            work: 0,
            id_prefix,
        }
    }

    /// Bytes the reader has gone through so far.
    pub fn work(&self) -> usize {
        self.work
    }

    /// The deltas that `piece` of generated text adds.
    pub fn push(&mut self, piece: &str) -> Vec<Value> {
        let old = self.text.len();
        self.text.push_str(piece);
        self.work += piece.len();
        let mut out = Vec::new();
        if self.may_think {
            let t = self.text.trim_start();
            self.work += t.len().min(THINK_START.len());
            if t.starts_with(THINK_START) {
                // The model opened its reasoning itself.
                self.may_think = false;
                self.reason_at = self.text.len() - t.len() + THINK_START.len();
                self.sent_reasoning = self.reason_at;
                self.body = None;
            } else if THINK_START.starts_with(t) {
                // It may still become `<think>`.
                return out;
            } else {
                self.may_think = false;
            }
        }
        if self.body.is_none() {
            self.reasoning(old, &mut out);
        }
        let Some(body) = self.body_start() else {
            return out;
        };
        let calls = match self.reader.tools.as_ref().map(|(f, _)| *f) {
            None => {
                self.content(body, self.text.len(), &mut out);
                Vec::new()
            }
            Some(Format::QwenXml | Format::Hermes) => self.marked(body, old, &mut out),
            Some(Format::Llama3) if self.text[body..].starts_with('{') => {
                self.work += self.text.len() - body;
                json_call(&self.text[body..], true, "parameters")
                    .map(|(c, _)| vec![c])
                    .unwrap_or_default()
            }
            Some(Format::Llama3) => {
                self.content(body, self.text.len(), &mut out);
                Vec::new()
            }
            // The generic envelope is read whole, at the end.
            Some(Format::Generic) => Vec::new(),
        };
        // Calls that ended since the last piece, then the one being read.
        let frozen = std::mem::take(&mut self.frozen);
        self.diff_calls(self.settled, &frozen[self.settled..], &mut out);
        self.settled = frozen.len();
        self.frozen = frozen;
        self.diff_calls(self.settled, &calls, &mut out);
        out
    }

    /// While reasoning: the reasoning up to `</think>` (or what cannot be part of one).
    fn reasoning(&mut self, old: usize, out: &mut Vec<Value>) {
        let from = floor(
            &self.text,
            old.saturating_sub(THINK_END.len() - 1).max(self.reason_at),
        );
        self.work += self.text.len() - from;
        let end = match self.text[from..].find(THINK_END) {
            Some(i) => {
                self.body = Some(Body {
                    at: from + i + THINK_END.len(),
                    fixed: false,
                });
                from + i
            }
            None => safe_len(&self.text, THINK_END).max(self.reason_at),
        };
        if end > self.sent_reasoning {
            out.push(json!({"reasoning_content": &self.text[self.sent_reasoning..end]}));
            self.sent_reasoning = end;
        }
    }

    /// Where the text after the reasoning starts, once past the whitespace after `</think>`.
    fn body_start(&mut self) -> Option<usize> {
        let b = self.body.as_mut()?;
        if !b.fixed {
            let rest = &self.text[b.at..];
            let ws = rest.len() - rest.trim_start().len();
            self.work += ws;
            b.at += ws;
            b.fixed = b.at < self.text.len();
            self.scan = b.at;
        }
        b.fixed.then_some(b.at)
    }

    /// Content `text[body..end]`, trailing whitespace held back; sent only before any call.
    fn content(&mut self, body: usize, end: usize, out: &mut Vec<Value>) {
        let shown = self.text[body..end].trim_end();
        if self.sent.calls.is_empty() && shown.len() > self.sent_content {
            out.push(json!({"content": &shown[self.sent_content..]}));
            self.sent_content = shown.len();
        }
    }

    /// Content up to the first `<tool_call>`, then the calls after it.
    fn marked(&mut self, body: usize, old: usize, out: &mut Vec<Value>) -> Vec<Call> {
        if self.calls_from.is_none() {
            let from = floor(
                &self.text,
                old.saturating_sub(CALL.len() - 1).max(self.scan),
            );
            self.work += self.text.len() - from;
            match self.text[from..].find(CALL) {
                Some(i) => {
                    self.content(body, from + i, out);
                    self.calls_from = Some(from + i + CALL.len());
                }
                None => {
                    let end = body + safe_len(&self.text[body..], CALL);
                    self.content(body, end, out);
                    return Vec::new();
                }
            }
        }
        let Some(at) = self.calls_from else {
            return Vec::new();
        };
        let Some((format, setup)) = &self.reader.tools else {
            return Vec::new();
        };
        let (mut calls, mut starts) = (Vec::new(), Vec::new());
        self.work += self.text.len() - at;
        calls_after_marker(
            &self.text[at..],
            true,
            setup,
            &mut calls,
            *format,
            &mut starts,
        );
        // Every call but the last has ended: keep them, and read on from the last one.
        if calls.len() > 1 {
            let last = calls.len() - 1;
            self.calls_from = Some(at + starts[last]);
            self.frozen.extend(calls.drain(..last));
        }
        calls
    }

    /// The last deltas, once the generation ended, and the whole reading.
    pub fn finish(&mut self) -> (Vec<Value>, Parsed) {
        let now = self.reader.parse(&self.text, false);
        self.sent.reasoning = self.text[self.reason_at..self.sent_reasoning].to_string();
        self.sent.content = match self.body {
            Some(b) if b.fixed => self.text[b.at..b.at + self.sent_content].to_string(),
            _ => String::new(),
        };
        let mut out = Vec::new();
        if let Some(r) = extension(&self.sent.reasoning, &now.reasoning) {
            out.push(json!({"reasoning_content": r}));
        }
        // Content only before the first call: after one, late content would reorder the message.
        if self.sent.calls.is_empty() {
            if let Some(c) = extension(&self.sent.content, &now.content) {
                out.push(json!({"content": c}));
            }
        }
        self.diff_calls(0, &now.calls, &mut out);
        (out, now)
    }

    /// The deltas of `calls` (calls `first..` of the reading) past what was sent.
    fn diff_calls(&mut self, first: usize, calls: &[Call], out: &mut Vec<Value>) {
        // Calls only once ended: one cut at the end is dropped (see `parse`).
        for (i, call) in (first..).zip(calls).take_while(|(_, c)| c.done) {
            if i == self.sent.calls.len() {
                out.push(json!({"tool_calls": [{
                    "index": i,
                    "id": call_id(&self.id_prefix, i),
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }]}));
                self.sent.calls.push(Call {
                    name: call.name.clone(),
                    ..Default::default()
                });
            }
            let Some(sent) = self.sent.calls.get_mut(i) else {
                break;
            };
            if sent.name != call.name {
                continue;
            }
            if let Some(a) = extension(&sent.arguments, &call.arguments) {
                out.push(json!({"tool_calls": [{"index": i, "function": {"arguments": a}}]}));
                sent.arguments = call.arguments.clone();
            }
        }
    }
}

/// The `message` of a whole answer: content (null when empty and calls were made),
/// `reasoning_content` when any, `tool_calls` when any.
pub fn message(p: &Parsed, id_prefix: &str) -> Value {
    let mut m = json!({"role": "assistant", "content": p.content});
    if p.content.is_empty() && !p.calls.is_empty() {
        m["content"] = Value::Null;
    }
    if !p.reasoning.is_empty() {
        m["reasoning_content"] = json!(p.reasoning);
    }
    if !p.calls.is_empty() {
        m["tool_calls"] = p
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"id": call_id(id_prefix, i), "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
    }
    m
}
