//! GBNF (llama.cpp's grammar format, `grammars/README.md` there) converted to a Lark grammar in
//! llguidance's dialect, so a llama-server client's `grammar` constrains flint's output.
//!
//! What converts: rules `name ::= …` (names of letters, digits, `-` and `_`; the start is
//! `root`), string literals and character classes with llama.cpp's escapes (`\n \r \t \\ \" \[
//! \] \xHH \uHHHH \UHHHHHHHH`), negated classes `[^…]`, `.` (any character), groups,
//! alternatives, `*` `+` `?` and `{m}` `{m,}` `{m,n}`, and `#` comments. Rules whose strings
//! all have one length become Lark terminals (UPPERCASE: one lexeme), the others rules
//! (lowercase) of one-character lexemes, so llguidance's greedy lexer keeps GBNF's language
//! (see [`terminal_rules`]; llguidance's own converter, which this follows otherwise, makes
//! every non-recursive rule a terminal). What does not convert is
//! refused by name ([`GbnfError`]): token references (`<…>`, `!<…>`), unknown escapes, a
//! reference to a rule that is not defined, a grammar without `root`.

use std::collections::HashMap;
use std::fmt::Write;

/// Why a GBNF grammar cannot be converted. Lines and columns count from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GbnfError {
    #[error("GBNF syntax at line {line}, column {col}: {what}")]
    Syntax {
        line: usize,
        col: usize,
        what: String,
    },
    #[error("GBNF at line {line}, column {col}: {what} is not supported")]
    Unsupported {
        line: usize,
        col: usize,
        what: &'static str,
    },
    #[error("GBNF rule `{used_in}` references `{name}`, which is not defined")]
    UnknownRule { name: String, used_in: String },
    #[error("GBNF rule `{0}` is defined twice")]
    Duplicate(String),
    #[error("the GBNF grammar has no `root` rule")]
    NoRoot,
}

/// One expression of a rule body.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// A literal string (decoded).
    Lit(String),
    /// A character class: negated, and inclusive ranges.
    Class(bool, Vec<(char, char)>),
    /// `.`: any one character.
    Any,
    /// A rule reference (its GBNF name).
    Ref(String),
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    /// `node{min,max}` (`None`: unbounded).
    Rep(Box<Node>, u32, Option<u32>),
}

/// Whether `text` is already a Lark grammar (starts with `%llguidance`, or defines `start:`).
pub fn is_lark(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("%llguidance")
            || l.strip_prefix("start")
                .is_some_and(|r| r.trim_start().starts_with(':'))
    })
}

/// `text` as a Lark grammar: unchanged when it is one ([`is_lark`]), converted otherwise.
pub fn to_lark(text: &str) -> Result<String, GbnfError> {
    if is_lark(text) {
        Ok(text.to_string())
    } else {
        gbnf_to_lark(text)
    }
}

/// Converts a GBNF grammar to llguidance's Lark.
pub fn gbnf_to_lark(text: &str) -> Result<String, GbnfError> {
    let rules = Parser::new(text).rules()?;
    let names: Vec<&str> = rules.iter().map(|(n, _)| n.as_str()).collect();
    let index: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    for (name, body) in &rules {
        let mut refs = Vec::new();
        body.refs(&mut refs);
        if let Some(r) = refs.iter().find(|r| !index.contains_key(r.as_str())) {
            return Err(GbnfError::UnknownRule {
                name: r.clone(),
                used_in: name.clone(),
            });
        }
    }
    let root = *index.get("root").ok_or(GbnfError::NoRoot)?;
    let terminal = terminal_rules(&rules, &index, root);
    let lark_names = lark_names(&names, &terminal, root);
    let mut out = String::from("%llguidance {}\n\n");
    // The start rule first, then the others in their order.
    let order = std::iter::once(root).chain((0..rules.len()).filter(|&i| i != root));
    for i in order {
        let ctx = Emit {
            index: &index,
            names: &lark_names,
        };
        let body = match &rules[i].1 {
            Node::Alt(alts) => alts
                .iter()
                .map(|a| ctx.node(a))
                .collect::<Vec<_>>()
                .join("\n    | "),
            n => ctx.node(n),
        };
        let _ = writeln!(out, "{}: {body}", lark_names[i]);
    }
    Ok(out)
}

/// Which rules are terminals (one lexeme each): those whose references are all terminals (a
/// fixed point, so a recursive rule never is one) and whose strings all have one length. A Lark
/// lexeme is matched greedily (the longest match wins) while GBNF is a plain context-free
/// grammar: `num ::= [0-9]+ ws` as one lexeme would take the `"\n"` that the rule using it
/// needs after `ws`. A language of one length has no match that extends another (UTF-8 is
/// prefix-free), so only such rules are lexemes; the others stay rules of one-character
/// lexemes, exact at some cost in matching speed. The start rule stays a rule.
fn terminal_rules(
    rules: &[(String, Node)],
    index: &HashMap<&str, usize>,
    root: usize,
) -> Vec<bool> {
    let mut len: Vec<Option<usize>> = vec![None; rules.len()];
    loop {
        let mut changed = false;
        for i in 0..rules.len() {
            if i != root && len[i].is_none() {
                len[i] = rules[i]
                    .1
                    .fixed_len(&|r| index.get(r).and_then(|&j| len[j]));
                changed |= len[i].is_some();
            }
        }
        if !changed {
            return len.iter().map(Option::is_some).collect();
        }
    }
}

/// Lark names: `start` for the root; others lowercased (`-` to `_`, a camel-case hump split by
/// `_`), UPPERCASE for terminals, made unique with a numeric suffix.
fn lark_names(names: &[&str], terminal: &[bool], root: usize) -> Vec<String> {
    let mut taken: HashMap<String, ()> = HashMap::new();
    taken.insert("start".into(), ());
    let mut out = vec![String::new(); names.len()];
    out[root] = "start".into();
    for (i, n) in names.iter().enumerate() {
        if i == root {
            continue;
        }
        let mut base = String::new();
        let mut prev_lower = false;
        for c in n.chars() {
            if c.is_ascii_uppercase() && prev_lower {
                base.push('_');
            }
            prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
            match c {
                '-' | '_' => base.push('_'),
                c if c.is_ascii_alphanumeric() => base.push(c.to_ascii_lowercase()),
                _ => {}
            }
        }
        if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
            base.insert_str(0, "r_");
        }
        if terminal[i] {
            base = base.to_ascii_uppercase();
        }
        let mut name = base.clone();
        let mut k = 2;
        while taken.contains_key(&name.to_ascii_lowercase()) {
            name = format!("{base}_{k}");
            k += 1;
        }
        taken.insert(name.to_ascii_lowercase(), ());
        out[i] = name;
    }
    out
}

impl Node {
    fn refs(&self, out: &mut Vec<String>) {
        match self {
            Node::Ref(n) => out.push(n.clone()),
            Node::Seq(v) | Node::Alt(v) => v.iter().for_each(|n| n.refs(out)),
            Node::Rep(n, ..) => n.refs(out),
            Node::Lit(_) | Node::Class(..) | Node::Any => {}
        }
    }

    /// The one length (in characters) of every string this matches; `None` when lengths
    /// differ or a reference has none (`rule` gives a rule's).
    fn fixed_len(&self, rule: &dyn Fn(&str) -> Option<usize>) -> Option<usize> {
        match self {
            Node::Lit(s) => Some(s.chars().count()),
            Node::Class(..) | Node::Any => Some(1),
            Node::Ref(r) => rule(r),
            Node::Seq(v) => v.iter().map(|n| n.fixed_len(rule)).sum(),
            Node::Alt(v) => {
                let first = v.first()?.fixed_len(rule)?;
                v.iter()
                    .all(|n| n.fixed_len(rule) == Some(first))
                    .then_some(first)
            }
            Node::Rep(n, min, max) if Some(*min) == *max => {
                n.fixed_len(rule)?.checked_mul(*min as usize)
            }
            Node::Rep(n, ..) => (n.fixed_len(rule)? == 0).then_some(0),
        }
    }

    /// One item to Lark's eyes (needs no parentheses before a repetition operator).
    fn atomic(&self) -> bool {
        !matches!(self, Node::Seq(_) | Node::Alt(_))
    }
}

/// Writing nodes as Lark.
struct Emit<'a> {
    index: &'a HashMap<&'a str, usize>,
    names: &'a [String],
}

impl Emit<'_> {
    fn node(&self, n: &Node) -> String {
        match n {
            Node::Lit(s) => lark_string(s),
            Node::Class(neg, ranges) => class_regex(*neg, ranges),
            Node::Any => "/(?s:.)/".into(),
            Node::Ref(r) => self.names[self.index[r.as_str()]].clone(),
            Node::Seq(v) if v.is_empty() => "\"\"".into(),
            Node::Seq(v) => v.iter().map(|n| self.node(n)).collect::<Vec<_>>().join(" "),
            Node::Alt(v) => format!(
                "({})",
                v.iter()
                    .map(|n| self.node(n))
                    .collect::<Vec<_>>()
                    .join(" | ")
            ),
            Node::Rep(inner, min, max) => {
                let s = self.node(inner);
                let s = if inner.atomic() { s } else { format!("({s})") };
                match (min, max) {
                    (0, None) => format!("{s}*"),
                    (1, None) => format!("{s}+"),
                    (0, Some(1)) => format!("{s}?"),
                    (m, None) => format!("{s}{{{m},}}"),
                    (m, Some(x)) => format!("{s}{{{m},{x}}}"),
                }
            }
        }
    }
}

/// A Lark string literal (JSON string syntax; control characters as `\u00HH`).
fn lark_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A Lark regex of one character class; every character other than an ASCII letter or digit
/// is written `\x{HEX}` (so nothing in it reads as regex syntax or ends the `/…/`).
fn class_regex(neg: bool, ranges: &[(char, char)]) -> String {
    let one = |c: char| {
        if c.is_ascii_alphanumeric() {
            c.to_string()
        } else {
            format!("\\x{{{:x}}}", c as u32)
        }
    };
    let mut out = String::from(if neg { "/[^" } else { "/[" });
    for &(a, b) in ranges {
        out.push_str(&one(a));
        if b != a {
            out.push('-');
            out.push_str(&one(b));
        }
    }
    out.push_str("]/");
    out
}

/// A recursive-descent reader of GBNF text.
struct Parser {
    s: Vec<char>,
    i: usize,
}

impl Parser {
    fn new(text: &str) -> Parser {
        Parser {
            s: text.chars().collect(),
            i: 0,
        }
    }

    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn at(&self, k: usize) -> Option<char> {
        self.s.get(self.i + k).copied()
    }

    fn here(&self) -> (usize, usize) {
        let before = &self.s[..self.i.min(self.s.len())];
        let line = before.iter().filter(|&&c| c == '\n').count() + 1;
        let col = self.i - before.iter().rposition(|&c| c == '\n').map_or(0, |p| p + 1) + 1;
        (line, col)
    }

    fn syntax(&self, what: impl Into<String>) -> GbnfError {
        let (line, col) = self.here();
        GbnfError::Syntax {
            line,
            col,
            what: what.into(),
        }
    }

    fn unsupported(&self, what: &'static str) -> GbnfError {
        let (line, col) = self.here();
        GbnfError::Unsupported { line, col, what }
    }

    /// Skips blanks and comments; newlines too when `newlines`.
    fn space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.i += 1,
                '\r' | '\n' if newlines => self.i += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n' && c != '\r') {
                        self.i += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn word_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '-' || c == '_'
    }

    fn name(&mut self) -> Result<String, GbnfError> {
        let start = self.i;
        while self.peek().is_some_and(Self::word_char) {
            self.i += 1;
        }
        if self.i == start {
            return Err(self.syntax(format!(
                "expected a rule name, found {:?}",
                self.peek().map_or("the end".to_string(), String::from)
            )));
        }
        Ok(self.s[start..self.i].iter().collect())
    }

    fn rules(mut self) -> Result<Vec<(String, Node)>, GbnfError> {
        let mut rules: Vec<(String, Node)> = Vec::new();
        self.space(true);
        while self.peek().is_some() {
            let name = self.name()?;
            self.space(false);
            if !(self.peek() == Some(':') && self.at(1) == Some(':') && self.at(2) == Some('=')) {
                return Err(self.syntax(format!("expected `::=` after `{name}`")));
            }
            self.i += 3;
            self.space(true);
            let body = self.alternatives(false)?;
            if rules.iter().any(|(n, _)| *n == name) {
                return Err(GbnfError::Duplicate(name));
            }
            rules.push((name, body));
            match self.peek() {
                None | Some('\n' | '\r') => {}
                Some(c) => return Err(self.syntax(format!("unexpected {c:?}"))),
            }
            self.space(true);
        }
        Ok(rules)
    }

    fn alternatives(&mut self, nested: bool) -> Result<Node, GbnfError> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.i += 1;
            self.space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or(Node::Seq(Vec::new()))
        } else {
            Node::Alt(alts)
        })
    }

    fn sequence(&mut self, nested: bool) -> Result<Node, GbnfError> {
        let mut items = Vec::new();
        loop {
            let item = match self.peek() {
                Some('"') => self.literal()?,
                Some('[') => self.class()?,
                Some('.') => {
                    self.i += 1;
                    Node::Any
                }
                Some('(') => {
                    self.i += 1;
                    self.space(true);
                    let inner = self.alternatives(true)?;
                    if self.peek() != Some(')') {
                        return Err(self.syntax("expected `)`"));
                    }
                    self.i += 1;
                    inner
                }
                Some('<') | Some('!') => return Err(self.unsupported("a token reference (`<…>`)")),
                Some(c) if Self::word_char(c) => Node::Ref(self.name()?),
                _ => break,
            };
            self.space(nested);
            let item = self.repetition(item)?;
            items.push(item);
            self.space(nested);
        }
        Ok(if items.len() == 1 {
            items.pop().unwrap_or(Node::Seq(Vec::new()))
        } else {
            Node::Seq(items)
        })
    }

    fn repetition(&mut self, item: Node) -> Result<Node, GbnfError> {
        let rep = |min, max| Node::Rep(Box::new(item.clone()), min, max);
        let node = match self.peek() {
            Some('*') => rep(0, None),
            Some('+') => rep(1, None),
            Some('?') => rep(0, Some(1)),
            Some('{') => {
                self.i += 1;
                self.space(true);
                let min = self.int()?;
                self.space(true);
                let max = match self.peek() {
                    Some('}') => Some(min),
                    Some(',') => {
                        self.i += 1;
                        self.space(true);
                        let max = if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                            Some(self.int()?)
                        } else {
                            None
                        };
                        self.space(true);
                        max
                    }
                    _ => return Err(self.syntax("expected `,` or `}` in a repetition")),
                };
                if self.peek() != Some('}') {
                    return Err(self.syntax("expected `}` ending a repetition"));
                }
                if max.is_some_and(|m| m < min) {
                    return Err(self.syntax(format!(
                        "a repetition {{{min},{max:?}}} whose maximum is below its minimum"
                    )));
                }
                rep(min, max)
            }
            _ => return Ok(item),
        };
        self.i += 1;
        Ok(node)
    }

    fn int(&mut self) -> Result<u32, GbnfError> {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        let digits: String = self.s[start..self.i].iter().collect();
        digits
            .parse()
            .map_err(|_| self.syntax(format!("expected a repetition count, found {digits:?}")))
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<char, GbnfError> {
        let Some(c) = self.peek() else {
            return Err(self.syntax("unexpected end of the grammar"));
        };
        self.i += 1;
        if c != '\\' {
            return Ok(c);
        }
        let Some(e) = self.peek() else {
            return Err(self.syntax("an escape at the end of the grammar"));
        };
        self.i += 1;
        let hex = |p: &mut Parser, n: usize| -> Result<char, GbnfError> {
            let digits: String = p.s[p.i..(p.i + n).min(p.s.len())].iter().collect();
            let code = u32::from_str_radix(&digits, 16)
                .ok()
                .filter(|_| digits.len() == n);
            let c = code.and_then(char::from_u32);
            let c =
                c.ok_or_else(|| p.syntax(format!("the escape \\{e}{digits} is not a character")))?;
            p.i += n;
            Ok(c)
        };
        match e {
            'n' => Ok('\n'),
            'r' => Ok('\r'),
            't' => Ok('\t'),
            '\\' | '"' | '[' | ']' | '/' | '-' | '^' => Ok(e),
            'x' => hex(self, 2),
            'u' => hex(self, 4),
            'U' => hex(self, 8),
            _ => {
                self.i -= 1;
                Err(self.unsupported("this escape (llama.cpp's are \\n \\r \\t \\\\ \\\" \\[ \\] \\xHH \\uHHHH \\UHHHHHHHH)"))
            }
        }
    }

    fn literal(&mut self) -> Result<Node, GbnfError> {
        self.i += 1;
        let mut s = String::new();
        loop {
            match self.peek() {
                None => return Err(self.syntax("a string literal that does not end")),
                Some('"') => {
                    self.i += 1;
                    return Ok(Node::Lit(s));
                }
                Some(_) => s.push(self.char()?),
            }
        }
    }

    fn class(&mut self) -> Result<Node, GbnfError> {
        self.i += 1;
        let neg = self.peek() == Some('^');
        if neg {
            self.i += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.syntax("a character class that does not end")),
                Some(']') => {
                    self.i += 1;
                    break;
                }
                Some(_) => {
                    let a = self.char()?;
                    let b = if self.peek() == Some('-') && self.at(1).is_some_and(|c| c != ']') {
                        self.i += 1;
                        self.char()?
                    } else {
                        a
                    };
                    if b < a {
                        return Err(self.syntax(format!("the range {a:?}-{b:?} is empty")));
                    }
                    ranges.push((a, b));
                }
            }
        }
        if ranges.is_empty() {
            return Err(self.syntax("an empty character class"));
        }
        Ok(Node::Class(neg, ranges))
    }
}

#[cfg(test)]
#[path = "gbnf_tests.rs"]
mod tests;
