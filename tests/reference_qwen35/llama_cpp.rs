//! The hybrid oracle against llama.cpp (CPU backend, build 11434): fixtures
//! `tests/data/qwen35/<name>.gguf` with `<name>.logits.json` = `{"tokens": [...], "prefix": P,
//! "n_vocab": V, "logits": [[V floats] per position]}`, llama.cpp's logits with the first `P`
//! tokens decoded as one batch (its chunked DeltaNet) and the rest one at a time (its recurrent
//! DeltaNet). The oracle runs the same schedule and must give, at every position:
//!
//! - logits within [`MAX_ABS_F32`] of llama.cpp's for a file of float weights (measured, over
//!   tiny-a / tiny-b / tiny-c: at most 9.8e-5, tiny-b), and within [`MAX_REL_QUANT`] of the
//!   largest |logit| for quantized weights, which llama.cpp's CPU dot products meet with the
//!   activations rounded to q8_0 while the oracle keeps them f32 (measured: tiny-a-q1, Q1_0,
//!   0.19 of 7.49, 2.5 %);
//! - the same greedy token wherever the oracle's top-2 margin is at least [`MARGIN`] (below
//!   that, rounding may legitimately swap a near tie; measured: no position differs).

use std::path::{Path, PathBuf};

use flint::gguf::{GgmlType, GgufFile};
use flint::reference::forward::{Capture, Rows};
use flint::reference::hybrid::RefHybridModel;
use flint::reference::meta::RefLayerKind;
use flint::reference::ops::argmax;

/// Largest |oracle − llama.cpp| on any logit, float weights (10× the worst measured).
const MAX_ABS_F32: f32 = 1e-3;
/// Largest |oracle − llama.cpp| on any logit over the largest |logit|, quantized weights (2×
/// the worst measured).
const MAX_REL_QUANT: f32 = 0.05;
/// Top-2 margin under which the greedy tokens may differ.
const MARGIN: f32 = 0.1;

struct Fixture {
    tokens: Vec<u32>,
    prefix: usize,
    n_vocab: usize,
    logits: Vec<Vec<f32>>,
}

fn read_fixture(path: &Path) -> Fixture {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let uint = |x: &serde_json::Value| x.as_u64().unwrap_or_else(|| panic!("{x} not a count"));
    let tokens: Vec<u32> = v["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| uint(t) as u32)
        .collect();
    let logits: Vec<Vec<f32>> = v["logits"]
        .as_array()
        .expect("logits")
        .iter()
        .map(|row| {
            row.as_array()
                .expect("a logits row")
                .iter()
                .map(|x| x.as_f64().expect("a logit") as f32)
                .collect()
        })
        .collect();
    Fixture {
        tokens,
        prefix: uint(&v["prefix"]) as usize,
        n_vocab: uint(&v["n_vocab"]) as usize,
        logits,
    }
}

/// `(model, logits json)` pairs under `tests/data/qwen35`; a model without its logits (or the
/// reverse) is an error.
fn fixtures() -> Vec<(PathBuf, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/qwen35");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut names: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    names.sort();
    let mut pairs = Vec::new();
    for p in &names {
        let file = p.file_name().unwrap().to_string_lossy().to_string();
        if let Some(stem) = file.strip_suffix(".gguf") {
            let json = dir.join(format!("{stem}.logits.json"));
            assert!(json.exists(), "{} has no {}", p.display(), json.display());
            pairs.push((p.clone(), json));
        } else if let Some(stem) = file.strip_suffix(".logits.json") {
            let model = dir.join(format!("{stem}.gguf"));
            assert!(model.exists(), "{} has no {}", p.display(), model.display());
        }
    }
    pairs
}

/// The two largest values of `x`, largest first.
fn top2(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((f32::NEG_INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
            if v > a {
                (v, a)
            } else {
                (a, b.max(v))
            }
        })
}

#[test]
fn the_oracle_matches_llama_cpp_on_every_position() {
    let pairs = fixtures();
    if pairs.is_empty() {
        eprintln!("no fixtures under tests/data/qwen35: nothing compared");
        return;
    }
    let mut results = Vec::new();
    for (model, json) in pairs {
        let fx = read_fixture(&json);
        let name = model.file_name().unwrap().to_string_lossy().to_string();
        let file = GgufFile::open(&model).unwrap();
        let m = RefHybridModel::load(&file).unwrap();
        let nv = m.hp.n_vocab as usize;
        let float = |ty: GgmlType| matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        let quantized = file.gguf.tensors.iter().any(|t| !float(t.ty));
        assert_eq!(
            (fx.n_vocab, fx.logits.len()),
            (nv, fx.tokens.len()),
            "{name}"
        );
        assert!(
            fx.prefix >= 1 && fx.prefix <= fx.tokens.len(),
            "{name}: prefix"
        );

        // The prefix as one batch (every row's logits), then one token at a time.
        let mut st = m.new_state(GgmlType::F32).unwrap();
        let all = Capture {
            rows: Rows::All,
            ..Capture::default()
        };
        let mut ours = m
            .forward(&mut st, &fx.tokens[..fx.prefix], 0, &all)
            .unwrap()
            .logits;
        for (p, &t) in fx.tokens.iter().enumerate().skip(fx.prefix) {
            ours.extend(m.forward_last(&mut st, &[t], p).unwrap());
        }

        let (mut max_diff, mut max_logit, mut flips) = (0f32, 0f32, 0);
        for (p, (row, want)) in ours.chunks_exact(nv).zip(&fx.logits).enumerate() {
            assert_eq!(want.len(), nv, "{name} position {p}");
            let d = row
                .iter()
                .zip(want)
                .fold(0f32, |a, (x, y)| a.max((x - y).abs()));
            max_diff = max_diff.max(d);
            max_logit = want.iter().fold(max_logit, |a, &x| a.max(x.abs()));
            let (a, b) = top2(row);
            let (ours_top, theirs_top) = (argmax(row, nv)[0], argmax(want, nv)[0]);
            if ours_top != theirs_top {
                flips += 1;
                assert!(
                    a - b < MARGIN,
                    "{name} position {p}: greedy {ours_top} vs llama.cpp {theirs_top}, margin {}",
                    a - b
                );
            }
        }
        let (hp, hy) = (&m.hp, &m.hy);
        eprintln!(
            "{name}: d {} layers {} (attention at {:?}), heads {}/{} of {}, n_rot {}, DeltaNet \
             k {}×{} v {}×{}, {}weights; {} positions ({} batched): max |Δ logit| \
             {max_diff:.3e} (max |logit| {max_logit:.2}), {flips} near-tie greedy flips",
            hp.n_embd,
            hp.n_layer,
            (0..hy.kinds.len())
                .filter(|&il| hy.kind(il) == Some(RefLayerKind::Attention))
                .collect::<Vec<_>>(),
            hp.n_head,
            hp.n_head_kv,
            hp.head_dim,
            hp.n_rot,
            hy.n_k_heads,
            hy.head_k_dim,
            hy.n_v_heads,
            hy.head_v_dim,
            if quantized { "quantized " } else { "float " },
            fx.tokens.len(),
            fx.prefix
        );
        results.push((name, max_diff, max_logit, quantized));
    }
    for (name, max_diff, max_logit, quantized) in results {
        if quantized {
            let rel = max_diff / max_logit;
            assert!(
                rel <= MAX_REL_QUANT,
                "{name}: max |Δ logit| {max_diff}, {rel} of the largest"
            );
        } else {
            assert!(max_diff <= MAX_ABS_F32, "{name}: max |Δ logit| {max_diff}");
        }
    }
}
