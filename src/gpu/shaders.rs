//! Shader registry: the WGSL sources `build.rs` embedded (with `#include` already expanded), the
//! tiny preprocessor that turns one into a variant, and [`ShaderVariant`], the unit the pipeline
//! cache builds and the tests validate.
//!
//! The preprocessor understands exactly `#define NAME [value]` (object macros: later whole
//! identifiers `NAME` outside `//` comments are replaced by `value`, rescanned with a recursion
//! guard), `#ifdef NAME`, `#ifndef NAME`, `#else`, `#endif` (nested). Anything else starting with
//! `#` is an error, as are unbalanced conditionals and conflicting redefinitions; errors carry
//! the line number in the expanded source and the original `file:line`. Directive lines and
//! inactive lines become empty lines, so line numbers in naga/wgpu messages match the expanded
//! source and the `DUMP_SHADERS=dir` dumps.
//!
//! The list of every variant the runtime uses lives with the kernels that use them
//! (`crate::kernels::all_variants`), since `gpu` never imports `kernels`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::GpuError;

include!(concat!(env!("OUT_DIR"), "/shaders.rs"));

/// What a binding is, as both the WGSL declaration and the bind-group layout must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BindingKind {
    /// `var<uniform>`
    Uniform,
    /// `var<storage, read>`
    StorageRead,
    /// `var<storage, read_write>`
    StorageReadWrite,
}

/// One `@group(g) @binding(b)` of a shader, Rust side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BindingSpec {
    pub group: u32,
    pub binding: u32,
    pub kind: BindingKind,
}

/// One instantiation of a shader: defines, override constants, needs, bindings.
#[derive(Debug, Clone, PartialEq)]
pub struct ShaderVariant {
    /// Name under `shaders/` without `.wgsl` (`dequant`).
    pub shader: &'static str,
    pub entry_point: &'static str,
    /// Text defines (type and feature switches), as if `#define NAME value` opened the file.
    pub defines: Vec<(&'static str, String)>,
    /// WGSL `override` constants (numeric knobs such as the workgroup size).
    pub overrides: Vec<(&'static str, f64)>,
    pub requires_f16: bool,
    pub requires_subgroups: bool,
    /// 64-bit integers (wgpu's `SHADER_INT64`).
    pub requires_int64: bool,
    /// Every global binding the preprocessed module declares, in order.
    pub bindings: &'static [BindingSpec],
}

impl ShaderVariant {
    /// The cache key: sorted defines, then overrides, then the entry point when it is not
    /// `main` (`TYPE_Q8_0,USE_SUBGROUPS;WG_SIZE=64`, `…;WG_SIZE=64@merge`).
    pub fn key(&self) -> String {
        let mut defines: Vec<String> = self
            .defines
            .iter()
            .map(|(n, v)| {
                if v.is_empty() {
                    n.to_string()
                } else {
                    format!("{n}={v}")
                }
            })
            .collect();
        defines.sort();
        let mut overrides: Vec<String> = self
            .overrides
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        overrides.sort();
        let entry = if self.entry_point == "main" {
            String::new()
        } else {
            format!("@{}", self.entry_point)
        };
        format!("{};{}{entry}", defines.join(","), overrides.join(","))
    }

    /// The preprocessed WGSL of this variant; also written under `DUMP_SHADERS` when set.
    pub fn source(&self) -> Result<String, GpuError> {
        let text = preprocess(self.shader, shader_source(self.shader)?, &self.defines)?;
        if let Some(dir) = dump_dir() {
            self.dump_to(&dir, &text)?;
        }
        Ok(text)
    }

    /// Writes `text` (this variant's preprocessed source) to `dir/<shader>__<key>.wgsl`.
    pub fn dump_to(&self, dir: &Path, text: &str) -> Result<PathBuf, GpuError> {
        let file: String = format!("{}__{}.wgsl", self.shader, self.key())
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._=-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(file);
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&path, text))
            .map_err(|e| GpuError::DumpShader {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
        Ok(path)
    }
}

/// The `DUMP_SHADERS` directory, when the variable is set and not empty.
pub fn dump_dir() -> Option<PathBuf> {
    std::env::var_os("DUMP_SHADERS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The embedded source of `name` (`#include` expanded).
pub fn shader_source(name: &str) -> Result<&'static str, GpuError> {
    SHADER_SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| GpuError::UnknownShader {
            name: name.to_string(),
        })
}

/// Names of every embedded shader, `common/…` helpers included.
pub fn shader_names() -> impl Iterator<Item = &'static str> {
    SHADER_SOURCES.iter().map(|(n, _)| *n)
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One open `#ifdef`/`#ifndef`.
struct Frame {
    outer_active: bool,
    condition: bool,
    in_else: bool,
    line: usize,
}

impl Frame {
    fn active(&self) -> bool {
        self.outer_active && (self.condition != self.in_else)
    }
}

/// Preprocesses `source` (of shader `name`) with `defines` set beforehand. See the module docs.
pub fn preprocess(
    name: &str,
    source: &str,
    defines: &[(&str, String)],
) -> Result<String, GpuError> {
    let mut macros: HashMap<String, String> = HashMap::new();
    for (n, v) in defines {
        if !is_ident(n) {
            return Err(GpuError::Preprocess {
                name: name.to_string(),
                line: 0,
                message: format!("variant define name {n:?} is not an identifier"),
            });
        }
        macros.insert(n.to_string(), v.clone());
    }
    // Origin tracking through build.rs's `//#begin "file"` / `//#end "file"` markers.
    let mut origin: Vec<(String, usize)> = vec![(format!("{name}.wgsl"), 0)];
    let mut frames: Vec<Frame> = Vec::new();
    let mut out = String::with_capacity(source.len());
    for (i, line) in source.lines().enumerate() {
        let lineno = i + 1;
        let trimmed = line.trim_start();
        if let Some(file) = trimmed.strip_prefix("//#begin \"") {
            if let Some(top) = origin.last_mut() {
                top.1 += 1;
            }
            origin.push((file.trim_end_matches('"').to_string(), 0));
            out.push_str(line);
            out.push('\n');
            continue;
        }
        if trimmed.starts_with("//#end \"") && origin.len() > 1 {
            origin.pop();
            out.push_str(line);
            out.push('\n');
            continue;
        }
        if let Some(top) = origin.last_mut() {
            top.1 += 1;
        }
        let err = |message: String| {
            let (file, l) = origin.last().cloned().unwrap_or_default();
            GpuError::Preprocess {
                name: name.to_string(),
                line: lineno,
                message: format!("{message} (at {file}:{l})"),
            }
        };
        let active = frames.last().is_none_or(Frame::active);
        let Some(directive) = trimmed.strip_prefix('#') else {
            if active {
                substitute_line(line, &macros, &mut out);
            }
            out.push('\n');
            continue;
        };
        out.push('\n');
        let directive = directive.split("//").next().unwrap_or("").trim();
        let (word, rest) = directive
            .split_once(char::is_whitespace)
            .map_or((directive, ""), |(w, r)| (w, r.trim()));
        match word {
            "define" => {
                let (macro_name, value) = rest
                    .split_once(char::is_whitespace)
                    .map_or((rest, ""), |(n, v)| (n, v.trim()));
                if !is_ident(macro_name) {
                    return Err(err(format!("#define needs a name, got {rest:?}")));
                }
                if !active {
                    continue;
                }
                match macros.get(macro_name) {
                    Some(old) if old != value => {
                        return Err(err(format!(
                            "#define {macro_name} {value:?} conflicts with earlier value {old:?}"
                        )))
                    }
                    _ => {
                        macros.insert(macro_name.to_string(), value.to_string());
                    }
                }
            }
            "ifdef" | "ifndef" => {
                if !is_ident(rest) {
                    return Err(err(format!("#{word} needs one name, got {rest:?}")));
                }
                frames.push(Frame {
                    outer_active: active,
                    condition: macros.contains_key(rest) == (word == "ifdef"),
                    in_else: false,
                    line: lineno,
                });
            }
            "else" | "endif" if !rest.is_empty() => {
                return Err(err(format!("unexpected text after #{word}: {rest:?}")));
            }
            "else" => match frames.last_mut() {
                None => return Err(err("#else without #ifdef/#ifndef".to_string())),
                Some(f) if f.in_else => {
                    return Err(err(format!("second #else for the #if at line {}", f.line)))
                }
                Some(f) => f.in_else = true,
            },
            "endif" => {
                if frames.pop().is_none() {
                    return Err(err("#endif without #ifdef/#ifndef".to_string()));
                }
            }
            other => {
                return Err(err(format!(
                    "unknown directive #{other} (the preprocessor knows #define, #ifdef, \
                     #ifndef, #else, #endif; #include is expanded by build.rs)"
                )))
            }
        }
    }
    if let Some(f) = frames.last() {
        return Err(GpuError::Preprocess {
            name: name.to_string(),
            line: f.line,
            message: "unterminated #ifdef/#ifndef (no #endif before the end)".to_string(),
        });
    }
    Ok(out)
}

/// Appends `line` with macros substituted in its code part (not in a trailing `//` comment).
fn substitute_line(line: &str, macros: &HashMap<String, String>, out: &mut String) {
    let (code, comment) = match line.find("//") {
        Some(pos) => line.split_at(pos),
        None => (line, ""),
    };
    substitute(code, macros, &mut Vec::new(), out);
    out.push_str(comment);
}

/// Substitutes whole identifiers; `guard` holds the macros being expanded (no recursion).
fn substitute<'m>(
    text: &str,
    macros: &'m HashMap<String, String>,
    guard: &mut Vec<&'m str>,
    out: &mut String,
) {
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let token_len = if c.is_ascii_alphabetic() || c == '_' {
            rest.find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                .unwrap_or(rest.len())
        } else if c.is_ascii_digit() {
            // A number literal (0x1fu, 1e3, 2.5): never an identifier, even its letters.
            rest.find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '.'))
                .unwrap_or(rest.len())
        } else {
            c.len_utf8()
        };
        let (token, tail) = rest.split_at(token_len);
        match macros.get_key_value(token) {
            Some((key, value)) if !guard.contains(&key.as_str()) => {
                guard.push(key.as_str());
                substitute(value, macros, guard, out);
                guard.pop();
            }
            _ => out.push_str(token),
        }
        rest = tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pp(src: &str, defines: &[(&str, &str)]) -> Result<String, GpuError> {
        let d: Vec<(&str, String)> = defines.iter().map(|(n, v)| (*n, v.to_string())).collect();
        preprocess("t", src, &d)
    }

    #[test]
    fn keeps_line_count_and_substitutes_whole_identifiers() {
        let out = pp(
            "#define N 4u\nlet a = N + NN; // N\n#ifdef X\nno\n#endif\n",
            &[],
        )
        .unwrap();
        assert_eq!(out, "\nlet a = 4u + NN; // N\n\n\n\n");
    }

    #[test]
    fn numbers_are_not_identifiers() {
        let out = pp("let a = 0x1fu + x1fu;\n", &[("x1fu", "7"), ("fu", "9")]).unwrap();
        assert_eq!(out, "let a = 0x1fu + 7;\n");
    }

    #[test]
    fn self_reference_does_not_recurse() {
        let out = pp("A\n", &[("A", "A + B"), ("B", "A")]).unwrap();
        assert_eq!(out, "A + A\n");
    }
}
