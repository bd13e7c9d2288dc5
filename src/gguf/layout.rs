//! Type id 42 names two block layouts: mainline ggml's Q2_0 (64 elements in 18 bytes) and the
//! 128-element Q2_0 of PrismML's legacy files (34 bytes, [`GgmlType::Q2_0_G128`]). Nothing in a
//! file says which, so each id-42 tensor is measured against its extent in the data section:
//! the space up to the next tensor's offset (in offset order), or for the last tensor up to the
//! end of the file. A layout fits when its size is at most the extent and the rest, the padding
//! before the next aligned offset, is under the alignment.
//!
//! Per tensor: one layout fits → decided; none can → [`GgufError::Q2_0LayoutFitsNeither`];
//! both fit (tiny tensors: the sizes differ by `n_elements / 64` bytes), or the extent is
//! unknown (the last tensor of a shape-only file) or runs past the data (bytes after the last
//! tensor) → undecided. All decided tensors must agree ([`GgufError::Q2_0LayoutsDisagree`]);
//! undecided ones take their layout, and with none decided the file is refused
//! ([`GgufError::Q2_0LayoutUndecidable`]). Never a guess.

use super::error::GgufError;
use super::tensor_info::TensorInfo;
use super::types::GgmlType;

/// What one id-42 tensor's extent says.
enum Verdict {
    Decided(GgmlType),
    /// Why the extent cannot tell.
    Undecided(String),
}

/// The sizes of tensor `t` (read as mainline Q2_0) in both layouts: `(g64, g128)`, g128 `None`
/// when its rows are not a whole number of 128-element blocks (or the size overflows).
fn sizes(t: &TensorInfo) -> (u64, Option<u64>) {
    let g128 = GgmlType::Q2_0_G128
        .row_bytes(t.row_len())
        .and_then(|rb| rb.checked_mul(t.n_rows()));
    (t.n_bytes, g128)
}

/// Turn every id-42 tensor into [`GgmlType::Q2_0`] or [`GgmlType::Q2_0_G128`] (setting its
/// byte size), or fail. `data_len`: bytes from the data offset to the end of the file, `None`
/// for a shape-only file.
pub(crate) fn resolve_id42_layouts(
    tensors: &mut [TensorInfo],
    alignment: u64,
    data_len: Option<u64>,
) -> Result<(), GgufError> {
    if !tensors.iter().any(|t| t.ty == GgmlType::Q2_0) {
        return Ok(());
    }
    // Indices in offset order (ties in file order): the next one bounds each extent.
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors.get(i).map_or(0, |t| t.offset));
    let mut verdicts: Vec<(usize, Verdict)> = Vec::new();
    for (pos, &i) in order.iter().enumerate() {
        let Some(t) = tensors.get(i).filter(|t| t.ty == GgmlType::Q2_0) else {
            continue;
        };
        let next = order
            .get(pos + 1)
            .and_then(|&j| tensors.get(j))
            .map(|n| n.offset);
        verdicts.push((i, verdict(t, next, data_len, alignment)?));
    }

    // The decided tensors must agree; the first in file order speaks for them.
    verdicts.sort_by_key(|(i, _)| *i);
    let mut decided: Option<(usize, GgmlType)> = None;
    for (i, v) in &verdicts {
        let Verdict::Decided(ty) = v else { continue };
        match decided {
            None => decided = Some((*i, *ty)),
            Some((first, fty)) if fty != *ty => return Err(disagree(tensors, first, fty, *i, *ty)),
            Some(_) => {}
        }
    }
    let Some((first, layout)) = decided else {
        let undecided = verdicts.iter().find_map(|(i, v)| match v {
            Verdict::Undecided(why) => Some((*i, why.clone())),
            Verdict::Decided(_) => None,
        });
        let Some((i, why)) = undecided else {
            return Ok(());
        };
        let t = tensors.get(i).cloned();
        let (g64, g128) = t.as_ref().map_or((0, None), sizes);
        return Err(GgufError::Q2_0LayoutUndecidable {
            name: t.map(|t| t.name).unwrap_or_default(),
            g64_bytes: g64,
            g128_bytes: show_size(g128),
            why,
        });
    };
    if layout == GgmlType::Q2_0_G128 {
        for i in 0..tensors.len() {
            let Some(t) = tensors.get_mut(i).filter(|t| t.ty == GgmlType::Q2_0) else {
                continue;
            };
            // A tensor without a g128 size was decided as g64 and failed the agreement check
            // above; keep the error rather than trust that.
            let Some(bytes) = sizes(t).1 else {
                return Err(disagree(tensors, first, layout, i, GgmlType::Q2_0));
            };
            t.ty = GgmlType::Q2_0_G128;
            t.n_bytes = bytes;
        }
    }
    Ok(())
}

/// The verdict of one tensor whose following tensor starts at `next` (if any).
fn verdict(
    t: &TensorInfo,
    next: Option<u64>,
    data_len: Option<u64>,
    alignment: u64,
) -> Result<Verdict, GgufError> {
    let (g64, g128) = sizes(t);
    let Some(g128) = g128 else {
        // Rows of 64·odd elements: mainline's layout is the only one. Its extent still has to
        // hold it where the extent is known.
        let extent = match next {
            Some(n) => Some(n.saturating_sub(t.offset)),
            None => data_len.map(|l| l.saturating_sub(t.offset)),
        };
        return match extent {
            Some(e) if g64 > e || (next.is_some() && e - g64 >= alignment) => {
                Err(neither(t, e, g64, None, alignment))
            }
            _ => Ok(Verdict::Decided(GgmlType::Q2_0)),
        };
    };
    let strict = |e: u64, size: u64| size <= e && e - size < alignment;
    let (extent, at_end) = match (next, data_len) {
        (Some(n), _) => (n.saturating_sub(t.offset), false),
        (None, Some(l)) => (l.saturating_sub(t.offset), true),
        (None, None) => {
            return Ok(Verdict::Undecided(
                "it is the last tensor of a shape-only file (no data to measure)".to_string(),
            ))
        }
    };
    match (strict(extent, g64), strict(extent, g128)) {
        (true, false) => Ok(Verdict::Decided(GgmlType::Q2_0)),
        (false, true) => Ok(Verdict::Decided(GgmlType::Q2_0_G128)),
        (true, true) => Ok(Verdict::Undecided(format!(
            "both fit its {extent}-byte extent with padding under the alignment {alignment}"
        ))),
        (false, false) if at_end && g128 <= extent => Ok(Verdict::Undecided(format!(
            "its {extent}-byte extent runs to the end of the file, past the alignment {alignment} \
             beyond either size"
        ))),
        (false, false) => Err(neither(t, extent, g64, Some(g128), alignment)),
    }
}

fn neither(t: &TensorInfo, extent: u64, g64: u64, g128: Option<u64>, alignment: u64) -> GgufError {
    GgufError::Q2_0LayoutFitsNeither {
        name: t.name.clone(),
        offset: t.offset,
        extent,
        g64_bytes: g64,
        g128_bytes: show_size(g128),
        alignment,
    }
}

fn disagree(
    tensors: &[TensorInfo],
    first: usize,
    first_ty: GgmlType,
    other: usize,
    other_ty: GgmlType,
) -> GgufError {
    let describe = |i: usize, ty: GgmlType| {
        tensors.get(i).map_or((String::new(), 0), |t| {
            let (g64, g128) = sizes(t);
            let bytes = if ty == GgmlType::Q2_0 {
                g64
            } else {
                g128.unwrap_or(0)
            };
            (t.name.clone(), bytes)
        })
    };
    let (first, first_bytes) = describe(first, first_ty);
    let (other, other_bytes) = describe(other, other_ty);
    GgufError::Q2_0LayoutsDisagree {
        first,
        first_layout: layout_name(first_ty),
        first_bytes,
        other,
        other_layout: layout_name(other_ty),
        other_bytes,
    }
}

fn layout_name(ty: GgmlType) -> &'static str {
    ty.layout_note().unwrap_or("?")
}

/// A g128 size for messages: the bytes, or why there is none.
fn show_size(g128: Option<u64>) -> String {
    g128.map_or_else(
        || "none (rows not a multiple of 128)".to_string(),
        |b| format!("{b} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use crate::gguf::{GgmlType, Gguf, GgufError, GgufWriter};

    use GgmlType::{F32, Q2_0, Q2_0_G128};

    /// A file of `tensors` (zero data, or none when `shape_only`) as flint's writer makes it.
    fn file(tensors: &[(&str, &[u64], GgmlType)], shape_only: bool) -> Vec<u8> {
        let mut w = GgufWriter::new();
        for (name, shape, ty) in tensors {
            if shape_only {
                w.add_tensor_shape(name, shape, *ty).unwrap();
            } else {
                let rows: u64 = shape.iter().skip(1).product();
                let n = ty.row_bytes(shape[0]).unwrap() * rows;
                w.add_tensor(name, shape, *ty, vec![0x5A; n as usize])
                    .unwrap();
            }
        }
        w.to_bytes().unwrap()
    }

    fn types(bytes: &[u8]) -> Vec<(GgmlType, u64)> {
        let g = Gguf::parse(bytes).unwrap_or_else(|e| panic!("{e}"));
        g.tensors.iter().map(|t| (t.ty, t.n_bytes)).collect()
    }

    #[test]
    fn each_layout_reads_back_as_written() {
        for ty in [Q2_0, Q2_0_G128] {
            for shape_only in [false, true] {
                let bytes = file(
                    &[
                        ("a", &[128, 32], ty),
                        ("n", &[8], F32),
                        ("b", &[256, 8], ty),
                    ],
                    shape_only,
                );
                let want = vec![
                    (ty, ty.row_bytes(128).unwrap() * 32),
                    (F32, 32),
                    (ty, ty.row_bytes(256).unwrap() * 8),
                ];
                assert_eq!(types(&bytes), want, "{ty:?}, shape only {shape_only}");
            }
        }
    }

    #[test]
    fn tiny_tensors_follow_a_decided_one() {
        // 128 elements: 36 or 34 bytes, both fit a 64-byte extent at alignment 32.
        for ty in [Q2_0, Q2_0_G128] {
            let bytes = file(&[("tiny", &[128], ty), ("big", &[128, 32], ty)], false);
            assert_eq!(types(&bytes)[0].0, ty);
        }
        let alone = file(&[("tiny", &[128], Q2_0_G128), ("n", &[8], F32)], false);
        match Gguf::parse(&alone) {
            Err(GgufError::Q2_0LayoutUndecidable {
                name,
                g64_bytes: 36,
                ..
            }) => {
                assert_eq!(name, "tiny");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rows_of_an_odd_number_of_64_blocks_are_mainline() {
        for shape_only in [false, true] {
            let bytes = file(&[("a", &[192, 2], Q2_0)], shape_only);
            assert_eq!(types(&bytes), vec![(Q2_0, 108)]);
        }
    }

    #[test]
    fn bytes_after_the_last_tensor_leave_it_to_the_others() {
        for ty in [Q2_0, Q2_0_G128] {
            let mut bytes = file(&[("a", &[128, 32], ty), ("b", &[128, 32], ty)], false);
            bytes.extend([0u8; 256]);
            assert_eq!(types(&bytes)[1].0, ty);
        }
        let mut alone = file(&[("b", &[128, 32], Q2_0_G128)], false);
        alone.extend([0u8; 256]);
        assert!(matches!(
            Gguf::parse(&alone),
            Err(GgufError::Q2_0LayoutUndecidable { .. })
        ));
    }

    #[test]
    fn shape_only_file_with_one_undecided_tensor_is_an_error() {
        let bytes = file(&[("w", &[128, 32], Q2_0)], true);
        let e = Gguf::parse(&bytes).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, GgufError::Q2_0LayoutUndecidable { .. }),
            "{e:?}"
        );
        for part in ["'w'", "1152 bytes", "1088 bytes", "shape-only"] {
            assert!(msg.contains(part), "{msg}");
        }
    }
}
