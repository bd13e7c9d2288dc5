//! The engine wrapper against llguidance's documented behaviour, on a byte-level vocabulary.

use super::*;

#[test]
fn unsupported_schema_keyword_is_named() {
    let spec = GrammarSpec::JsonSchema(serde_json::json!({
        "type": "array", "items": {"type": "integer"}, "uniqueItems": true
    }));
    let e = compile(&spec)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("uniqueItems"), "{e}");
}

#[test]
fn bad_regex_and_lark_fail() {
    assert!(compile(&GrammarSpec::Regex("(ab".into())).is_err());
    assert!(compile(&GrammarSpec::Lark("start: (".into())).is_err());
    let ok = GrammarSpec::JsonSchema(serde_json::json!({"type": "object",
        "properties": {"a": {"type": "integer"}}, "required": ["a"]}));
    assert!(compile(&ok).is_ok());
}

#[test]
fn mask_bits() {
    let m = [0b101u32, 1 << 31];
    assert!(allowed(&m, 0) && !allowed(&m, 1) && allowed(&m, 2) && allowed(&m, 63));
    assert!(!allowed(&m, 62) && !allowed(&m, 64));
}
