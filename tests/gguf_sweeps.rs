//! Reliability checklist A3–A4: truncation and mutation sweeps over a valid ~100 KB fixture.
//! Every truncated file is an error; every mutated file parses or errors, never panics, and the
//! parser never allocates more than the file length plus 16 MiB.

mod common;

use common::alloc::{peak_during, Counting};
use common::{fixture_bytes, Rng};
use flint::gguf::Gguf;

#[global_allocator]
static ALLOC: Counting = Counting;

const BOUND_EXTRA: usize = 16 << 20;

#[test]
fn fixture_is_valid_and_about_100kb() {
    let bytes = fixture_bytes();
    assert!((60_000..200_000).contains(&bytes.len()), "{}", bytes.len());
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.tensors.len(), 5);
}

#[test]
fn truncation_sweep_always_errors() {
    let bytes = fixture_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    let header_end = g.data_offset as usize;
    let data_end = bytes.len();
    let mut cuts: Vec<usize> = (0..=header_end).collect();
    // 1,000 evenly spaced cuts through the data section (the last byte included).
    for i in 0..1000 {
        cuts.push(header_end + 1 + (data_end - header_end - 1) * i / 999);
    }
    for cut in cuts {
        if cut >= data_end {
            continue;
        }
        let slice = &bytes[..cut];
        let (res, peak) = peak_during(|| Gguf::parse(slice));
        match res {
            // A file that ends exactly at the data offset is a valid shape-only file.
            Ok(g) => assert!(
                cut == header_end && g.shape_only,
                "truncation at {cut} of {data_end} parsed"
            ),
            Err(_) => assert_ne!(cut, header_end, "shape-only file rejected"),
        }
        assert!(peak <= cut + BOUND_EXTRA, "cut {cut}: peak {peak}");
    }
}

#[test]
fn mutation_sweep_never_panics() {
    let original = fixture_bytes();
    let header_end = Gguf::parse(&original).unwrap().data_offset as usize;
    let mut rng = Rng::new(0x5EED);
    let mut n_ok = 0;
    for _ in 0..10_000 {
        let mut bytes = original.clone();
        let n = 1 + rng.below(8) as usize;
        // Mostly in the header, where the structure is; some anywhere.
        let span = if rng.below(4) == 0 {
            bytes.len()
        } else {
            header_end
        };
        for _ in 0..n {
            let at = rng.below(span as u64) as usize;
            bytes[at] = match rng.below(4) {
                0 => 0xFF,
                1 => 0x00,
                2 => bytes[at] ^ (1 << rng.below(8)),
                _ => rng.next_u64() as u8,
            };
        }
        let (res, peak) = peak_during(|| Gguf::parse(&bytes));
        n_ok += usize::from(res.is_ok());
        assert!(peak <= bytes.len() + BOUND_EXTRA, "peak {peak}");
    }
    // Mutations inside tensor data leave the file valid: some must parse.
    assert!(n_ok > 0);
}
