//! Type id 42 (Q2_0: mainline's 64-element layout or PrismML's legacy 128-element one) and
//! PrismML's type ids: each malformed case its own error variant naming the values.

use super::*;

// ── type id 42 (Q2_0: mainline g64 or PrismML's legacy g128) and PrismML ids ─────────────────
const Q2_0_ID: u32 = 42;

/// `Gguf::parse(bytes)`'s error, which must be one line naming every one of `parts`.
fn error_naming(bytes: &[u8], parts: &[&str]) -> E {
    let e = Gguf::parse(bytes).expect_err("must be refused");
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "{msg}");
    for part in parts {
        assert!(msg.contains(part), "{part:?} not in: {msg}");
    }
    e
}

// A [128, 32] id-42 tensor needs 1152 bytes as g64 and 1088 as g128; the next tensor at 1024
// leaves room for neither, and at 1280 too much for either (padding must stay under 32).
rejects!(
    q2_0_fits_neither_layout,
    with_tensors(
        &[("w", &[128, 32], Q2_0_ID, 0), ("b", &[8], F32, 1024)],
        1056
    ),
    E::Q2_0LayoutFitsNeither { extent: 1024, .. }
);

#[test]
fn q2_0_fits_neither_layout_names_the_tensor_and_both_sizes() {
    for next in [1024u64, 1280] {
        let bytes = with_tensors(
            &[("w", &[128, 32], Q2_0_ID, 0), ("b", &[8], F32, next)],
            next as usize + 32,
        );
        let extent = next.to_string();
        match error_naming(&bytes, &["'w'", "1152", "1088", &extent, "32"]) {
            E::Q2_0LayoutFitsNeither {
                name,
                offset: 0,
                extent: got,
                g64_bytes: 1152,
                g128_bytes,
                alignment: 32,
            } => {
                assert_eq!((name.as_str(), got), ("w", next));
                assert_eq!(g128_bytes, "1088 bytes");
            }
            other => panic!("next at {next}: {other:?}"),
        }
    }
    // The last tensor against the end of the data: 1000 bytes hold neither.
    let bytes = with_tensors(&[("w", &[128, 32], Q2_0_ID, 0)], 1000);
    assert!(matches!(
        error_naming(&bytes, &["'w'", "1152", "1088", "1000"]),
        E::Q2_0LayoutFitsNeither { extent: 1000, .. }
    ));
}

// "a" fits only g64 (1152 bytes up to "b"), "b" only g128 (1088 bytes up to "c").
rejects!(
    q2_0_layouts_disagree,
    with_tensors(
        &[
            ("a", &[128, 32], Q2_0_ID, 0),
            ("b", &[128, 32], Q2_0_ID, 1152),
            ("c", &[8], F32, 2240),
        ],
        2272
    ),
    E::Q2_0LayoutsDisagree { .. }
);

#[test]
fn q2_0_layouts_disagree_names_both_tensors_and_sizes() {
    let bytes = with_tensors(
        &[
            ("a", &[128, 32], Q2_0_ID, 0),
            ("b", &[128, 32], Q2_0_ID, 1152),
            ("c", &[8], F32, 2240),
        ],
        2272,
    );
    let parts = [
        "'a'",
        "'b'",
        "g64 (mainline)",
        "g128 (PrismML legacy)",
        "1152",
        "1088",
    ];
    match error_naming(&bytes, &parts) {
        E::Q2_0LayoutsDisagree {
            first,
            first_bytes: 1152,
            other,
            other_bytes: 1088,
            ..
        } => assert_eq!((first.as_str(), other.as_str()), ("a", "b")),
        other => panic!("{other:?}"),
    }
}

// Shape-only, one id-42 tensor: nothing measures it and no other tensor decides.
rejects!(
    q2_0_undecidable_in_shape_only_file,
    with_tensors(&[("w", &[128, 32], Q2_0_ID, 0)], 0),
    E::Q2_0LayoutUndecidable {
        g64_bytes: 1152,
        ..
    }
);

#[test]
fn q2_0_undecidable_names_the_tensor_and_both_sizes() {
    let bytes = with_tensors(&[("w", &[128, 32], Q2_0_ID, 0)], 0);
    let e = error_naming(&bytes, &["'w'", "1152", "1088", "shape-only"]);
    assert!(matches!(e, E::Q2_0LayoutUndecidable { .. }), "{e:?}");
}

// PrismML's PTQ1_0 (143): named as not supported yet, not as an unknown id.
rejects!(
    prism_ptq1_0_not_supported_yet,
    with_tensors(&[("a", &[128], 143, 0)], 64),
    E::UnsupportedTensorType { type_id: 143, .. }
);

#[test]
fn prism_ptq1_0_error_names_the_id_and_says_not_yet() {
    let bytes = with_tensors(&[("a", &[128], 143, 0)], 64);
    let e = error_naming(&bytes, &["'a'", "143", "PTQ1_0", "not support yet"]);
    assert!(
        matches!(
            e,
            E::UnsupportedTensorType {
                type_name: "PTQ1_0",
                ..
            }
        ),
        "{e:?}"
    );
}
