//! Shader registry checks, no GPU needed: every registered (shader, variant) is preprocessed,
//! parsed by naga's WGSL front end and validated under exactly the capabilities the runtime can
//! request (baseline and every combination of +f16, +subgroups, +int64); its global bindings are reflected and compared
//! with the Rust-side spec. Also: the preprocessor's rules and errors, and build.rs's include
//! expansion (cycle check, include-once, path rules), which this file includes directly.

use std::collections::{BTreeMap, BTreeSet};

use flint::gpu::shaders::{shader_names, SHADER_SOURCES};
use flint::gpu::{preprocess, shader_source, BindingKind, BindingSpec, GpuError, ShaderVariant};
use naga::valid::{Capabilities, ValidationFlags, Validator};

#[allow(dead_code)]
mod build_script {
    include!("../build.rs");
}

/// The optional features the runtime requests, and the naga capability each one grants (as
/// wgpu-core's `features_to_naga_capabilities` maps them). Baseline = [`BASELINE`] only,
/// stricter than any real adapter's downlevel set.
const OPTIONAL: [(&str, Capabilities); 3] = [
    ("shader-f16", Capabilities::SHADER_FLOAT16),
    ("subgroups", Capabilities::SUBGROUP),
    ("shader-int64", Capabilities::SHADER_INT64),
];

fn wants(v: &ShaderVariant, feature: &str) -> bool {
    match feature {
        "shader-f16" => v.requires_f16,
        "subgroups" => v.requires_subgroups,
        "shader-int64" => v.requires_int64,
        other => panic!("no requirement flag for {other}"),
    }
}

/// What every variant may assume: f16 pack/unpack in f32 code (wgpu's `SHADER_F16_IN_F32`
/// downlevel flag, set on every Vulkan, Metal and DX12 adapter; `Family::for_context` checks it
/// before choosing `matmul_rows.wgsl`, the one shader that uses it).
const BASELINE: Capabilities = Capabilities::SHADER_FLOAT16_IN_FLOAT32;

fn validate(source: &str, caps: Capabilities) -> Result<naga::Module, String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    Validator::new(ValidationFlags::all(), caps | BASELINE)
        .validate(&module)
        .map_err(|e| e.emit_to_string(source))?;
    Ok(module)
}

fn reflect(module: &naga::Module) -> BTreeSet<(u32, u32, BindingKind)> {
    module
        .global_variables
        .iter()
        .filter_map(|(_, g)| {
            let b = g.binding.as_ref()?;
            let kind = match g.space {
                naga::AddressSpace::Uniform => BindingKind::Uniform,
                naga::AddressSpace::Storage { access } => {
                    if access.contains(naga::StorageAccess::STORE) {
                        BindingKind::StorageReadWrite
                    } else {
                        BindingKind::StorageRead
                    }
                }
                other => panic!("binding {b:?} in unexpected address space {other:?}"),
            };
            Some((b.group, b.binding, kind))
        })
        .collect()
}

fn spec_set(bindings: &[BindingSpec]) -> BTreeSet<(u32, u32, BindingKind)> {
    bindings
        .iter()
        .map(|b| (b.group, b.binding, b.kind))
        .collect()
}

#[test]
fn every_variant_validates_under_exactly_the_requested_capabilities() {
    let variants = flint::kernels::all_variants();
    assert!(!variants.is_empty());
    let mut keys = BTreeSet::new();
    for v in &variants {
        let id = format!("{} [{}]", v.shader, v.key());
        assert!(keys.insert(id.clone()), "duplicate variant {id}");
        let source = v.source().unwrap_or_else(|e| panic!("{id}: {e}"));
        for mask in 0..(1u32 << OPTIONAL.len()) {
            let mut caps = Capabilities::empty();
            let mut granted = Vec::new();
            let mut satisfied = true;
            for (i, (feature, cap)) in OPTIONAL.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    caps |= *cap;
                    granted.push(*feature);
                } else if wants(v, feature) {
                    satisfied = false;
                }
            }
            let result = validate(&source, caps);
            if satisfied {
                let module = result.unwrap_or_else(|e| panic!("{id} with {granted:?}:\n{e}"));
                assert_eq!(
                    reflect(&module),
                    spec_set(v.bindings),
                    "{id}: WGSL bindings differ from the Rust BindingSpec"
                );
                let ep = module.entry_points.iter().find(|e| e.name == v.entry_point);
                let ep = ep.unwrap_or_else(|| panic!("{id}: no entry point {}", v.entry_point));
                assert_eq!(ep.stage, naga::ShaderStage::Compute, "{id}");
                for (name, _) in &v.overrides {
                    assert!(
                        module
                            .overrides
                            .iter()
                            .any(|(_, o)| o.name.as_deref() == Some(name)),
                        "{id}: override {name} is not declared in the WGSL"
                    );
                }
            } else {
                assert!(
                    result.is_err(),
                    "{id} validates with only {granted:?}: its requires_* flags overstate"
                );
            }
        }
    }
}

#[test]
fn every_entry_shader_is_used_by_some_variant() {
    let used: BTreeSet<&str> = flint::kernels::all_variants()
        .iter()
        .map(|v| v.shader)
        .collect();
    for name in shader_names().filter(|n| !n.starts_with("common/")) {
        assert!(
            used.contains(name),
            "shaders/{name}.wgsl has no registered variant"
        );
    }
    for name in &used {
        shader_source(name).unwrap();
    }
    assert!(matches!(
        shader_source("nope"),
        Err(GpuError::UnknownShader { .. })
    ));
}

#[test]
fn runtime_variant_choice_is_registered() {
    use flint::gguf::GgmlType;
    use flint::kernels::dequant;
    let all = flint::kernels::all_variants();
    for ty in dequant::SUPPORTED_TYPES {
        for (f16, sg) in [(false, false), (true, false), (false, true), (true, true)] {
            let v = dequant::variant(ty, f16, sg).unwrap();
            assert!(all.contains(&v), "{ty} f16={f16} sg={sg} not registered");
            assert!(!v.requires_f16 || f16, "{ty}: needs f16 without asking");
            assert!(
                !v.requires_subgroups || sg,
                "{ty}: needs subgroups without asking"
            );
        }
    }
    assert!(matches!(
        dequant::variant(GgmlType::Q4_K, false, false),
        Err(GpuError::UnsupportedType { .. })
    ));
}

#[test]
fn embedded_sources_match_the_files_on_disk() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let load = |name: &str| std::fs::read_to_string(root.join(name)).map_err(|e| e.to_string());
    assert!(SHADER_SOURCES.iter().any(|(n, _)| *n == "common/bytes"));
    for (name, embedded) in SHADER_SOURCES {
        let file = format!("{name}.wgsl");
        let fresh =
            build_script::expand_includes(&file, &load, &mut Vec::new(), &mut BTreeSet::new())
                .unwrap();
        assert_eq!(&fresh, embedded, "{file} changed since the build");
    }
}

// ---- preprocessor ----

fn pp(src: &str, defines: &[(&str, &str)]) -> Result<String, GpuError> {
    let d: Vec<(&str, String)> = defines.iter().map(|(n, v)| (*n, v.to_string())).collect();
    preprocess("test", src, &d)
}

fn kept(out: &str) -> Vec<&str> {
    out.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[test]
fn nested_conditionals() {
    let src = "\
#ifdef A
a
#ifndef B
a_not_b
#else
a_b
#ifdef C
a_b_c
#endif
#endif
#else
not_a
#ifdef B
not_a_b
#endif
#endif
end
";
    type Defines<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Defines, &[&str]); 5] = [
        (&[], &["not_a", "end"]),
        (&[("B", "")], &["not_a", "not_a_b", "end"]),
        (&[("A", "")], &["a", "a_not_b", "end"]),
        (&[("A", ""), ("B", "")], &["a", "a_b", "end"]),
        (
            &[("A", ""), ("B", ""), ("C", "")],
            &["a", "a_b", "a_b_c", "end"],
        ),
    ];
    for (defines, expected) in cases {
        let out = pp(src, defines).unwrap();
        assert_eq!(kept(&out), expected, "defines {defines:?}");
        assert_eq!(out.lines().count(), src.lines().count(), "line count kept");
    }
}

#[test]
fn defines_substitute_whole_identifiers_and_respect_conditionals() {
    let src = "\
#define WG 64u
#ifdef WIDE
#define WG 256u
#endif
#define PAIR WG, WG
@workgroup_size(WG) // WG stays in comments
let x = WGS + PAIR + TYPE;
";
    let out = pp(src, &[("TYPE", "f32")]).unwrap();
    assert_eq!(
        kept(&out),
        [
            "@workgroup_size(64u) // WG stays in comments",
            "let x = WGS + 64u, 64u + f32;"
        ]
    );
    // A file define that contradicts an active one is an error, not a silent override.
    let err = pp(src, &[("WIDE", "")]).unwrap_err();
    assert!(matches!(err, GpuError::Preprocess { line: 3, .. }), "{err}");
}

#[test]
fn preprocessor_errors_name_the_line() {
    let cases: [(&str, usize, &str); 8] = [
        ("a\n#ifdef X\nb\n", 2, "unterminated"),
        ("a\n#ifndef X\n#ifdef Y\n#endif\n", 2, "unterminated"),
        ("a\n#if X\n#endif\n", 2, "unknown directive #if"),
        (
            "#include \"common/bytes.wgsl\"\n",
            1,
            "unknown directive #include",
        ),
        ("a\nb\n#endif\n", 3, "#endif without"),
        ("#else\n", 1, "#else without"),
        ("#ifdef X\n#else\n#else\n#endif\n", 3, "second #else"),
        ("#define 9x 1\n", 1, "#define needs a name"),
    ];
    for (src, line, needle) in cases {
        match pp(src, &[]) {
            Err(GpuError::Preprocess {
                line: l, message, ..
            }) => {
                assert_eq!(l, line, "{src:?}: {message}");
                assert!(message.contains(needle), "{src:?}: {message}");
            }
            other => panic!("{src:?}: expected a Preprocess error, got {other:?}"),
        }
    }
    assert!(matches!(
        preprocess("t", "x\n", &[("not an ident", String::new())]),
        Err(GpuError::Preprocess { line: 0, .. })
    ));
}

#[test]
fn preprocessor_errors_point_into_included_files() {
    let src = "a\n//#begin \"common/x.wgsl\"\nx1\n#oops\n//#end \"common/x.wgsl\"\nb\n";
    let err = pp(src, &[]).unwrap_err();
    let GpuError::Preprocess { line, message, .. } = err else {
        panic!("{err:?}")
    };
    assert_eq!(line, 4);
    assert!(message.contains("common/x.wgsl:2"), "{message}");
    let err = pp("a\n//#begin \"c.wgsl\"\n//#end \"c.wgsl\"\n#bad\n", &[]).unwrap_err();
    assert!(err.to_string().contains("test.wgsl:3"), "{err}");
}

#[test]
fn dump_writes_every_variant_to_its_own_file() {
    // `source()` calls `dump_to` when DUMP_SHADERS is set; the environment is left alone here
    // because the other tests of this binary run in parallel.
    let dir = std::env::temp_dir().join(format!("flint-dump-{}", std::process::id()));
    let variants = flint::kernels::all_variants();
    let mut paths = BTreeSet::new();
    for v in &variants {
        let text = v.source().unwrap();
        let path = v.dump_to(&dir, &text).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        assert!(
            paths.insert(path),
            "{} [{}] shares a dump file",
            v.shader,
            v.key()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- build.rs include expansion ----

fn expand(files: &[(&str, &str)], entry: &str) -> Result<String, String> {
    let map: BTreeMap<String, String> = files
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    let load = |name: &str| {
        map.get(name)
            .cloned()
            .ok_or_else(|| format!("no file {name}"))
    };
    build_script::expand_includes(entry, &load, &mut Vec::new(), &mut BTreeSet::new())
}

#[test]
fn includes_expand_once_with_markers() {
    let files = [
        (
            "main.wgsl",
            "#include \"common/a.wgsl\"\n#include \"common/b.wgsl\"\nmain\n",
        ),
        (
            "common/a.wgsl",
            "  #include \"common/b.wgsl\" // helpers\na\n",
        ),
        ("common/b.wgsl", "b\n"),
    ];
    let out = expand(&files, "main.wgsl").unwrap();
    assert_eq!(
        out,
        "//#begin \"common/a.wgsl\"\n//#begin \"common/b.wgsl\"\nb\n//#end \"common/b.wgsl\"\n\
         a\n//#end \"common/a.wgsl\"\n//#skip \"common/b.wgsl\" (already included)\nmain\n"
    );
}

#[test]
fn include_cycles_and_bad_paths_are_errors() {
    let files = [
        ("main.wgsl", "#include \"a.wgsl\"\n"),
        ("a.wgsl", "#include \"b.wgsl\"\n"),
        ("b.wgsl", "x\n#include \"a.wgsl\"\n"),
    ];
    let err = expand(&files, "main.wgsl").unwrap_err();
    assert!(err.contains("cycle: a.wgsl -> b.wgsl -> a.wgsl"), "{err}");
    assert!(err.contains("included from main.wgsl:1"), "{err}");
    let err = expand(&[("m.wgsl", "#include \"m.wgsl\"\n")], "m.wgsl").unwrap_err();
    assert!(err.contains("cycle: m.wgsl -> m.wgsl"), "{err}");
    for bad in [
        "#include common/a.wgsl",
        "#include \"\"",
        "#include \"a\" junk",
    ] {
        let err = expand(&[("m.wgsl", bad)], "m.wgsl").unwrap_err();
        assert!(err.contains("m.wgsl:1: malformed #include"), "{bad}: {err}");
    }
    let err = expand(&[("m.wgsl", "#include \"../x.wgsl\"")], "m.wgsl").unwrap_err();
    assert!(err.contains("must stay under shaders/"), "{err}");
    let err = expand(&[("m.wgsl", "#include \"gone.wgsl\"")], "m.wgsl").unwrap_err();
    assert!(err.contains("no file gone.wgsl"), "{err}");
}
