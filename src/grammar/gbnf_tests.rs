//! The converter on llama.cpp's grammar syntax; the language of what it writes is checked by
//! tests/gbnf.rs against an independent recognizer.

use super::*;
use crate::grammar::{compile, GrammarSpec};

fn lark(g: &str) -> String {
    gbnf_to_lark(g).unwrap_or_else(|e| panic!("{g}: {e}"))
}

#[test]
fn every_llama_cpp_example_converts_and_compiles() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gbnf");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/data/gbnf") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("gbnf") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(!is_lark(&text), "{}", path.display());
        let l = lark(&text);
        compile(&GrammarSpec::Lark(l.clone()))
            .unwrap_or_else(|e| panic!("{}: {e}\n{l}", path.display()));
        n += 1;
    }
    assert!(n >= 8, "{n} examples");
}

#[test]
fn terminals_rules_and_names() {
    // Rules of one length become lexemes; others stay rules (greedy lexemes would change the
    // language: see `terminal_rules`).
    let l = lark("root ::= item+ pair\nitem ::= \"- \" [^\\r\\n]+ \"\\n\"\npair ::= letter [0-9]\nletter ::= [a-z] | \"_\"\n");
    assert!(l.contains("start: item+ PAIR"), "{l}");
    assert!(l.contains("item: \"- \" /[^\\x{d}\\x{a}]/+ \"\\n\""), "{l}");
    assert!(
        l.contains("PAIR: LETTER /[0-9]/") && l.contains("LETTER: /[a-z]/\n    | \"_\""),
        "{l}"
    );
    // Recursion stays a rule; camel case and dashes become snake case.
    let l =
        lark("root ::= fooBar\nfooBar ::= \"(\" fooBar? \")\" | en-char\nen-char ::= [a-z]{2,5}\n");
    assert!(
        l.contains("foo_bar: \"(\" foo_bar? \")\"\n    | en_char"),
        "{l}"
    );
    assert!(l.contains("en_char: /[a-z]/{2,5}"), "{l}");
    // A rule named `start` does not take the root's name.
    let l = lark("root ::= start\nstart ::= \"x\" root?\n");
    assert!(l.contains("start: start_2"), "{l}");
}

#[test]
fn comments_escapes_and_repetitions() {
    let g = "# head\nroot ::= \"a\\\"\\x41\\u00e9\" ( # inside\n  ws{0,3} [\\]\\[-] . x{2} x{1,} ) # tail\n\
             ws ::= | \" \"\nx ::= \"x\"\n";
    let l = lark(g);
    assert!(l.contains("\"a\\\"Aé\""), "{l}");
    assert!(
        l.contains("ws{0,3}") && l.contains("X{2,2}") && l.contains("X+"),
        "{l}"
    );
    assert!(l.contains("/[\\x{5d}\\x{5b}\\x{2d}]/"), "{l}");
    compile(&GrammarSpec::Lark(l.clone())).unwrap_or_else(|e| panic!("{e}\n{l}"));
}

#[test]
fn what_cannot_convert_is_named() {
    let cases: [(&str, &str); 6] = [
        ("root ::= <think> \"x\"\n", "token reference"),
        ("root ::= \"\\q\"\n", "escape"),
        ("root ::= missing\n", "`missing`"),
        ("item ::= \"x\"\n", "no `root`"),
        ("root ::= \"x\"\nroot ::= \"y\"\n", "twice"),
        ("root ::= \"x\" )\n", "line 1, column 14"),
    ];
    for (g, want) in cases {
        let e = gbnf_to_lark(g)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(want), "{g:?}: {e:?} lacks {want:?}");
    }
}

#[test]
fn lark_is_passed_through() {
    let l = "%llguidance {}\nstart: \"x\"\n";
    assert_eq!(to_lark(l).ok().as_deref(), Some(l));
    assert!(is_lark("start : \"a\""));
    assert!(!is_lark("root ::= \"start:\""));
}
