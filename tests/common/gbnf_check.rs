//! An independent GBNF recognizer for the tests: its own reader of llama.cpp's grammar syntax
//! (from llama.cpp's `grammars/README.md`, not flint's converter) and a memoized matcher that
//! computes every position a rule can end at. It holds text to the GBNF grammar itself, so a
//! converter that widened the language would fail against it. Left recursion is not supported
//! (llama.cpp rejects it too).

use std::collections::{BTreeSet, HashMap};

#[derive(Debug, Clone)]
enum G {
    Lit(Vec<char>),
    /// Negated, ranges.
    Set(bool, Vec<(char, char)>),
    Any,
    Rule(String),
    Seq(Vec<G>),
    Alt(Vec<G>),
    Rep(Box<G>, usize, Option<usize>),
}

/// A parsed grammar.
pub struct Gbnf {
    rules: HashMap<String, G>,
}

struct Rd<'a> {
    c: &'a [char],
    i: usize,
}

impl Rd<'_> {
    fn get(&self) -> Option<char> {
        self.c.get(self.i).copied()
    }
    fn blank(&mut self, nl: bool) {
        loop {
            match self.get() {
                Some(' ' | '\t') => self.i += 1,
                Some('\n' | '\r') if nl => self.i += 1,
                Some('#') => {
                    while !matches!(self.get(), None | Some('\n')) {
                        self.i += 1
                    }
                }
                _ => return,
            }
        }
    }
    fn ident(&mut self) -> String {
        let s = self.i;
        while self
            .get()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            self.i += 1;
        }
        self.c[s..self.i].iter().collect()
    }
    fn ch(&mut self) -> char {
        let c = self.c[self.i];
        self.i += 1;
        if c != '\\' {
            return c;
        }
        let e = self.c[self.i];
        self.i += 1;
        let n = match e {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            'n' => return '\n',
            'r' => return '\r',
            't' => return '\t',
            other => return other,
        };
        let h: String = self.c[self.i..self.i + n].iter().collect();
        self.i += n;
        char::from_u32(u32::from_str_radix(&h, 16).expect("hex escape")).expect("a character")
    }
    fn alts(&mut self, nested: bool) -> G {
        let mut v = vec![self.seq(nested)];
        while self.get() == Some('|') {
            self.i += 1;
            self.blank(true);
            v.push(self.seq(nested));
        }
        G::Alt(v)
    }
    fn seq(&mut self, nested: bool) -> G {
        let mut v = Vec::new();
        loop {
            let mut g = match self.get() {
                Some('"') => {
                    self.i += 1;
                    let mut s = Vec::new();
                    while self.get() != Some('"') {
                        s.push(self.ch());
                    }
                    self.i += 1;
                    G::Lit(s)
                }
                Some('[') => {
                    self.i += 1;
                    let neg = self.get() == Some('^');
                    self.i += usize::from(neg);
                    let mut r = Vec::new();
                    while self.get() != Some(']') {
                        let a = self.ch();
                        let b = if self.get() == Some('-') && self.c.get(self.i + 1) != Some(&']') {
                            self.i += 1;
                            self.ch()
                        } else {
                            a
                        };
                        r.push((a, b));
                    }
                    self.i += 1;
                    G::Set(neg, r)
                }
                Some('.') => {
                    self.i += 1;
                    G::Any
                }
                Some('(') => {
                    self.i += 1;
                    self.blank(true);
                    let g = self.alts(true);
                    assert_eq!(self.get(), Some(')'), "a group ends with `)`");
                    self.i += 1;
                    g
                }
                Some(c) if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                    G::Rule(self.ident())
                }
                _ => return G::Seq(v),
            };
            self.blank(nested);
            let (lo, hi) = match self.get() {
                Some('*') => (0, None),
                Some('+') => (1, None),
                Some('?') => (0, Some(1)),
                Some('{') => {
                    let end = self.i + self.c[self.i..].iter().position(|&c| c == '}').expect("}");
                    let body: String = self.c[self.i + 1..end].iter().collect();
                    self.i = end;
                    let mut parts = body.split(',').map(str::trim);
                    let lo = parts.next().and_then(|p| p.parse().ok()).expect("{m");
                    let hi = match parts.next() {
                        None => Some(lo),
                        Some("") => None,
                        Some(p) => Some(p.parse().expect("m,n}")),
                    };
                    (lo, hi)
                }
                _ => (1, Some(1)),
            };
            if (lo, hi) != (1, Some(1)) {
                self.i += 1;
                g = G::Rep(Box::new(g), lo, hi);
            }
            self.blank(nested);
            v.push(g);
        }
    }
}

impl Gbnf {
    /// Reads `text` (panics on what it cannot read: test input only).
    pub fn parse(text: &str) -> Gbnf {
        let c: Vec<char> = text.chars().collect();
        let mut r = Rd { c: &c, i: 0 };
        let mut rules = HashMap::new();
        r.blank(true);
        while r.get().is_some() {
            let name = r.ident();
            r.blank(false);
            assert_eq!(r.c[r.i..r.i + 3].iter().collect::<String>(), "::=");
            r.i += 3;
            r.blank(true);
            rules.insert(name, r.alts(false));
            r.blank(true);
        }
        Gbnf { rules }
    }

    /// Whether `root` matches the whole of `text`.
    pub fn accepts(&self, text: &str) -> bool {
        let s: Vec<char> = text.chars().collect();
        let mut m = Match {
            g: self,
            s: &s,
            memo: HashMap::new(),
            prefix: false,
        };
        m.ends(&G::Rule("root".into()), 0).contains(&s.len())
    }

    /// Whether `text` is a prefix of a text `root` matches (an answer cut by `max_tokens`;
    /// every rule of the grammars tested derives some text).
    pub fn accepts_prefix(&self, text: &str) -> bool {
        let s: Vec<char> = text.chars().collect();
        let mut m = Match {
            g: self,
            s: &s,
            memo: HashMap::new(),
            prefix: true,
        };
        let e = m.ends(&G::Rule("root".into()), 0);
        e.contains(&s.len()) || e.contains(&CUT)
    }
}

/// The end "inside an element when the text ran out" (prefix mode).
const CUT: usize = usize::MAX;

struct Match<'a> {
    g: &'a Gbnf,
    s: &'a [char],
    memo: HashMap<(String, usize), BTreeSet<usize>>,
    /// Text running out inside an element ends it at [`CUT`].
    prefix: bool,
}

impl Match<'_> {
    fn ends(&mut self, g: &G, at: usize) -> BTreeSet<usize> {
        if at == CUT {
            return BTreeSet::from([CUT]);
        }
        let next = self.s.get(at).copied();
        let cut = self.prefix && at == self.s.len();
        match g {
            G::Lit(l) => {
                let ok = self.s.len() >= at + l.len() && self.s[at..at + l.len()] == l[..];
                let rest = &self.s[at.min(self.s.len())..];
                let cut_inside = self.prefix && rest.len() < l.len() && l.starts_with(rest);
                if cut_inside && !l.is_empty() {
                    return BTreeSet::from([CUT]);
                }
                ok.then_some(at + l.len()).into_iter().collect()
            }
            G::Set(..) | G::Any if cut => BTreeSet::from([CUT]),
            G::Set(neg, r) => next
                .filter(|&c| r.iter().any(|&(a, b)| a <= c && c <= b) != *neg)
                .map(|_| at + 1)
                .into_iter()
                .collect(),
            G::Any => next.map(|_| at + 1).into_iter().collect(),
            G::Rule(n) => {
                let key = (n.clone(), at);
                if let Some(e) = self.memo.get(&key) {
                    return e.clone();
                }
                self.memo.insert(key.clone(), BTreeSet::new());
                let body = self.g.rules.get(n).unwrap_or_else(|| panic!("rule {n}"));
                let e = self.ends(body, at);
                self.memo.insert(key, e.clone());
                e
            }
            G::Seq(v) => {
                let mut cur = BTreeSet::from([at]);
                for g in v {
                    cur = cur.into_iter().flat_map(|p| self.ends(g, p)).collect();
                }
                cur
            }
            G::Alt(v) => v.iter().flat_map(|g| self.ends(g, at)).collect(),
            G::Rep(g, lo, hi) => {
                let mut out = BTreeSet::new();
                let mut cur = BTreeSet::from([at]);
                let mut seen = BTreeSet::new();
                for k in 0.. {
                    if k >= *lo {
                        out.extend(cur.iter().copied());
                    }
                    if hi.is_some_and(|h| k >= h) || cur.is_empty() {
                        break;
                    }
                    // Past the minimum, a position seen before adds nothing new.
                    if k >= *lo {
                        cur.retain(|p| *p != CUT && seen.insert(*p));
                    }
                    cur = cur.into_iter().flat_map(|p| self.ends(g, p)).collect();
                }
                out
            }
        }
    }
}

#[test]
fn recognizer_reads_llama_cpp_syntax() {
    let g = Gbnf::parse("root ::= (\"a\" | b){2,3} # c\nb ::= [^a-c\\x41]+\n");
    assert!(g.accepts("aa") && g.accepts("axyz") && g.accepts("ada"));
    assert!(!g.accepts("a") && !g.accepts("aaaa") && !g.accepts("aA") && !g.accepts("ab"));
    assert!(g.accepts_prefix("a") && g.accepts_prefix("ad") && g.accepts_prefix(""));
    assert!(!g.accepts_prefix("aaaa") && !g.accepts_prefix("aA"));
    let g = Gbnf::parse("root ::= \"{\" [0-9]+ \"}\"\n");
    assert!(g.accepts_prefix("{12") && g.accepts_prefix("{") && !g.accepts_prefix("{}"));
}
