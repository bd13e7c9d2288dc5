//! `POST /v1/embeddings` of `flint serve`, held to two outside references: the CPU oracle
//! (`flint::reference::forward`, which shares no code with the GPU path) and the official
//! `openai` Python client (tests/serve/embeddings_client.py).
//!
//! The oracle: for token-id inputs (the prompts of the reference fixture, and one input longer
//! than a prefill ubatch so the job runs in several steps), the served vector must point the
//! same way as the mean over the input's rows of the oracle's `result_norm` (the final hidden
//! state after the output norm, before the LM head), L2-normalised: cosine ≥ [`MIN_COSINE`].
//! Both the turn-taking worker (one slot) and the batched worker (two slots) are checked.

use crate::client;
use crate::harness;

use std::time::Duration;

use flint::gguf::{GgmlType, GgufFile};
use flint::reference::forward::{Capture, RefModel, Rows};
use flint::reference::ops::rms_norm;
use harness::{script, serial, Server};
use serde_json::{json, Value};

/// Cosine between the served vector and the oracle's, at least. Measured on lavapipe (Mesa
/// 22.3): 1 - cosine was at most 6.1e-8 over these inputs, on both workers (the GPU runs the
/// Q4_1 weights and an f16 K/V cache against the oracle's exact f32 dequantization). Another
/// pooling of the same rows (the last row alone) scores 0.52 to 0.91: the test asserts it fails.
const MIN_COSINE: f64 = 0.9999;

fn fixture_prompts() -> Vec<Vec<u32>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/fixtures/smollm2_reference.json"
    );
    let text = std::fs::read_to_string(path).expect("read the fixture");
    let v: Value = serde_json::from_str(&text).expect("parse the fixture");
    v["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            c["prompt_ids"]
                .as_array()
                .expect("prompt_ids")
                .iter()
                .map(|t| t.as_u64().expect("a token id") as u32)
                .collect()
        })
        .collect()
}

/// The oracle's final hidden states `[T, n_embd]`: the residual stream after the last layer
/// (tap `n_layer`) through the output norm, as its `result_norm` is computed (without the LM
/// head over every row, which would triple the oracle's time).
fn oracle_rows(m: &RefModel, ids: &[u32]) -> Vec<f32> {
    let mut cache = m.new_cache(GgmlType::F32).expect("a cache");
    let n_layer = m.hp.n_layer as usize;
    let cap = Capture {
        rows: Rows::None,
        taps: vec![n_layer],
        ..Capture::default()
    };
    let out = m.forward(&mut cache, ids, 0, &cap).expect("oracle forward");
    let (_, x) = out.taps.first().expect("the last layer's output");
    let d = m.hp.n_embd as usize;
    rms_norm(x, d, Some(&m.weights.output_norm), m.hp.rms_eps)
}

/// The mean of rows `[n, d]`, L2-normalised.
fn pooled(rows: &[f32], d: usize) -> Vec<f64> {
    let n = (rows.len() / d) as f64;
    let mut mean = vec![0f64; d];
    for row in rows.chunks_exact(d) {
        for (s, x) in mean.iter_mut().zip(row) {
            *s += f64::from(*x) / n;
        }
    }
    let norm = mean.iter().map(|x| x * x).sum::<f64>().sqrt();
    mean.iter().map(|x| x / norm).collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// The served vectors of `inputs` (token ids), asked in one request.
fn served(s: &Server, inputs: &[Vec<u32>]) -> Vec<Vec<f64>> {
    let body = json!({"input": inputs, "model": "any"}).to_string();
    let (code, text) = client::http(&s.addr, "POST", "/v1/embeddings", &[], Some(&body))
        .expect("POST /v1/embeddings");
    assert_eq!(code, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    let n_tokens: usize = inputs.iter().map(Vec::len).sum();
    assert_eq!(v["usage"]["prompt_tokens"], n_tokens, "{}", v["usage"]);
    v["data"]
        .as_array()
        .expect("data")
        .iter()
        .enumerate()
        .map(|(i, d)| {
            assert_eq!(d["index"], i);
            d["embedding"]
                .as_array()
                .expect("a float vector")
                .iter()
                .map(|x| x.as_f64().expect("a number"))
                .collect()
        })
        .collect()
}

#[test]
fn served_vectors_match_the_cpu_oracle_on_both_workers() {
    let file = GgufFile::open(&harness::model()).expect("open the model");
    let m = RefModel::load(&file).expect("load the oracle");
    let mut inputs = fixture_prompts();
    inputs.truncate(6);
    // Longer than a prefill ubatch (512 rows): the job runs as several steps.
    let long: Vec<u32> = fixture_prompts()
        .concat()
        .into_iter()
        .cycle()
        .take(520)
        .collect();
    inputs.push(long);
    let d = m.hp.n_embd as usize;
    let t0 = std::time::Instant::now();
    let rows: Vec<Vec<f32>> = inputs.iter().map(|ids| oracle_rows(&m, ids)).collect();
    eprintln!("oracle: {:.1} s", t0.elapsed().as_secs_f64());
    let want: Vec<Vec<f64>> = rows.iter().map(|r| pooled(r, d)).collect();
    // Another pooling (the last row alone) must miss the bound: the check can tell them apart.
    let last: Vec<Vec<f64>> = rows.iter().map(|r| pooled(&r[r.len() - d..], d)).collect();
    // The oracle ran outside the lock: it starts no server.
    let _g = serial();
    for args in [vec![], vec!["-np", "2", "-c", "2048"]] {
        let s = Server::start(&args);
        let got = served(&s, &inputs);
        s.stop();
        let mut worst = 1.0f64;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.len(), w.len(), "input {i}: width");
            let c = cosine(g, w);
            let other = cosine(g, &last[i]);
            eprintln!(
                "{args:?} input {i} ({} tokens): 1 - cosine {:.2e} (last-row pooling: {other:.3})",
                inputs[i].len(),
                1.0 - c
            );
            worst = worst.min(c);
            assert!(
                c >= MIN_COSINE,
                "{args:?} input {i}: cosine {c} < {MIN_COSINE}"
            );
            if inputs[i].len() > 1 {
                assert!(
                    other < MIN_COSINE,
                    "input {i}: last-row pooling passes too ({other})"
                );
            }
        }
        eprintln!("{args:?}: worst cosine {worst:.6}");
    }
}

#[test]
fn the_openai_client_reads_unit_vectors_equal_for_equal_input() {
    let _g = serial();
    for args in [vec![], vec!["-np", "2", "-c", "2048"]] {
        let s = Server::start(&args);
        let r = script(
            "embeddings_client.py",
            &["--base-url", &s.url()],
            Duration::from_secs(240),
        );
        s.stop();
        assert_eq!(r["width"], 576, "SmolLM2-135M's hidden width: {r}");
    }
}
