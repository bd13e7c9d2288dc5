//! The tiny i-quant / MXFP4 models of tests/model_iquant.rs (written by gguf-py's GGUFWriter,
//! scripts/gen_iquant_model.py) against llama.cpp: tests/data/iquant_llama_cpp/<TYPE>.json
//! holds llama.cpp's greedy tokens and logits on the same file (llama-cpp-python on the CPU,
//! scripts/llamacpp_iquant/make_fixtures.py). Each step runs teacher-forced on llama.cpp's own
//! tokens, so one near-tie cannot shift the steps after it. The same check runs on files
//! llama.cpp's own quantizer made from an F32 model (`llama_model_quantize`, what
//! `llama-quantize` runs: IQ4_NL, IQ4_XS, IQ3_S, with its Q6_K LM head), committed beside their
//! fixtures (scripts/llamacpp_iquant/quantize_fixtures.py).
//!
//! llama.cpp rounds the activations to 8 bits inside these dot products (Q8_K for the lattice
//! types and IQ4_XS, Q8_0 for IQ4_NL and MXFP4); flint keeps them f32, as its CPU oracle (a float
//! forward over gguf-py-exact dequantized weights) does. So flint's logits are held to llama.cpp's
//! within a bound from measurement, and its greedy token to llama.cpp's except where the oracle's
//! own top-1 / top-2 margin is small enough for that rounding to swap them.

use crate::common;

use flint::gguf::{GgmlType, GgufFile};
use flint::reference::forward::RefModel;
use sha2::{Digest, Sha256};

/// Logits NMSE of flint (GPU and oracle alike) against llama.cpp, per step. Measured worst over
/// 8 steps (lavapipe): IQ4_NL 3.2e-4, IQ4_XS 1.1e-3, MXFP4 6.2e-4, IQ3_XXS 1.0e-3, IQ3_S 1.5e-3,
/// IQ2_XXS 1.1e-3, IQ2_XS 9.6e-4, IQ2_S 1.0e-3, IQ1_S 1.1e-3, IQ1_M 9.4e-4; llama-quantize files
/// IQ4_NL 6.3e-4, IQ4_XS 7.5e-4, IQ3_S 9.5e-4 (largest |Δ| 0.145, IQ3_S). One step's logits
/// against the previous step's are 2.2e-2 apart at the least (IQ3_XXS, the same token fed
/// twice), so the bound still tells steps apart: the negative control below.
const LLAMA_NMSE: f64 = 5e-3;
/// A step whose oracle top-1 / top-2 margin is below this may differ from llama.cpp's token: twice
/// the largest |Δ| measured, the most a rounding of that size can swap. Measured: 6 of 104 steps
/// differ, at oracle margins up to 0.067.
const LLAMA_NEAR_TIE: f32 = 0.3;

/// One type's llama.cpp record.
struct Fixture {
    sha256: String,
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/iquant_llama_cpp");

/// The fixture `DATA/<name>.json`.
fn fixture(name: &str) -> Fixture {
    let path = format!("{DATA}/{name}.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(j.get("refused").is_none(), "{path}: llama.cpp refused it");
    let ids = |k: &str| -> Vec<u32> {
        j[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    let logits = j["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let row = row.as_array().unwrap();
            row.iter().map(|v| v.as_f64().unwrap() as f32).collect()
        })
        .collect();
    Fixture {
        sha256: j["sha256"].as_str().unwrap().to_string(),
        prompt: ids("prompt"),
        tokens: ids("tokens"),
        logits,
    }
}

/// Writes the type's tiny model with gguf-py, as the fixture's maker did (the same bytes).
fn write_model(ty: GgmlType, path: &std::path::Path, want_sha: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gen_iquant_model.py");
    let out = common::gguf_py::python(script)
        .arg(ty.name())
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install python3"));
    assert!(
        out.status.success(),
        "{script} {ty} failed (gguf-py and numpy from common::gguf_py):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        sha256(path),
        want_sha,
        "{ty}: the file differs from the one llama.cpp ran (another gguf version than the \
         fixture's?): rerun scripts/llamacpp_iquant/make_fixtures.py"
    );
}

fn sha256(path: &std::path::Path) -> String {
    format!("{:x}", Sha256::digest(std::fs::read(path).unwrap()))
}

/// Top-1 and its margin over the runner-up.
fn top2(logits: &[f32]) -> (u32, f32) {
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    (idx[0] as u32, logits[idx[0]] - logits[idx[1]])
}

/// The gguf-py model of type `ty` against llama.cpp.
fn check(ty: GgmlType) {
    let fx = fixture(ty.name());
    let tmp = common::temp_dir("iquant-llama");
    let path = tmp.path().join(format!("{}.gguf", ty.name()));
    write_model(ty, &path, &fx.sha256);
    check_file(ty.name(), &path, &fx);
}

/// Flint's GPU forward and its oracle against llama.cpp's run `fx` of the file at `path`.
fn check_file(ty: &str, path: &std::path::Path, fx: &Fixture) {
    let file = GgufFile::open(path).unwrap();
    let ctx = common::gpu::ctx();
    let mut fwd = common::forward::gpu_forward(&ctx, &file, &common::forward::params(64, 16));
    let oracle = RefModel::load(&file).unwrap();
    let mut cache = oracle.new_cache(GgmlType::F16).unwrap();
    let (mut feed, mut pos) = (fx.prompt.clone(), 0);
    let (mut worst, mut worst_abs, mut prev) = (0f64, 0f32, None::<Vec<f32>>);
    // Steps where the oracle's token is not llama.cpp's, and the largest oracle margin among them.
    let (mut ties, mut tie_margin) = (0, 0f32);
    for (step, (&want, theirs)) in fx.tokens.iter().zip(&fx.logits).enumerate() {
        fwd.step(&ctx, &feed, 1).unwrap();
        let gpu = fwd.logits(&ctx).unwrap();
        let cpu = oracle.forward_last(&mut cache, &feed, pos).unwrap();
        for (who, ours) in [("GPU", &gpu), ("oracle", &cpu)] {
            let e = common::gpu::nmse(ours, theirs);
            assert!(
                e <= LLAMA_NMSE,
                "{ty} step {step}: {who} vs llama.cpp NMSE {e:e}"
            );
            worst = worst.max(e);
            worst_abs = worst_abs.max(common::gpu::max_abs(ours, theirs));
        }
        // Negative control: the bound tells this step's logits from the previous step's.
        if let Some(p) = prev.replace(gpu.clone()) {
            let e = common::gpu::nmse(&p, theirs);
            assert!(
                e > LLAMA_NMSE,
                "{ty} step {step}: the previous step matches ({e:e})"
            );
        }
        let (oracle_top, margin) = top2(&cpu);
        let got = fwd.argmax(&ctx).unwrap()[0];
        if oracle_top != want {
            ties += 1;
            tie_margin = tie_margin.max(margin);
        }
        for (who, tok) in [("GPU", got), ("oracle", oracle_top)] {
            assert!(
                tok == want || margin < LLAMA_NEAR_TIE,
                "{ty} step {step}: {who} token {tok}, llama.cpp {want} (oracle margin {margin})"
            );
        }
        pos += feed.len();
        feed = vec![want];
    }
    eprintln!(
        "{ty}: vs llama.cpp worst logits NMSE {worst:.2e}, max |Δ| {worst_abs:.3}; \
         {ties} of {} steps differ, at oracle margins up to {tie_margin:.3}",
        fx.tokens.len()
    );
    common::gpu::assert_clean(&ctx);
}

#[test]
fn iq4_and_mxfp4_models_match_llama_cpp() {
    check(GgmlType::IQ4_NL);
    check(GgmlType::IQ4_XS);
    check(GgmlType::MXFP4);
}

#[test]
fn iq3_models_match_llama_cpp() {
    check(GgmlType::IQ3_XXS);
    check(GgmlType::IQ3_S);
}

#[test]
fn iq2_models_match_llama_cpp() {
    check(GgmlType::IQ2_XXS);
    check(GgmlType::IQ2_XS);
    check(GgmlType::IQ2_S);
}

#[test]
fn iq1_models_match_llama_cpp() {
    check(GgmlType::IQ1_S);
    check(GgmlType::IQ1_M);
}

/// Files llama.cpp's quantizer wrote (its default recipe for the file type: every matrix and the
/// token embedding in the type, the LM head Q6_K).
#[test]
fn llama_quantize_files_match_llama_cpp() {
    use GgmlType::*;
    for ty in [IQ4_NL, IQ4_XS, IQ3_S] {
        let name = format!("quantized-{}", ty.name());
        let fx = fixture(&name);
        let path = std::path::PathBuf::from(format!("{DATA}/{name}.gguf"));
        assert_eq!(
            sha256(&path),
            fx.sha256,
            "{name}.gguf is not the file its fixture ran"
        );
        let file = GgufFile::open(&path).unwrap();
        for (t, want) in [
            ("token_embd.weight", ty),
            ("blk.0.attn_q.weight", ty),
            ("blk.1.ffn_down.weight", ty),
            ("output.weight", Q6_K),
        ] {
            assert_eq!(file.tensor(t).unwrap().ty, want, "{name}: {t}");
        }
        check_file(&name, &path, &fx);
    }
}
