//! What Hugging Face chat templates expect from Python's Jinja2 that minijinja does not have:
//! the common `str` and `dict` methods (`.strip()`, `.startswith()`, `.split()`, `.items()` …)
//! through minijinja's unknown-method callback, `raise_exception`, `strftime_now`, and a
//! `tojson` that writes what Python's `json.dumps` writes (`", "` / `": "` separators, no HTML
//! escaping, non-ASCII kept).

use minijinja::value::{from_args, Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};

fn unknown() -> Error {
    Error::from(ErrorKind::UnknownMethod)
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// Python's `str.strip` family: strip whitespace, or the characters of `chars`.
fn strip(s: &str, chars: Option<&str>, left: bool, right: bool) -> String {
    let hit = |c: char| chars.map_or(c.is_whitespace(), |set| set.contains(c));
    let mut t = s;
    if left {
        t = t.trim_start_matches(hit);
    }
    if right {
        t = t.trim_end_matches(hit);
    }
    t.to_string()
}

/// Python's `str.split(sep=None, maxsplit=-1)`.
fn split(s: &str, sep: Option<&str>, maxsplit: Option<i64>) -> Result<Value, Error> {
    let limit = maxsplit.filter(|&m| m >= 0).map(|m| m as usize);
    let parts: Vec<Value> = match sep {
        Some("") => return Err(invalid("empty separator")),
        Some(sep) => match limit {
            Some(m) => s.splitn(m + 1, sep).map(Value::from).collect(),
            None => s.split(sep).map(Value::from).collect(),
        },
        None => {
            // Runs of whitespace separate; leading/trailing whitespace gives no empty parts.
            let mut out = Vec::new();
            let mut rest = s.trim_start();
            while !rest.is_empty() {
                if limit.is_some_and(|m| out.len() >= m) {
                    out.push(Value::from(rest));
                    break;
                }
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                out.push(Value::from(&rest[..end]));
                rest = rest[end..].trim_start();
            }
            out
        }
    };
    Ok(Value::from(parts))
}

/// `prefix` may be a string or a sequence of strings (Python accepts a tuple).
fn affix_matches(s: &str, affix: &Value, test: fn(&str, &str) -> bool) -> Result<bool, Error> {
    if let Some(a) = affix.as_str() {
        return Ok(test(s, a));
    }
    for item in affix.try_iter()? {
        if item.as_str().is_some_and(|a| test(s, a)) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_cased = false;
    for c in s.chars() {
        if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = c.is_alphabetic();
    }
    out
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c
            .to_uppercase()
            .chain(chars.flat_map(char::to_lowercase))
            .collect(),
        None => String::new(),
    }
}

fn str_method(s: &str, method: &str, args: &[Value]) -> Result<Value, Error> {
    let pred = |f: fn(char) -> bool| -> Result<Value, Error> {
        let _: () = from_args(args)?;
        Ok(Value::from(!s.is_empty() && s.chars().all(f)))
    };
    Ok(match method {
        "strip" | "lstrip" | "rstrip" => {
            let (chars,): (Option<&str>,) = from_args(args)?;
            Value::from(strip(s, chars, method != "rstrip", method != "lstrip"))
        }
        "startswith" | "endswith" => {
            let (affix,): (Value,) = from_args(args)?;
            let test: fn(&str, &str) -> bool = if method == "startswith" {
                |s, a| s.starts_with(a)
            } else {
                |s, a| s.ends_with(a)
            };
            Value::from(affix_matches(s, &affix, test)?)
        }
        "split" => {
            let (sep, maxsplit): (Option<&str>, Option<i64>) = from_args(args)?;
            split(s, sep, maxsplit)?
        }
        "splitlines" => {
            let _: () = from_args(args)?;
            Value::from(s.lines().map(Value::from).collect::<Vec<_>>())
        }
        "upper" | "lower" | "title" | "capitalize" => {
            let _: () = from_args(args)?;
            Value::from(match method {
                "upper" => s.to_uppercase(),
                "lower" => s.to_lowercase(),
                "title" => title(s),
                _ => capitalize(s),
            })
        }
        "replace" => {
            let (old, new, count): (&str, &str, Option<i64>) = from_args(args)?;
            match count.filter(|&c| c >= 0) {
                Some(c) => Value::from(s.replacen(old, new, c as usize)),
                None => Value::from(s.replace(old, new)),
            }
        }
        "find" | "rfind" => {
            let (sub,): (&str,) = from_args(args)?;
            let at = if method == "find" {
                s.find(sub)
            } else {
                s.rfind(sub)
            };
            // Python counts characters, not bytes.
            Value::from(at.map_or(-1, |b| s.get(..b).map_or(0, |p| p.chars().count()) as i64))
        }
        "count" => {
            let (sub,): (&str,) = from_args(args)?;
            Value::from(if sub.is_empty() {
                s.chars().count() + 1
            } else {
                s.matches(sub).count()
            })
        }
        "join" => {
            let (items,): (Value,) = from_args(args)?;
            let parts: Vec<String> = items.try_iter()?.map(|v| v.to_string()).collect();
            Value::from(parts.join(s))
        }
        "isdigit" => pred(|c| c.is_ascii_digit())?,
        "isalpha" => pred(char::is_alphabetic)?,
        "isalnum" => pred(char::is_alphanumeric)?,
        "isspace" => pred(char::is_whitespace)?,
        "islower" => {
            Value::from(s.chars().any(char::is_lowercase) && !s.chars().any(char::is_uppercase))
        }
        "isupper" => {
            Value::from(s.chars().any(char::is_uppercase) && !s.chars().any(char::is_lowercase))
        }
        _ => return Err(unknown()),
    })
}

fn map_method(
    state: &mut State,
    map: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    match method {
        "items" => {
            let _: () = from_args(args)?;
            state.apply_filter("items", std::slice::from_ref(map))
        }
        "keys" => {
            let _: () = from_args(args)?;
            Ok(Value::from(map.try_iter()?.collect::<Vec<_>>()))
        }
        "values" => {
            let _: () = from_args(args)?;
            let vals: Result<Vec<Value>, Error> =
                map.try_iter()?.map(|k| map.get_item(&k)).collect();
            Ok(Value::from(vals?))
        }
        "get" => {
            let (key, default): (Value, Option<Value>) = from_args(args)?;
            let v = map.get_item(&key)?;
            Ok(if v.is_undefined() {
                default.unwrap_or(Value::from(()))
            } else {
                v
            })
        }
        _ => Err(unknown()),
    }
}

/// The callback for `Environment::set_unknown_method_callback`.
pub(crate) fn unknown_method(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::String => str_method(value.as_str().unwrap_or_default(), method, args),
        ValueKind::Map => map_method(state, value, method, args),
        _ => Err(unknown()),
    }
}

/// `raise_exception(message)`: fail the render with the template's message.
pub(crate) fn raise_exception(message: String) -> Result<Value, Error> {
    Err(invalid(message))
}

/// `strftime_now(format)`: the current UTC time, Python `strftime` style.
pub(crate) fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    strftime(&format, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Format Unix time `secs` (UTC): %Y %y %m %d %e %B %b %A %a %H %I %M %S %p %j %%; other
/// directives are kept as written.
pub fn strftime(format: &str, secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    // Howard Hinnant's days → civil date.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_mar = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_mar + 2) / 153;
    let d = doy_mar - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum.get((m - 1) as usize).copied().unwrap_or(0) + d + i64::from(leap && m > 2);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let (h, min, s) = (tod / 3600, tod % 3600 / 60, tod % 60);
    let month = MONTHS.get((m - 1) as usize).copied().unwrap_or("");
    let day = DAYS.get(weekday).copied().unwrap_or("");
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:2}")),
            Some('B') => out.push_str(month),
            Some('b') => out.push_str(month.get(..3).unwrap_or(month)),
            Some('A') => out.push_str(day),
            Some('a') => out.push_str(day.get(..3).unwrap_or(day)),
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('I') => out.push_str(&format!("{:02}", (h + 11) % 12 + 1)),
            Some('M') => out.push_str(&format!("{min:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('p') => out.push_str(if h < 12 { "AM" } else { "PM" }),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// `tojson` as Python's `json.dumps(value, ensure_ascii=False, indent=indent)`.
pub(crate) fn tojson(value: &Value, indent: Option<usize>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match kwargs.get::<Option<usize>>("indent")? {
        Some(i) => Some(i),
        None => indent,
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn newline(out: &mut String, indent: Option<usize>, level: usize) {
    if let Some(n) = indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', n * level));
    }
}

fn write_json(
    v: &Value,
    indent: Option<usize>,
    level: usize,
    out: &mut String,
) -> Result<(), Error> {
    if level > 64 {
        return Err(invalid("tojson: value nested too deeply"));
    }
    let sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&v.to_string()),
        ValueKind::String => out.push_str(
            &serde_json::to_string(v.as_str().unwrap_or_default())
                .map_err(|e| invalid(e.to_string()))?,
        ),
        ValueKind::Map => {
            out.push('{');
            for (i, key) in v.try_iter()?.enumerate() {
                out.push_str(if i > 0 { sep } else { "" });
                newline(out, indent, level + 1);
                let k = key.as_str().map_or_else(|| key.to_string(), str::to_string);
                out.push_str(&serde_json::to_string(&k).map_err(|e| invalid(e.to_string()))?);
                out.push_str(": ");
                write_json(&v.get_item(&key)?, indent, level + 1, out)?;
            }
            if v.len().unwrap_or(0) > 0 {
                newline(out, indent, level);
            }
            out.push('}');
        }
        _ => {
            out.push('[');
            let mut n = 0;
            for item in v.try_iter()? {
                out.push_str(if n > 0 { sep } else { "" });
                newline(out, indent, level + 1);
                write_json(&item, indent, level + 1, out)?;
                n += 1;
            }
            if n > 0 {
                newline(out, indent, level);
            }
            out.push(']');
        }
    }
    Ok(())
}
