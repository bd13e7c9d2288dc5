// Build script: embeds every `shaders/**/*.wgsl` into `OUT_DIR/shaders.rs`.
//
// `#include "path"` lines (path relative to `shaders/`) are expanded here, recursively, with
// include-once semantics (a file already expanded into the current entry is skipped, so shared
// helpers may be included from several places) and a cycle check whose error names the chain.
// Each included text is wrapped in `//#begin "path"` / `//#end "path"` marker comments so the
// runtime preprocessor (`src/gpu/shaders.rs`) can report errors against the original file.
// Everything else (`#define`, `#ifdef`, …) is left for the runtime preprocessor.
//
// Output: `pub static SHADER_SOURCES: &[(&str, &str)]`, `(name, expanded source)`, sorted by
// name, where the name is the path under `shaders/` without `.wgsl` (`dequant`, `common/bytes`).
// No network, no Python: only `std`. The expansion functions take a loader closure so
// `tests/shaders.rs` can include this file and test the cycle logic on in-memory files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Expands the `#include` lines of `name` (a path under `shaders/`, e.g. `dequant.wgsl`).
///
/// `load` returns a file's text or an error message. `stack` is the chain of files being expanded
/// (for the cycle check) and `seen` the files already expanded into this entry (include-once).
pub fn expand_includes(
    name: &str,
    load: &dyn Fn(&str) -> Result<String, String>,
    stack: &mut Vec<String>,
    seen: &mut BTreeSet<String>,
) -> Result<String, String> {
    if let Some(pos) = stack.iter().position(|s| s == name) {
        let mut chain: Vec<&str> = stack[pos..].iter().map(String::as_str).collect();
        chain.push(name);
        return Err(format!("#include cycle: {}", chain.join(" -> ")));
    }
    let text = load(name)?;
    stack.push(name.to_string());
    seen.insert(name.to_string());
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix("#include") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let path = parse_include_path(rest)
            .ok_or_else(|| format!("{name}:{}: malformed #include: {trimmed}", i + 1))?;
        if path.contains("..") || path.starts_with('/') || path.contains('\\') {
            return Err(format!(
                "{name}:{}: #include path must stay under shaders/: {path}",
                i + 1
            ));
        }
        // A file still on the stack is a cycle (reported by the call below), not a repeat.
        if seen.contains(path) && !stack.iter().any(|s| s == path) {
            out.push_str(&format!("//#skip \"{path}\" (already included)\n"));
            continue;
        }
        let inner = expand_includes(path, load, stack, seen)
            .map_err(|e| format!("{e}\n  included from {name}:{}", i + 1))?;
        out.push_str(&format!("//#begin \"{path}\"\n"));
        out.push_str(&inner);
        out.push_str(&format!("//#end \"{path}\"\n"));
    }
    stack.pop();
    Ok(out)
}

/// The path of an `#include "path"` directive (the text after `#include`), or `None`.
fn parse_include_path(rest: &str) -> Option<&str> {
    let rest = rest.trim();
    let inner = rest.strip_prefix('"')?;
    let end = inner.find('"')?;
    let tail = inner[end + 1..].trim();
    if end == 0 || !(tail.is_empty() || tail.starts_with("//")) {
        return None;
    }
    Some(&inner[..end])
}

/// Every `.wgsl` file under `dir`, as paths relative to `root` with `/` separators, sorted.
fn collect_wgsl(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("reading {}: {e}", dir.display()))?;
        let path = entry.path();
        if path.is_dir() {
            collect_wgsl(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "wgsl") {
            let rel = path
                .strip_prefix(root)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push(parts.join("/"));
        }
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?;
    let out_dir = std::env::var("OUT_DIR").map_err(|e| e.to_string())?;
    let root = PathBuf::from(manifest).join("shaders");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=shaders");

    let mut files = Vec::new();
    if root.is_dir() {
        collect_wgsl(&root, &root, &mut files)?;
    }
    files.sort();
    for dir in files
        .iter()
        .filter_map(|f| f.rsplit_once('/').map(|(d, _)| d))
    {
        println!("cargo:rerun-if-changed=shaders/{dir}");
    }

    let load = |name: &str| -> Result<String, String> {
        std::fs::read_to_string(root.join(name)).map_err(|e| format!("reading shaders/{name}: {e}"))
    };
    let mut generated = String::from(
        "// Generated by build.rs from shaders/**/*.wgsl: (name, source with #include expanded).\n\
         pub static SHADER_SOURCES: &[(&str, &str)] = &[\n",
    );
    for file in &files {
        println!("cargo:rerun-if-changed=shaders/{file}");
        let expanded = expand_includes(file, &load, &mut Vec::new(), &mut BTreeSet::new())?;
        let name = file.strip_suffix(".wgsl").unwrap_or(file);
        generated.push_str(&format!("    ({name:?}, {expanded:?}),\n"));
    }
    generated.push_str("];\n");
    let dest = PathBuf::from(out_dir).join("shaders.rs");
    std::fs::write(&dest, generated).map_err(|e| format!("writing {}: {e}", dest.display()))
}

fn main() {
    if let Err(message) = run() {
        eprintln!("error: shader embedding failed: {message}");
        std::process::exit(1);
    }
}
