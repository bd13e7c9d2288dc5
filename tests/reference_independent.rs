//! The CPU oracle (`src/reference`) shares no code with the GPU path it checks: no file under
//! it may name the `model`, `kernels`, `gpu` or `engine` modules, by any path (`crate::model`,
//! `flint::gpu`, a `crate::{…, engine}` group, or `super::` chains that climb out of
//! `reference`), in code or in comments. The scanner is itself tested on strings that break the
//! rule, so the structure test cannot pass by finding nothing.

use std::path::{Path, PathBuf};

/// The modules of the GPU path.
const FORBIDDEN: [&str; 4] = ["model", "kernels", "gpu", "engine"];

/// Roots a path to a crate module can start from inside the crate (and from tests).
const ROOTS: [&str; 2] = ["crate", "flint"];

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// Byte offsets where the whole word `word` starts in `text`.
fn words<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    text.match_indices(word).map(|(i, _)| i).filter(move |&i| {
        let before = text[..i].chars().next_back().is_none_or(|c| !is_ident(c));
        let after = text[i + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !is_ident(c));
        before && after
    })
}

/// After `rest` skips whitespace and starts with `::`, what follows it (whitespace skipped).
fn after_path_sep(rest: &str) -> Option<&str> {
    rest.trim_start().strip_prefix("::").map(str::trim_start)
}

/// The leading identifier of `s`.
fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

/// The first identifier of every top-level item of the `{…}` group at the start of `s`
/// (`{a::b, c, d::{e, f}}` gives `a`, `c`, `d`).
fn group_heads(s: &str) -> Vec<&str> {
    let mut heads = Vec::new();
    let (mut depth, mut item_start) = (0usize, true);
    for (i, c) in s.char_indices() {
        match c {
            '{' => {
                depth += 1;
                item_start = depth == 1;
            }
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => item_start = true,
            c if item_start && depth == 1 && is_ident(c) => {
                heads.push(ident(&s[i..]));
                item_start = false;
            }
            _ => {}
        }
    }
    heads
}

/// Every place in `text` (a file `depth` modules below `reference`: `reference/mod.rs` is 0,
/// `reference/dspark.rs` and `reference/forward/mod.rs` are 1) that reaches the GPU path:
/// `(line, what)`.
fn violations(text: &str, depth: usize) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for root in ROOTS {
        for at in words(text, root) {
            let rest = &text[at + root.len()..];
            let Some(next) = after_path_sep(rest) else {
                // `use crate as c;`, `extern crate flint as f;`: an alias hides the path.
                let prev = text[..at].trim_end();
                let aliased = prev.ends_with("use") || prev.ends_with("crate");
                if aliased && rest.trim_start().starts_with("as ") {
                    found.push((line_of(text, at), format!("`{root} as …` alias")));
                }
                continue;
            };
            let heads = if next.starts_with('{') {
                group_heads(next)
            } else {
                vec![ident(next)]
            };
            for h in heads.into_iter().filter(|h| FORBIDDEN.contains(h)) {
                found.push((line_of(text, at), format!("{root}::{h}")));
            }
        }
    }
    for at in words(text, "super") {
        // Count the chain `super::super::…` starting here (only its first link counts, so a
        // chain is reported once).
        let prev = text[..at].trim_end();
        if prev.ends_with("::") && prev.trim_end_matches("::").trim_end().ends_with("super") {
            continue;
        }
        let (mut n, mut rest) = (1, &text[at + "super".len()..]);
        while let Some(next) = after_path_sep(rest) {
            if ident(next) != "super" {
                break;
            }
            n += 1;
            rest = &next["super".len()..];
        }
        if n > depth {
            found.push((
                line_of(text, at),
                format!("{n} × super:: climbs out of reference (file depth {depth})"),
            ));
        }
    }
    found.sort();
    found
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Modules below `reference` of the file at `rel` (relative to `src/reference`).
fn depth_of(rel: &Path) -> usize {
    let n = rel.components().count();
    if rel.file_name().is_some_and(|f| f == "mod.rs") {
        n - 1
    } else {
        n
    }
}

#[test]
fn the_oracle_names_nothing_of_the_gpu_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/reference");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let rel: Vec<PathBuf> = files
        .iter()
        .map(|f| f.strip_prefix(&root).unwrap().to_path_buf())
        .collect();
    // The walk reaches the files that matter (an empty walk would pass vacuously).
    for must in [
        "mod.rs",
        "dspark.rs",
        "dspark/load.rs",
        "forward/mod.rs",
        "forward/weights.rs",
        "meta/mod.rs",
        "meta/drafter.rs",
    ] {
        assert!(rel.iter().any(|r| r == Path::new(must)), "{must} not found");
    }
    let mut bad = Vec::new();
    for (file, rel) in files.iter().zip(&rel) {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, what) in violations(&text, depth_of(rel)) {
            bad.push(format!("src/reference/{}:{line}: {what}", rel.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "the oracle must not reach the GPU path:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_scanner_finds_every_way_of_naming_the_gpu_path() {
    let v = |text: &str, depth: usize| violations(text, depth);
    let lines = |text: &str, depth: usize| -> Vec<usize> {
        v(text, depth).into_iter().map(|(l, _)| l).collect()
    };
    assert_eq!(lines("use crate::model::Hparams;", 1), [1]);
    assert_eq!(lines("//! see [`crate::kernels::ops`]", 1), [1]);
    assert_eq!(lines("fn f(h: &crate::model::Hparams) {}", 2), [1]);
    assert_eq!(lines("\n\nlet c = crate :: gpu::ctx();", 1), [3]);
    assert_eq!(lines("use flint::engine::Engine;", 1), [1]);
    assert_eq!(lines("use ::flint::model;", 1), [1]);
    assert_eq!(lines("use crate::{gguf::Gguf, model::Arch};", 1), [1]);
    assert_eq!(
        lines(
            "use crate::{\n    quant,\n    reference::ops,\n    kernels,\n};",
            1
        ),
        [1]
    );
    assert_eq!(lines("use crate::{a::{b, c}, engine::{x}};", 1), [1]);
    assert_eq!(lines("use crate as c;\nuse c::model::Hparams;", 1), [1]);
    // `super::` chains: one too many leaves `reference`.
    assert_eq!(lines("use super::super::model::Hparams;", 1), [1]);
    assert_eq!(lines("use super::super::super::x;", 2), [1]);
    assert_eq!(
        v("use super::super::super::x;", 2).len(),
        1,
        "one chain, once"
    );
    assert_eq!(lines("use super::ForwardError;", 0), [1]);
    // What the oracle may name.
    for ok in [
        "use crate::gguf::{Gguf, GgmlType};",
        "use crate::quant::dequantize;",
        "use crate::reference::ops::{rms_norm, rope};",
        "use crate::{gguf::Gguf, reference::matmul};",
        "// the GPU ops kernels, the model file, the gpu_name field",
        "let model = RefModel::load(&f)?; let crate_model = 1;",
        "//! the crate as a whole, the flint model file",
        "use crate::models_of_the_oracle::X;",
        "use super::ForwardError;",
        "use super::super::ops::rope;",
    ] {
        assert_eq!(v(ok, 2), [], "{ok}");
    }
    assert_eq!(
        depth_of(Path::new("forward/mod.rs")),
        depth_of(Path::new("dspark.rs"))
    );
    assert_eq!(
        (
            depth_of(Path::new("mod.rs")),
            depth_of(Path::new("meta/read.rs"))
        ),
        (0, 2)
    );
}
