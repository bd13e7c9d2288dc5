//! Streaming a [`Reader`]'s reading as OpenAI chat deltas. After each piece of text the whole
//! output so far is read again (partial) and only what extends what was sent goes out: new
//! reasoning, new content, and each call once its text has ended (its first delta carries
//! `index`, `id`, `type` and the name, with empty arguments, the next its arguments): a call
//! cut by `max_tokens` is never sent. Nothing sent is ever taken back; a reading that does not
//! extend what was sent (text no grammar held) sends nothing more for that part.

use serde_json::{json, Value};

use super::parse::{Parsed, Reader};

/// What was sent so far of one response.
#[derive(Debug)]
pub struct Streamer {
    reader: Reader,
    text: String,
    sent: Parsed,
    /// The prefix of call ids (`call_…`); call `i` is `{prefix}_{i}`.
    id_prefix: String,
}

/// The id of call `index` of a response.
pub fn call_id(prefix: &str, index: usize) -> String {
    format!("{prefix}_{index}")
}

/// The part of `now` past `sent`, when `now` extends it.
fn extension<'a>(sent: &str, now: &'a str) -> Option<&'a str> {
    now.strip_prefix(sent).filter(|s| !s.is_empty())
}

impl Streamer {
    pub fn new(reader: Reader, id_prefix: String) -> Streamer {
        Streamer {
            reader,
            text: String::new(),
            sent: Parsed::default(),
            id_prefix,
        }
    }

    /// The deltas that `piece` of generated text adds.
    pub fn push(&mut self, piece: &str) -> Vec<Value> {
        self.text.push_str(piece);
        let now = self.reader.parse(&self.text, true);
        self.diff(now)
    }

    /// The last deltas, once the generation ended, and the whole reading.
    pub fn finish(&mut self) -> (Vec<Value>, Parsed) {
        let now = self.reader.parse(&self.text, false);
        (self.diff(now.clone()), now)
    }

    fn diff(&mut self, now: Parsed) -> Vec<Value> {
        let mut out = Vec::new();
        if let Some(r) = extension(&self.sent.reasoning, &now.reasoning) {
            out.push(json!({"reasoning_content": r}));
            self.sent.reasoning = now.reasoning.clone();
        }
        // Content only before the first call: after one, late content would reorder the message.
        if self.sent.calls.is_empty() {
            if let Some(c) = extension(&self.sent.content, &now.content) {
                out.push(json!({"content": c}));
                self.sent.content = now.content.clone();
            }
        }
        // Calls only once ended: one cut at the end is dropped (see `parse`).
        for (i, call) in now.calls.iter().enumerate().take_while(|(_, c)| c.done) {
            if i == self.sent.calls.len() {
                out.push(json!({"tool_calls": [{
                    "index": i,
                    "id": call_id(&self.id_prefix, i),
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }]}));
                self.sent.calls.push(super::parse::Call {
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
        out
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
