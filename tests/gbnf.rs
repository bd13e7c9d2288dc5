//! llama.cpp's own GBNF examples (tests/data/gbnf, copied unchanged) converted by
//! `flint::grammar::gbnf` constrain what is generated to their language: random walks under the
//! converted grammar's masks (each step a uniformly chosen allowed byte, over a byte-level
//! vocabulary: what a model with random weights may write) all parse with an independent GBNF
//! recognizer (tests/common/gbnf_check.rs), and texts of each language the recognizer accepts
//! are accepted by the converted grammar. `serve_clients` samples with the real model.

#[allow(dead_code)]
#[path = "common/gbnf_check.rs"]
mod gbnf_check;

use std::path::Path;

use flint::grammar::gbnf::gbnf_to_lark;
use flint::grammar::{byte_factory, top_level, GrammarSpec};
use gbnf_check::Gbnf;

fn example(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/gbnf/{name}.gbnf"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const EXAMPLES: [&str; 8] = [
    "arithmetic",
    "c",
    "chess",
    "english",
    "japanese",
    "json",
    "json_arr",
    "list",
];

/// A random walk under `spec` over bytes: `Some(text)` once it ends, `None` if it had not by
/// `max` steps. The end token is taken with probability 1/4 when allowed.
fn walk(spec: &GrammarSpec, seed: u64, max: usize) -> Option<String> {
    let f = byte_factory().as_ref().expect("byte factory");
    let mut m = llguidance::Matcher::new(f.create_parser(top_level(spec)));
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = Vec::new();
    for _ in 0..max {
        if m.is_stopped() {
            break;
        }
        let mask = m.compute_mask().expect("a mask");
        let allowed: Vec<u32> = (0..256u32).filter(|&t| mask.is_allowed(t)).collect();
        if mask.is_allowed(256) && (allowed.is_empty() || rnd() % 4 == 0) {
            return Some(String::from_utf8(out).expect("UTF-8 under the grammar"));
        }
        let t = *allowed
            .get(rnd() as usize % allowed.len().max(1))
            .unwrap_or_else(|| panic!("dead end after {:?}", String::from_utf8_lossy(&out)));
        m.consume_token(t).expect("an allowed byte");
        out.push(t as u8);
    }
    m.is_stopped()
        .then(|| String::from_utf8(out).expect("UTF-8 under the grammar"))
}

fn accepts(spec: &GrammarSpec, text: &str) -> bool {
    let f = byte_factory().as_ref().expect("byte factory");
    let mut m = llguidance::Matcher::new(f.create_parser(top_level(spec)));
    let ids: Vec<u32> = text.bytes().map(u32::from).collect();
    m.validate_tokens(&ids).expect("validate") == ids.len()
        && m.consume_tokens(&ids).is_ok()
        && m.is_accepting().unwrap_or(false)
}

#[test]
fn random_walks_under_every_example_parse_as_gbnf() {
    for name in EXAMPLES {
        let text = example(name);
        let spec = GrammarSpec::Lark(gbnf_to_lark(&text).expect("converts"));
        let gbnf = Gbnf::parse(&text);
        let mut ended = 0;
        for seed in 1..=40u64 {
            let Some(s) = walk(&spec, seed, 400) else {
                continue;
            };
            ended += 1;
            assert!(
                gbnf.accepts(&s),
                "{name}: seed {seed} wrote {s:?}, not in the language"
            );
        }
        // Measured: 9 (c) to 40 of 40 walks end within 400 bytes.
        assert!(ended >= 5, "{name}: only {ended} of 40 walks ended");
        eprintln!("{name}: {ended} of 40 walks ended, every one in the language");
    }
}

#[test]
fn texts_of_each_language_are_accepted() {
    let cases: [(&str, &[&str], &[&str]); 6] = [
        (
            "arithmetic",
            &["x = 1\n", "(a+2)*b= 3\n"],
            &["x = \n", "1 + 2\n"],
        ),
        (
            "chess",
            &["1. e4 e5\n2. Nf3 Nc6\n", "1. O-O-O Qxd8+\n2. a8=Q b1\n"],
            &["1. e9 e5\n"],
        ),
        (
            "json",
            &["{\"a\": [1, 2.5e3, true, null, \"\\u00e9\"]}", "{}"],
            &["[1]", "{\"a\":01}"],
        ),
        ("list", &["- one\n- two\n"], &["- \n", "one\n"]),
        ("japanese", &["こんにちは 世界"], &["hello"]),
        ("c", &["int main(){return 0;}"], &["int main(){return 0}"]),
    ];
    for (name, good, bad) in cases {
        let text = example(name);
        let gbnf = Gbnf::parse(&text);
        let spec = GrammarSpec::Lark(gbnf_to_lark(&text).expect("converts"));
        for s in good {
            assert!(gbnf.accepts(s), "{name}: the recognizer refuses {s:?}");
            assert!(
                accepts(&spec, s),
                "{name}: the converted grammar refuses {s:?}"
            );
        }
        for s in bad {
            assert!(!gbnf.accepts(s), "{name}: the recognizer takes {s:?}");
            assert!(
                !accepts(&spec, s),
                "{name}: the converted grammar takes {s:?}"
            );
        }
    }
}
