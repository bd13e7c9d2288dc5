//! `flint info` on the real model, held to what gguf-py (llama.cpp's Python reader) reads from
//! the same file (tests/data/smollm2_gguf_py.json, made by scripts/gen_gguf_reference.py), and on
//! malformed files: one clear error line and a non-zero exit code other than 101; and on files of
//! the 1-bit and ternary types, with the layout found for each type id 42 (Q2_0) tensor.

use crate::common;

use std::process::Command;

use serde_json::Value;

fn flint(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .output()
        .expect("run flint")
}

fn reference() -> Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/smollm2_gguf_py.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn info_json_matches_gguf_py() {
    let model = common::model_path();
    let out = flint(&["info", model.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let want = reference();
    assert_eq!(got["version"], want["version"]);
    assert_eq!(got["architecture"], "llama");
    assert_eq!(got["tensors"].as_array().unwrap().len(), 272);
    assert_eq!(got["tensors"], want["tensors"]);
    let counts = &got["totals"]["by_type"];
    assert_eq!(counts["Q4_1"]["tensors"], 210);
    assert_eq!(counts["F32"]["tensors"], 61);
    assert_eq!(counts["Q8_0"]["tensors"], 1);
    let meta = got["metadata"].as_object().unwrap();
    let want_meta = want["metadata"].as_object().unwrap();
    assert_eq!(meta.len(), want_meta.len());
    for (key, w) in want_meta {
        let g = &meta[key];
        if let Some(n) = w.get("array_len") {
            let len = match g {
                Value::Array(a) => a.len() as u64,
                _ => g["len"].as_u64().unwrap(),
            };
            assert_eq!(len, n.as_u64().unwrap(), "{key}");
        } else if let Some(x) = w.as_f64().filter(|_| !w.is_i64() && !w.is_u64()) {
            assert!(
                (g.as_f64().unwrap() - x).abs() <= x.abs() * 1e-6,
                "{key}: {g} vs {w}"
            );
        } else {
            assert_eq!(g, w, "{key}");
        }
    }
}

#[test]
fn info_text_lists_metadata_tensors_and_totals() {
    let model = common::model_path();
    let out = flint(&["info", model.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("architecture: llama"));
    assert!(text.contains("llama.attention.head_count_kv"));
    assert!(text.contains("tensors (272):"));
    assert!(text.contains("(49144 more)"), "long arrays are summarised");
    for ty in ["Q4_1", "F32", "Q8_0"] {
        assert!(text.contains(ty));
    }
}

#[test]
fn malformed_file_gives_one_error_line_and_exit_code() {
    let dir = std::env::temp_dir().join(format!("flint-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "magic.gguf",
            b"NOPE\x03\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0".to_vec(),
        ),
        ("trunc.gguf", common::fixture_bytes()[..5000].to_vec()),
        ("empty.gguf", Vec::new()),
    ];
    for (name, bytes) in cases {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let out = flint(&["info", p.to_str().unwrap()]);
        let code = out.status.code().unwrap();
        assert!(code != 0 && code != 101, "{name}: exit {code}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.starts_with("error: "), "{err}");
    }
    let out = flint(&["info", dir.join("missing.gguf").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    std::fs::remove_dir_all(&dir).ok();
}

/// Files of the 1-bit and ternary types, written by flint's writer: `info` lists each tensor's
/// type, and for type id 42 the layout the parser found (text and JSON). One file per id-42
/// layout, since a file holds only one.
#[test]
fn info_lists_ternary_types_and_q2_0_layouts() {
    use flint::gguf::{GgmlType as T, GgufWriter};
    let dir = common::temp_dir("info-ternary");
    let files = [
        ("g64", [T::Q2_0, T::Q1_0, T::TQ1_0], "g64 (mainline)"),
        (
            "g128",
            [T::Q2_0_G128, T::PQ2_0, T::TQ2_0],
            "g128 (PrismML legacy)",
        ),
    ];
    for (label, types, note) in files {
        let mut w = GgufWriter::new();
        for (i, ty) in types.iter().enumerate() {
            let n = ty.row_bytes(256).unwrap() * 16;
            w.add_tensor(
                &format!("t{i}.{ty}"),
                &[256, 16],
                *ty,
                vec![0x3C; n as usize],
            )
            .unwrap();
        }
        let path = dir.path().join(format!("{label}.gguf"));
        w.write_file(&path).unwrap();
        let path = path.to_str().unwrap();

        let out = flint(&["info", path, "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let tensors = v["tensors"].as_array().unwrap();
        assert_eq!(tensors.len(), 3);
        for (t, ty) in tensors.iter().zip(types) {
            assert_eq!(t["type"], ty.name(), "{label}: {t}");
            assert_eq!(t["bytes"], ty.row_bytes(256).unwrap() * 16, "{label}: {t}");
            match ty.layout_note() {
                Some(n) => assert_eq!(t["layout"], n, "{label}: {t}"),
                None => assert!(t.get("layout").is_none(), "{label}: {t}"),
            }
        }
        assert_eq!(v["totals"]["by_type"]["Q2_0"]["layout"], note);

        let out = flint(&["info", path]);
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("offset  layout"), "{text}");
        for (i, ty) in types.iter().enumerate() {
            let name = format!(" t{i}.{ty} ");
            let row = text
                .lines()
                .find(|l| l.contains(&name))
                .unwrap_or_else(|| panic!("{label}: no row for {ty}:\n{text}"));
            assert!(row.contains(&format!(" {} ", ty.name())), "{row}");
            assert_eq!(row.ends_with(note), ty.layout_note().is_some(), "{row}");
        }
    }
}
