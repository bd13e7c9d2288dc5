//! The module dependency order of docs/ARCHITECTURE.md holds: no file under `src/` names a
//! module to the right of its own (`crate::x` paths outside comments), `model::forward` counted
//! as its own layer after `memory`. The order is read from the page's `<!-- order: … -->`
//! comment, so the documented order and the code cannot drift apart. And the commands, the
//! server and the benches reach no engine internals (`.fwd`).

use std::path::{Path, PathBuf};

/// Modules outside the order: the crate error that wraps every module's error, the log setup,
/// and the crate roots.
const OUTSIDE: [&str; 4] = ["error", "logging", "lib", "main"];

fn order() -> Vec<String> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"))
            .unwrap();
    let line = doc
        .lines()
        .find_map(|l| l.trim().strip_prefix("<!-- order:"))
        .expect("docs/ARCHITECTURE.md has an `<!-- order: … -->` comment");
    line.trim_end_matches("-->")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The layer a file under `src/` belongs to.
fn layer_of(rel: &Path) -> String {
    let parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    match parts.as_slice() {
        [m, f, ..] if m == "model" && f == "forward" => "model::forward".into(),
        [m, ..] => m.clone(),
        [] => String::new(),
    }
}

/// The layers a line names through `crate::` paths.
fn named(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let after = &rest[name.len()..];
        if name == "model" && after.starts_with("::forward") {
            out.push("model::forward".into());
        } else if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

#[test]
fn no_module_imports_one_to_its_right() {
    let order = order();
    let rank = |m: &str| order.iter().position(|o| o == m);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut bad = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let own = layer_of(rel);
        if OUTSIDE.contains(&own.as_str()) {
            continue;
        }
        let Some(r) = rank(&own) else {
            bad.push(format!(
                "{}: module `{own}` is not in the order",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for m in named(code) {
                if let Some(t) = rank(&m) {
                    if t > r {
                        bad.push(format!("{}:{}: `{own}` names `{m}`", rel.display(), i + 1));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "imports to the right:\n{}", bad.join("\n"));
}

/// The commands, the server and the benches drive the engine through its methods
/// (`engine/rows.rs`, `Engine::step`, `Engine::prefill`, …), never through its forward: a
/// `.fwd` outside comments under `src/cli`, `src/server` or `src/bench` fails.
#[test]
fn callers_do_not_reach_through_the_engine() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut bad = Vec::new();
    for dir in ["cli", "server", "bench"] {
        let mut files = Vec::new();
        rust_files(&src.join(dir), &mut files);
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                let hit = code.match_indices(".fwd").any(|(at, _)| {
                    let next = code[at + 4..].chars().next();
                    !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                });
                if hit {
                    let rel = f.strip_prefix(&src).unwrap();
                    bad.push(format!("{}:{}: {}", rel.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "reaches through the engine:\n{}",
        bad.join("\n")
    );
}
