//! The CPU forward oracle (`flint::reference::forward`) on SmolLM2-135M-Instruct Q4_1 against
//! the fixtures in `tests/data/fixtures/` (subset of the project's reference outputs, see its
//! README): the float reference (weights dequantized exactly, f32 activations and KV — what the
//! oracle computes) and llama.cpp's CPU backend. Plus prefill/decode agreement, taps and named
//! activations, quantized caches. (Tiny synthetic qwen2 / qwen3 / llama-3 models: the unit tests
//! in `src/reference/forward/tests.rs`.)

use crate::common;

use std::sync::OnceLock;

use flint::gguf::{GgmlType, GgufFile};
use flint::reference::forward::{Capture, ForwardError, RefModel, Rows};
use flint::reference::ops::argmax;
use half::f16;
use serde_json::Value;

/// Greedy steps compared per prompt at most (each stops earlier at a near-tie).
const MAX_GREEDY: usize = 24;
/// A step whose float-reference margin (top-1 minus top-2) is below this is a near-tie.
const NEAR_TIE: f64 = 0.1;

fn model() -> &'static RefModel {
    static M: OnceLock<RefModel> = OnceLock::new();
    M.get_or_init(|| {
        let file = GgufFile::open(&common::model_path()).expect("open the model");
        RefModel::load(&file).expect("load the model")
    })
}

struct Case {
    cat: String,
    prompt_ids: Vec<u32>,
    float_tokens: Vec<u32>,
    float_margins: Vec<f64>,
    float_top1: u32,
    llamacpp_top1: u32,
    ids: Vec<usize>,
    float_logits: Vec<f32>,
    llamacpp_logits: Vec<f32>,
}

fn cases() -> Vec<Case> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/fixtures/smollm2_reference.json"
    );
    let text = std::fs::read_to_string(path).expect("read the fixture");
    let v: Value = serde_json::from_str(&text).expect("parse the fixture");
    let nums = |c: &Value, k: &str| -> Vec<f64> {
        c[k].as_array()
            .unwrap_or_else(|| panic!("{k}"))
            .iter()
            .map(|x| x.as_f64().expect("number"))
            .collect()
    };
    v["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| Case {
            cat: c["cat"].as_str().expect("cat").to_string(),
            prompt_ids: nums(c, "prompt_ids").iter().map(|&x| x as u32).collect(),
            float_tokens: nums(c, "float_tokens").iter().map(|&x| x as u32).collect(),
            float_margins: nums(c, "float_margins"),
            float_top1: c["float_top1"].as_u64().expect("float_top1") as u32,
            llamacpp_top1: c["llamacpp_top1"].as_u64().expect("llamacpp_top1") as u32,
            ids: nums(c, "ids").iter().map(|&x| x as usize).collect(),
            float_logits: nums(c, "float_logits").iter().map(|&x| x as f32).collect(),
            llamacpp_logits: nums(c, "llamacpp_logits")
                .iter()
                .map(|&x| x as f32)
                .collect(),
        })
        .collect()
}

fn n_vocab() -> usize {
    model().hp.n_vocab as usize
}

/// Max |a[id] - b| over the fixture's ids.
fn max_diff_at(logits: &[f32], ids: &[usize], want: &[f32]) -> f32 {
    ids.iter()
        .zip(want)
        .map(|(&id, &w)| (logits[id] - w).abs())
        .fold(0.0, f32::max)
}

#[test]
fn fixture_prompts_agree_with_the_float_reference() {
    let m = model();
    let (mut worst_float, mut worst_cpp, mut compared) = (0.0f32, 0.0f32, 0);
    for c in cases() {
        // Last-position logits after the prompt.
        let mut cache = m.new_cache(GgmlType::F32).unwrap();
        let mut logits = m.forward_last(&mut cache, &c.prompt_ids, 0).unwrap();
        let top1 = argmax(&logits, n_vocab())[0];
        let d_float = max_diff_at(&logits, &c.ids, &c.float_logits);
        let d_cpp = max_diff_at(&logits, &c.ids, &c.llamacpp_logits);
        assert_eq!(
            top1, c.float_top1,
            "{}: top-1 vs the float reference",
            c.cat
        );
        assert_eq!(top1, c.llamacpp_top1, "{}: top-1 vs llama.cpp CPU", c.cat);
        // Observed ≤ 1.1e-5 over the whole vocabulary (numpy's f32 sums against the oracle's
        // f64 sums, i.e. f32 rounding): 1e-4 leaves ~10×.
        assert!(d_float <= 1e-4, "{}: max |Δ| {d_float} vs float", c.cat);
        // llama.cpp CPU quantizes activations to 8 bits in its dot products: up to 0.77 here.
        assert!(d_cpp <= 1.0, "{}: max |Δ| {d_cpp} vs llama.cpp", c.cat);
        (worst_float, worst_cpp) = (worst_float.max(d_float), worst_cpp.max(d_cpp));

        // Greedy decoding, one token per call, up to the reference's first near-tie.
        let n_prompt = c.prompt_ids.len();
        for (i, (&want, &margin)) in c.float_tokens.iter().zip(&c.float_margins).enumerate() {
            if i == MAX_GREEDY || margin < NEAR_TIE {
                break;
            }
            let got = argmax(&logits, n_vocab())[0];
            assert_eq!(got, want, "{}: greedy step {i} (margin {margin})", c.cat);
            compared += 1;
            logits = m.forward_last(&mut cache, &[got], n_prompt + i).unwrap();
        }
    }
    println!(
        "max |Δ| vs float {worst_float:.2e}, vs llama.cpp {worst_cpp:.3}; {compared} greedy steps"
    );
    assert!(compared >= 100, "too few greedy steps compared: {compared}");
}

#[test]
fn prefill_then_decode_equals_one_prefill_and_rollback_repeats() {
    let m = model();
    let ids = &cases()[1].prompt_ids; // 10 tokens
    let n = ids.len() - 1;
    let mut a = m.new_cache(GgmlType::F32).unwrap();
    m.forward_last(&mut a, &ids[..n], 0).unwrap();
    let step = m.forward_last(&mut a, &ids[n..], n).unwrap();
    let mut b = m.new_cache(GgmlType::F32).unwrap();
    let all = Capture {
        rows: Rows::All,
        ..Capture::default()
    };
    let out = m.forward(&mut b, ids, 0, &all).unwrap();
    assert_eq!(out.rows, (0..ids.len()).collect::<Vec<_>>());
    assert_eq!(out.logits.len(), ids.len() * n_vocab());
    // Fixed reduction orders: in fact bit-identical (the bound is what the brief asks).
    let last = &out.logits[n * n_vocab()..];
    let d = step
        .iter()
        .zip(last)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(d <= 1e-4, "max |Δ| {d}");
    assert_eq!(step, last);
    // Rollback: the last token again at position n over the full cache drops and redoes it.
    assert_eq!(m.forward_last(&mut b, &ids[n..], n).unwrap(), step);
    assert_eq!(b.len(), ids.len());
    let err = m
        .forward_last(&mut b, &ids[..1], ids.len() + 1)
        .unwrap_err();
    assert!(matches!(err, ForwardError::Position { .. }), "{err}");
}

#[test]
fn taps_and_named_activations_have_the_documented_shapes() {
    let m = model();
    let (n_layer, d) = (m.hp.n_layer as usize, m.hp.n_embd as usize);
    let (n_head, n_kv, hd) = (
        m.hp.n_head as usize,
        m.hp.n_head_kv as usize,
        m.hp.head_dim as usize,
    );
    let ids = [504u32, 3575, 282, 4649, 314];
    let t = ids.len();
    let cap = Capture {
        rows: Rows::List(vec![4, 1]),
        taps: vec![n_layer, 0, 7],
        named: true,
    };
    let mut cache = m.new_cache(GgmlType::F32).unwrap();
    let out = m.forward(&mut cache, &ids, 0, &cap).unwrap();
    assert_eq!(out.rows, [4, 1]);
    let layers: Vec<usize> = out.taps.iter().map(|(l, _)| *l).collect();
    assert_eq!(layers, [n_layer, 0, 7]);
    for (_, x) in &out.taps {
        assert_eq!(x.len(), t * d); // [T, n_embd]
    }
    let get = |name: &str| out.get(name).unwrap_or_else(|| panic!("{name} missing"));
    // Tap 0 is the embedding rows; tap i the output of layer i - 1; tap n_layer the last one's.
    let embd = &m.weights.token_embd;
    let want0: Vec<f32> = ids
        .iter()
        .flat_map(|&i| embd[i as usize * d..][..d].to_vec())
        .collect();
    assert_eq!(out.taps[1].1, want0);
    assert_eq!(out.taps[2].1, get("l_out-6").data);
    assert_eq!(out.taps[0].1, get(&format!("l_out-{}", n_layer - 1)).data);
    for il in 0..n_layer {
        let shape = |n: &str| get(&format!("{n}-{il}")).shape.clone();
        assert_eq!(shape("q"), [t, n_head, hd]);
        assert_eq!(shape("k"), [t, n_kv, hd]);
        assert_eq!(shape("v"), [t, n_kv, hd]);
        assert_eq!(shape("kqv_out"), [t, n_head * hd]);
        for n in [
            "attn_norm",
            "attn_out",
            "ffn_inp",
            "ffn_norm",
            "ffn_out",
            "l_out",
        ] {
            assert_eq!(shape(n), [t, d], "{n}-{il}");
        }
    }
    assert_eq!(out.named.len(), 10 * n_layer + 2);
    assert_eq!(get("result_norm").shape, [2, d]);
    assert_eq!(get("logits").shape, [2, n_vocab()]);
    assert_eq!(get("logits").data, out.logits);
    // Row order as asked: row 4 first, and it is the last-token logits.
    let mut c2 = m.new_cache(GgmlType::F32).unwrap();
    assert_eq!(
        m.forward_last(&mut c2, &ids, 0).unwrap(),
        out.logits[..n_vocab()]
    );
    // Requests are checked before anything runs.
    let mut bad = |cap: Capture, ids: &[u32]| m.forward(&mut c2, ids, 0, &cap).unwrap_err();
    let taps = Capture {
        taps: vec![n_layer + 1],
        ..Capture::default()
    };
    assert!(matches!(
        bad(taps, &ids),
        ForwardError::TapOutOfRange { .. }
    ));
    let rows = Capture {
        rows: Rows::List(vec![5]),
        ..Capture::default()
    };
    assert!(matches!(
        bad(rows, &ids),
        ForwardError::RowOutOfRange { row: 5, .. }
    ));
    let token = bad(Capture::default(), &[49152]);
    assert!(matches!(
        token,
        ForwardError::TokenOutOfRange { id: 49152, .. }
    ));
    assert!(matches!(
        bad(Capture::default(), &[]),
        ForwardError::EmptyBatch
    ));
    assert_eq!(
        c2.len(),
        ids.len(),
        "a refused request leaves the cache as it was"
    );
}

#[test]
fn quantized_caches_hold_the_reference_quantizer_rows() {
    let m = model();
    let cs = cases();
    for ty in [GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0] {
        for c in cs.iter().take(3) {
            let mut cache = m.new_cache(ty).unwrap();
            let cap = Capture {
                named: true,
                ..Capture::default()
            };
            let out = m.forward(&mut cache, &c.prompt_ids, 0, &cap).unwrap();
            // Layer 2's cache rows are its k / v rounded by the reference quantizer.
            let (k, v) = cache.layer(2).unwrap();
            for (held, name) in [(k, "k-2"), (v, "v-2")] {
                let x = &out.get(name).unwrap().data;
                let want: Vec<f32> = match ty {
                    GgmlType::F16 => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
                    GgmlType::Q8_0 => x.chunks(32).flat_map(q8_0_round_trip).collect(),
                    _ => x.chunks(32).flat_map(q4_0_round_trip).collect(),
                };
                assert_eq!(held, &want[..], "{ty:?} {name}");
            }
            let d = max_diff_at(&out.logits, &c.ids, &c.float_logits);
            let top1 = argmax(&out.logits, n_vocab())[0];
            println!("{ty:?} {}: max |Δ| vs float {d:.3e}, top-1 {top1}", c.cat);
            // Observed over all 12 prompts and the whole vocabulary: f16 ≤ 0.011 (llama.cpp's
            // Vulkan backend, f16 KV, reaches 0.0125), q8_0 ≤ 0.54 with the same top-1; the
            // bounds are about 2× those. q4_0 moves logits by up to 8 (7.3 over the three
            // prompts here, at least 3.5) and changes 3 of 12 top-1s: it is held to 2× the
            // worst, and to more than q8_0's bound, so a q4_0 cache that rounded like q8_0 (or
            // not at all) fails.
            match ty {
                GgmlType::F16 => assert!(d <= 0.02 && top1 == c.float_top1, "{d}"),
                GgmlType::Q8_0 => assert!(d <= 1.0 && top1 == c.float_top1, "{d}"),
                _ => assert!(d > 1.0 && d <= 16.0, "{d}"),
            }
        }
    }
}

/// One block of 32 values through ggml's reference q8_0 quantizer and back, written out here:
/// `d = amax / 127` stored as f16, `q = round(x / d)` (halves away from zero), value `q · d`.
fn q8_0_round_trip(x: &[f32]) -> Vec<f32> {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let dh = f16::from_f32(d).to_f32();
    x.iter().map(|&v| (v * id).round() * dh).collect()
}

/// One block of 32 values through ggml's reference q4_0 quantizer and back: `d = max / -8`
/// (`max` the value of largest magnitude, the first on ties) stored as f16,
/// `q = min(15, trunc(x / d + 8.5))`, value `(q − 8) · d`.
fn q4_0_round_trip(x: &[f32]) -> Vec<f32> {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let dh = f16::from_f32(d).to_f32();
    x.iter()
        .map(|&v| (((v * id + 8.5) as i32).min(15) - 8) as f32 * dh)
        .collect()
}
