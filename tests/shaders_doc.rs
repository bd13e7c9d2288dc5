//! docs/SHADERS.md stays true: its generated table lists every registered (shader, variant)
//! with its bindings, and every shader file. `FLINT_WRITE_SHADER_DOC=1 cargo test --release
//! --test all_kernels shaders_doc` rewrites the table after a change.

use std::collections::BTreeMap;

use flint::gpu::shaders::SHADER_SOURCES;
use flint::gpu::BindingKind;

const BEGIN: &str = "<!-- BEGIN GENERATED TABLE -->";
const END: &str = "<!-- END GENERATED TABLE -->";

fn table() -> String {
    let mut by_shader: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for v in flint::kernels::all_variants() {
        let bindings: Vec<String> = v
            .bindings
            .iter()
            .map(|b| {
                let kind = match b.kind {
                    BindingKind::Uniform => "uniform",
                    BindingKind::StorageRead => "read",
                    BindingKind::StorageReadWrite => "read_write",
                };
                format!("{}:{kind}", b.binding)
            })
            .collect();
        let mut needs = Vec::new();
        if v.requires_f16 {
            needs.push("f16");
        }
        if v.requires_subgroups {
            needs.push("subgroups");
        }
        if v.requires_int64 {
            needs.push("int64");
        }
        by_shader.entry(v.shader).or_default().push(format!(
            "| `{}` | `{}` | {} | {} |",
            v.shader,
            v.key(),
            if needs.is_empty() {
                "-".to_string()
            } else {
                needs.join(", ")
            },
            bindings.join(" ")
        ));
    }
    let mut out = String::new();
    out.push_str("| shader | variant (defines;overrides@entry) | needs | bindings (group 0) |\n");
    out.push_str("|---|---|---|---|\n");
    for rows in by_shader.values() {
        for r in rows {
            out.push_str(r);
            out.push('\n');
        }
    }
    let includes: Vec<&str> = SHADER_SOURCES
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| n.starts_with("common/"))
        .collect();
    out.push_str(&format!(
        "\nShared include files: {}.\n",
        includes
            .iter()
            .map(|n| format!("`shaders/{n}.wgsl`"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out
}

#[test]
fn shader_doc_table_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/SHADERS.md");
    let doc = std::fs::read_to_string(path).expect("docs/SHADERS.md");
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/SHADERS.md lacks the generated-table markers");
    };
    let current = &doc[b + BEGIN.len()..e];
    let want = format!("\n{}", table());
    if std::env::var_os("FLINT_WRITE_SHADER_DOC").is_some() {
        let new = format!("{}{}{}{}", &doc[..b], BEGIN, want, &doc[e..]);
        std::fs::write(path, new).unwrap();
        return;
    }
    assert_eq!(current, want, "docs/SHADERS.md is stale: run FLINT_WRITE_SHADER_DOC=1 cargo test --release --test all_kernels shaders_doc");
    for (name, _) in SHADER_SOURCES {
        assert!(
            doc.contains(name),
            "docs/SHADERS.md does not mention shaders/{name}.wgsl"
        );
    }
}
