//! Reading generated text back into OpenAI's message parts: `reasoning_content` (the text of
//! an open `<think>` up to `</think>`), `content`, and `tool_calls` in the model's format.
//!
//! [`parse`] reads a whole text, or with `partial` a prefix of one still being generated: then
//! anything that might still turn into a marker (`</think>`, `<tool_call>`, `\n</parameter>`)
//! or trailing whitespace is held back, so that the reading of a longer prefix only ever
//! extends the reading of a shorter one (what [`super::delta`] streams). Text the grammar
//! forbids (a model run without one) is read as far as it makes sense and never panics.
//!
//! A call cut by `max_tokens` never reaches `content`: a whole reading keeps the calls that
//! ended and drops the one that did not, in every format (the generic envelope's complete
//! array items are read out of its cut JSON).

use serde_json::Value;

use super::{Format, ToolSetup};

/// One call as read so far.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Call {
    pub name: String,
    /// JSON text of the arguments (a prefix of it while the call is open).
    pub arguments: String,
    /// Whether the call's text has ended.
    pub done: bool,
}

/// A reading of the generated text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    pub reasoning: String,
    pub content: String,
    pub calls: Vec<Call>,
}

/// How to read one request's output.
#[derive(Debug, Clone, PartialEq)]
pub struct Reader {
    /// `None`: no tools (only reasoning is split out).
    pub tools: Option<(Format, ToolSetup)>,
    /// The prompt ends inside an open `<think>`.
    pub thinking_open: bool,
    /// A `<think>…</think>` the model opens itself at the start of its answer is reasoning too
    /// (`reasoning_format` other than `none`).
    pub think_tags: bool,
}

pub(super) const THINK_START: &str = "<think>";
pub(super) const THINK_END: &str = "</think>";
pub(super) const CALL: &str = "<tool_call>";
const CALL_END: &str = "</tool_call>";
const PARAM_END: &str = "\n</parameter>";

/// The length of `s` without its longest suffix that is a proper prefix of `marker`.
pub(super) fn safe_len(s: &str, marker: &str) -> usize {
    let max = marker.len().saturating_sub(1).min(s.len());
    for k in (1..=max).rev() {
        if s.is_char_boundary(s.len() - k) && marker.starts_with(&s[s.len() - k..]) {
            return s.len() - k;
        }
    }
    s.len()
}

/// `s` up to the first `marker` (`Some(rest after it)`), or its safe prefix (`None`).
fn until<'a>(s: &'a str, marker: &str, partial: bool) -> (&'a str, Option<&'a str>) {
    match s.find(marker) {
        Some(i) => (&s[..i], Some(&s[i + marker.len()..])),
        None if partial => (&s[..safe_len(s, marker)], None),
        None => (s, None),
    }
}

impl Reader {
    /// Reads `text` (a prefix of the output when `partial`).
    pub fn parse(&self, text: &str, partial: bool) -> Parsed {
        let mut out = Parsed::default();
        let mut rest = text;
        let mut open = self.thinking_open;
        if !open && self.think_tags {
            let t = text.trim_start();
            if let Some(after) = t.strip_prefix(THINK_START) {
                rest = after;
                open = true;
            } else if partial && THINK_START.starts_with(t) {
                // It may still become `<think>`.
                return out;
            }
        }
        if open {
            let (thought, after) = until(rest, THINK_END, partial);
            out.reasoning = thought.to_string();
            match after {
                Some(a) => rest = a.trim_start(),
                None if partial => return out,
                // No `</think>` at all: the whole text was reasoning.
                None => return out,
            }
        }
        match &self.tools {
            None => out.content = content(rest, partial, false),
            Some((Format::QwenXml | Format::Hermes, setup)) => {
                let (text, after) = until(rest, CALL, partial);
                out.content = content(text, partial, after.is_some());
                if let Some(a) = after {
                    let format = self.format();
                    calls_after_marker(a, partial, setup, &mut out.calls, format, &mut Vec::new());
                }
            }
            Some((Format::Llama3, _)) => {
                if rest.starts_with('{') {
                    if let Some((call, _)) = json_call(rest, partial, "parameters") {
                        out.calls.push(call);
                    }
                } else {
                    out.content = content(rest, partial, false);
                }
            }
            Some((Format::Generic, _)) => {
                if !partial {
                    generic(rest, &mut out);
                }
            }
        }
        if !partial {
            out.calls.retain(|c| c.done);
        }
        out
    }

    pub(super) fn format(&self) -> Format {
        self.tools.as_ref().map_or(Format::Generic, |(f, _)| *f)
    }
}

/// Content text: trailing whitespace is held back while partial, and dropped before a call.
fn content(s: &str, partial: bool, call_follows: bool) -> String {
    if partial || call_follows {
        s.trim_end().to_string()
    } else {
        s.to_string()
    }
}

/// The calls of a text that just passed a `<tool_call>` marker; `starts` gets where (in `s`)
/// each call's text begins, after its marker.
pub(super) fn calls_after_marker(
    mut s: &str,
    partial: bool,
    setup: &ToolSetup,
    calls: &mut Vec<Call>,
    format: Format,
    starts: &mut Vec<usize>,
) {
    // `s` is always a suffix of what was given: its offset is the length lost.
    let total = s.len();
    loop {
        starts.push(total - s.len());
        let read = match format {
            Format::QwenXml => xml_call(s, partial, setup),
            _ => json_call(s.trim_start(), partial, "arguments").map(|(c, rest)| {
                let (_, after) = until(rest.trim_start(), CALL_END, partial);
                (c, after)
            }),
        };
        let Some((call, after)) = read else {
            starts.pop();
            return;
        };
        calls.push(call);
        let Some(after) = after else { return };
        let after = after.trim_start();
        match after.strip_prefix(CALL) {
            Some(next) => s = next,
            None => return,
        }
    }
}

/// One Qwen XML call after its `<tool_call>`: `\n<function=NAME>\n` then parameters, then
/// `</function>` and `</tool_call>`. Returns the call and, once it ended, the text after it.
fn xml_call<'a>(s: &'a str, partial: bool, setup: &ToolSetup) -> Option<(Call, Option<&'a str>)> {
    let s = s.trim_start().strip_prefix("<function=")?;
    let close = s.find('>')?;
    let name = s[..close].trim().to_string();
    let tool = setup.tool(&name);
    let mut call = Call {
        name,
        arguments: "{".to_string(),
        done: false,
    };
    let mut s = &s[close + 1..];
    let mut first = true;
    loop {
        let t = s.trim_start();
        if let Some(p) = t.strip_prefix("<parameter=") {
            let Some(close) = p.find('>') else {
                return Some((call, None));
            };
            let pname = p[..close].trim();
            let body = p[close + 1..].strip_prefix('\n').unwrap_or(&p[close + 1..]);
            let (value, after) = until(body, PARAM_END, partial);
            let is_string = tool.is_some_and(|t| t.is_string(pname));
            if !first {
                call.arguments.push_str(", ");
            }
            first = false;
            call.arguments.push_str(&Value::from(pname).to_string());
            call.arguments.push_str(": ");
            let ended = after.is_some();
            if is_string {
                let quoted = Value::from(value).to_string();
                // The closing quote only once the value ended.
                call.arguments.push_str(if ended {
                    &quoted
                } else {
                    &quoted[..quoted.len() - 1]
                });
            } else if ended {
                call.arguments.push_str(value.trim());
            } else {
                call.arguments.push_str(value.trim());
                return Some((call, None));
            }
            match after {
                Some(a) => s = a,
                None => return Some((call, None)),
            }
        } else if let Some(a) = t.strip_prefix("</function>") {
            call.arguments.push('}');
            call.done = true;
            let (_, after) = until(a.trim_start(), CALL_END, partial);
            return Some((call, after.or(Some(""))));
        } else {
            // Partial markup, a cut call, or text the grammar forbids: not ended.
            return Some((call, None));
        }
    }
}

/// The end (exclusive) of the JSON value at the start of `s`, if it ended.
fn json_value_end(s: &str) -> Option<usize> {
    let (mut depth, mut in_str, mut esc) = (0i32, false, false);
    for (i, c) in s.char_indices() {
        if in_str {
            match (esc, c) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => {
                    in_str = false;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth -= 1;
                if depth <= 0 {
                    return Some(i + 1);
                }
            }
            ',' | ' ' | '\n' | '\t' | '\r' if depth == 0 && i > 0 => return Some(i),
            _ => {}
        }
    }
    None
}

/// A JSON string at the start of `s` and the rest after it.
fn json_string(s: &str) -> Option<(String, &str)> {
    if !s.starts_with('"') {
        return None;
    }
    let end = json_value_end(s)?;
    let v: String = serde_json::from_str(&s[..end]).ok()?;
    Some((v, &s[end..]))
}

/// One `{"name": NAME, KEY: ARGS}` object at the start of `s` (streamed when `name` comes
/// first, read whole otherwise). Returns the call and the text after the object.
pub(super) fn json_call<'a>(s: &'a str, partial: bool, key: &str) -> Option<(Call, &'a str)> {
    let whole = |s: &'a str| -> Option<(Call, &'a str)> {
        let end = json_value_end(s)?;
        let v: Value = serde_json::from_str(&s[..end]).ok()?;
        let name = v.get("name")?.as_str()?.to_string();
        let args = v.get(key).or_else(|| v.get("arguments"))?;
        let arguments = match args {
            Value::String(a) => a.clone(),
            a => a.to_string(),
        };
        let done = true;
        Some((
            Call {
                name,
                arguments,
                done,
            },
            &s[end..],
        ))
    };
    let body = s.strip_prefix('{')?.trim_start();
    let Some(after_key) = body.strip_prefix("\"name\"") else {
        return whole(s);
    };
    let (name, rest) = json_string(after_key.trim_start().strip_prefix(':')?.trim_start())?;
    let rest = rest.trim_start().strip_prefix(',')?.trim_start();
    let (k, rest) = json_string(rest)?;
    if k != key && k != "arguments" {
        return whole(s);
    }
    let value = rest.trim_start().strip_prefix(':')?.trim_start();
    let mut call = Call {
        name,
        ..Call::default()
    };
    match json_value_end(value) {
        Some(end) if value[..end].starts_with(['{', '[', '"']) || !partial => {
            call.arguments = value[..end].to_string();
            let after = value[end..].trim_start();
            match after.strip_prefix('}') {
                Some(a) => {
                    call.done = true;
                    Some((call, a))
                }
                None => Some((call, "")),
            }
        }
        _ => {
            call.arguments = value.trim_end().to_string();
            Some((call, ""))
        }
    }
}

/// The generic envelope, read whole; a cut one (`max_tokens`) gives its complete calls, or the
/// part of its `response` string that was written, never the envelope's text.
fn generic(s: &str, out: &mut Parsed) {
    let Ok(v) = serde_json::from_str::<Value>(s.trim()) else {
        generic_cut(s.trim_start(), out);
        return;
    };
    if let Some(list) = v.get("tool_calls").and_then(Value::as_array) {
        for c in list {
            out.calls.push(generic_call(c));
        }
    } else if let Some(r) = v.get("response").and_then(Value::as_str) {
        out.content = r.to_string();
    } else {
        out.content = s.to_string();
    }
}

fn generic_call(c: &Value) -> Call {
    let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
    let args = c.get("arguments").cloned().unwrap_or(Value::Null);
    Call {
        name: name.to_string(),
        arguments: args.to_string(),
        done: true,
    }
}

/// A generic envelope that does not parse: `{"tool_calls": [ITEM, ITEM, …` (the items that
/// ended), `{"response": "…` (the string so far), or other text (the content as written).
fn generic_cut(s: &str, out: &mut Parsed) {
    let Some(body) = s.strip_prefix('{').map(str::trim_start) else {
        out.content = s.to_string();
        return;
    };
    let value_of = |key: &str| -> Option<&str> {
        let rest = body.strip_prefix(key)?.trim_start().strip_prefix(':')?;
        Some(rest.trim_start())
    };
    if let Some(list) = value_of("\"tool_calls\"") {
        let mut rest = list.strip_prefix('[').unwrap_or("").trim_start();
        while let Some(end) = rest
            .starts_with('{')
            .then(|| json_value_end(rest))
            .flatten()
        {
            let Ok(item) = serde_json::from_str::<Value>(&rest[..end]) else {
                break;
            };
            out.calls.push(generic_call(&item));
            rest = rest[end..].trim_start();
            rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
        }
    } else if let Some(r) = value_of("\"response\"") {
        out.content = string_prefix(r);
    } else {
        out.content = s.to_string();
    }
}

/// The text of a JSON string literal cut short (`"ab\ncd` gives `ab\ncd`, decoded), up to its
/// last whole escape.
fn string_prefix(s: &str) -> String {
    let Some(body) = s.strip_prefix('"') else {
        return String::new();
    };
    let mut end = body.len();
    while end > 0 {
        let candidate = format!("\"{}\"", &body[..end]);
        if let Ok(text) = serde_json::from_str::<String>(&candidate) {
            return text;
        }
        end -= 1;
        while end > 0 && !body.is_char_boundary(end) {
            end -= 1;
        }
    }
    String::new()
}
