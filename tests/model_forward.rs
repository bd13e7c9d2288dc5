//! The GPU forward pass of SmolLM2-135M Q4_1 on the real adapter (lavapipe in CI) against the
//! float reference fixture (weights dequantized exactly, f32 activations and KV: what a float
//! runtime should match, see tests/data/fixtures/README.md).

use crate::common;

use flint::gguf::GgufFile;
use flint::memory::{self, Budget, DeviceLimits, RunParams, TargetShape};
use flint::model::forward::{Allocator, Forward, ForwardSpec};
use flint::model::{weights, Hparams};
use serde_json::Value;

fn fixture() -> Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/fixtures/smollm2_reference.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

struct Setup {
    ctx: flint::gpu::GpuContext,
    fwd: Forward,
    plan: memory::Plan,
    allocated: Vec<(String, u64)>,
}

fn setup(params: RunParams) -> Setup {
    setup_with(common::gpu::ctx(), params, true)
}

/// [`setup`] on `ctx`, with the q | k | v matmul doing RoPE and the KV store (`rope_in_qkv`)
/// or not.
fn setup_with(ctx: flint::gpu::GpuContext, params: RunParams, rope_in_qkv: bool) -> Setup {
    let file = GgufFile::open(&common::model_path()).unwrap();
    let hp = Hparams::from_gguf(&file).unwrap();
    let plan = memory::forward_plan(
        TargetShape {
            hp: &hp,
            tensors: &file.tensors,
        },
        None,
        &params,
        Budget::resolve(None, Some(&ctx)),
        DeviceLimits::from_context(&ctx),
    );
    assert!(plan.fits(), "{:?}", plan.misfit_summary());
    let w = weights::load(&ctx, &file, &hp, false).unwrap();
    let mut allocated = w.allocations.clone();
    let mut alloc = Allocator::new(&ctx, &plan);
    let spec = ForwardSpec {
        rope_in_qkv,
        ..ForwardSpec::target(&params)
    };
    let fwd = Forward::with_spec(&ctx, hp, w, &spec, &mut alloc).unwrap();
    allocated.extend(alloc.records);
    Setup {
        ctx,
        fwd,
        plan,
        allocated,
    }
}

/// [`params`] with a drafter of 7 drafts (verify batches of 8 logit rows).
fn draft_params() -> RunParams {
    RunParams {
        draft: Some(memory::DraftParams {
            n_draft: 7,
            inject_chunk: 64,
            type_k: flint::gguf::GgmlType::F16,
            type_v: flint::gguf::GgmlType::F16,
            window: None,
        }),
        ..params()
    }
}

fn params() -> RunParams {
    RunParams {
        n_ctx: 512,
        n_ubatch: 64,
        ..RunParams::default()
    }
}

/// Max |GPU − float reference| over the fixture's logits (its top 64 and every 128th id). The
/// float reference keeps K/V in f32; flint stores them in f16, which moves SmolLM2's logits by a
/// few 1e-3 (llama.cpp's Vulkan backend, also f16 KV, is 0.0125 away on the first prompt).
const LOGIT_BOUND: f64 = 0.02;
/// Greedy tokens compared per prompt (until the reference's own margin drops below 0.1).
const GREEDY_STEPS: usize = 12;

#[test]
fn every_fixture_prompt_matches_the_float_reference() {
    let mut s = setup(params());
    let fx = fixture();
    let mut worst = 0f64;
    for case in fx["cases"].as_array().unwrap() {
        let name = case["prompt"].as_str().unwrap();
        let prompt = u32s(&case["prompt_ids"]);
        s.fwd.kv.reset(0).unwrap();
        s.fwd.step(&s.ctx, &prompt, 1).unwrap();
        let logits = s.fwd.logits(&s.ctx).unwrap();
        let top1 = s.fwd.argmax(&s.ctx).unwrap()[0];
        assert_eq!(
            top1 as u64,
            case["float_top1"].as_u64().unwrap(),
            "{name}: top-1 vs float reference"
        );
        assert_eq!(
            top1 as u64,
            case["llamacpp_top1"].as_u64().unwrap(),
            "{name}: top-1 vs llama.cpp"
        );
        let ids = u32s(&case["ids"]);
        let want = f64s(&case["float_logits"]);
        let cpu = f64s(&case["llamacpp_logits"]);
        let mut diff = 0f64;
        for ((&id, &w), &c) in ids.iter().zip(&want).zip(&cpu) {
            let g = f64::from(logits[id as usize]);
            diff = diff.max((g - w).abs());
            assert!((g - c).abs() < 1.0, "{name}: id {id}: {g} vs llama.cpp {c}");
        }
        assert!(diff <= LOGIT_BOUND, "{name}: max |logit - float| = {diff}");
        worst = worst.max(diff);
        // Greedy continuation up to the first near-tie of the reference.
        let tokens = u32s(&case["float_tokens"]);
        let margins = f64s(&case["float_margins"]);
        let mut t = top1;
        for i in 0..tokens.len().min(GREEDY_STEPS) {
            if margins[i] < 0.1 {
                break;
            }
            assert_eq!(t, tokens[i], "{name}: greedy step {i}");
            s.fwd.step(&s.ctx, &[t], 1).unwrap();
            t = s.fwd.argmax(&s.ctx).unwrap()[0];
        }
    }
    eprintln!("max |logit - float reference| over all prompts: {worst:.5}");
    common::gpu::assert_clean(&s.ctx);
}

/// The GPU forward against the CPU oracle layer by layer: the residual stream after every layer
/// (`l_out-{il}`) for a 37-token prefill and 3 decode steps, both with f16 K/V.
#[test]
fn every_layer_matches_the_cpu_reference() {
    use flint::gguf::GgmlType;
    use flint::reference::forward::{Capture, RefModel, Rows};
    let mut s = setup(params());
    let file = GgufFile::open(&common::model_path()).unwrap();
    let oracle = RefModel::load(&file).unwrap();
    let mut cache = oracle.new_cache(GgmlType::F16).unwrap();
    let n_layer = s.fwd.hp.n_layer as usize;
    let capture = Capture {
        rows: Rows::Last,
        taps: (1..=n_layer).collect(),
        named: false,
    };
    let prompt: Vec<u32> = u32s(&fixture()["cases"][11]["prompt_ids"]);
    let mut worst = 0f64;
    let mut pos = 0;
    let mut step_tokens = prompt.clone();
    for step in 0..4 {
        let gpu = s.fwd.step_captured(&s.ctx, &step_tokens, 1).unwrap();
        let cpu = oracle
            .forward(&mut cache, &step_tokens, pos, &capture)
            .unwrap();
        for (il, (g, (_, r))) in gpu.iter().zip(&cpu.taps).enumerate() {
            assert_eq!(g.len(), r.len(), "layer {il}");
            let scale = r.iter().fold(1f64, |a, &x| a.max(f64::from(x).abs()));
            let err = g
                .iter()
                .zip(r)
                .fold(0f64, |a, (&x, &y)| a.max(f64::from(x - y).abs()));
            let rel = err / scale;
            eprintln!("step {step} layer {il}: max |gpu - cpu| / max(1, max |cpu|) {rel:.3e}");
            // Measured worst on lavapipe: 1.77e-4 (the prefill, the last layer's output; 2.8e-5 to
            // 7.4e-5 elsewhere, 120 cases). Bound 1e-3, ~5.7×: below the usual 10× because the
            // bound was 1e-3 before it was measured and is not widened. Not in the 1e-9 range:
            // 30 layers of f32 sums in orders other than the oracle's, with f16 K/V on both sides
            // (an f32 difference that crosses an f16 rounding boundary can become a 2^-11
            // relative step), and each layer's difference feeds the next.
            assert!(
                rel <= 1e-3,
                "step {step} layer {il}: max |gpu - cpu| = {err} (scale {scale})"
            );
            worst = worst.max(rel);
        }
        pos += step_tokens.len();
        let next = s.fwd.argmax(&s.ctx).unwrap()[0];
        step_tokens = vec![next];
    }
    eprintln!("worst per-layer relative difference: {worst:.2e}");
    common::gpu::assert_clean(&s.ctx);
}

/// DSpark taps: the residual stream entering layers 0, 2, 10 and 30 (= n_layer, before the final
/// norm) for every prompt row, written by the step into a staging buffer, against the oracle's.
#[test]
fn taps_match_the_cpu_reference_for_every_row() {
    use flint::gguf::GgmlType;
    use flint::reference::forward::{Capture, RefModel, Rows};
    let mut s = setup(params());
    let layers = [0u32, 2, 10, 30];
    let d = s.fwd.hp.n_embd as usize;
    let width = d * layers.len();
    let staging = flint::gpu::buffers::create_storage(
        &s.ctx,
        "taps",
        (s.fwd.max_rows() as usize * width * 4) as u64,
    )
    .unwrap();
    s.fwd.set_taps(&s.ctx, &layers, &staging).unwrap();
    let prompt: Vec<u32> = u32s(&fixture()["cases"][1]["prompt_ids"]);
    s.fwd.step(&s.ctx, &prompt, 1).unwrap();
    let bytes =
        flint::gpu::buffers::read_back(&s.ctx, &staging, 0, (prompt.len() * width * 4) as u64)
            .unwrap();
    let gpu: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes);
    let file = GgufFile::open(&common::model_path()).unwrap();
    let oracle = RefModel::load(&file).unwrap();
    let mut cache = oracle.new_cache(GgmlType::F16).unwrap();
    let capture = Capture {
        rows: Rows::Last,
        taps: layers.iter().map(|&l| l as usize).collect(),
        named: false,
    };
    let cpu = oracle.forward(&mut cache, &prompt, 0, &capture).unwrap();
    let mut worst = 0f64;
    for (k, (layer, want)) in cpu.taps.iter().enumerate() {
        assert_eq!(want.len(), prompt.len() * d);
        let scale = want.iter().fold(1f64, |a, &x| a.max(f64::from(x).abs()));
        for r in 0..prompt.len() {
            let got = &gpu[r * width + k * d..r * width + (k + 1) * d];
            let exp = &want[r * d..(r + 1) * d];
            let err = got
                .iter()
                .zip(exp)
                .fold(0f64, |a, (&x, &y)| a.max(f64::from(x - y).abs()));
            eprintln!(
                "tap {layer} row {r}: max |gpu - cpu| / max(1, max |cpu|) {:.3e}",
                err / scale
            );
            worst = worst.max(err / scale);
            // Measured worst on lavapipe: 1.8e-5 (tap 10, row 5; 40 cases). Bound 5e-4, ~28×:
            // tap 30 is the last layer's output, which reaches 1.77e-4 on the 37-token prompt
            // of `every_layer_matches_the_cpu_reference` (~2.8× under this bound). Not in the
            // 1e-9 range for the reasons given there (30 layers, f16 K/V). Was 1e-3.
            assert!(
                err / scale <= 5e-4,
                "tap {layer} row {r}: {err} (scale {scale})"
            );
        }
    }
    eprintln!("worst tap relative difference: {worst:.2e}");
    common::gpu::assert_clean(&s.ctx);
}
/// The record holds the size wgpu reports for every buffer created (a stacked weight once,
/// under its parts' names joined by '+'); each must equal the plan, and every planned weight
/// must equal what the file says it holds, rows × row bytes, worked out here from the GGUF
/// block sizes (not with the kernels' size helpers).
#[test]
fn allocated_buffers_equal_the_plan() {
    let s = setup(params());
    let mut seen = std::collections::HashSet::new();
    for (name, bytes) in &s.allocated {
        let parts: Vec<&str> = name.split('+').collect();
        let planned: u64 = parts
            .iter()
            .map(|p| {
                s.plan
                    .get(p)
                    .unwrap_or_else(|| panic!("{p} allocated but not planned"))
                    .bytes
            })
            .sum();
        assert_eq!(
            *bytes, planned,
            "{name}: allocated (wgpu's size) vs planned"
        );
        seen.extend(parts);
    }
    for b in &s.plan.buffers {
        assert!(
            seen.contains(b.name.as_str()) || b.bytes == 0,
            "{} planned but not allocated",
            b.name
        );
    }
    let file = GgufFile::open(&common::model_path()).unwrap();
    for t in &file.tensors {
        // (elements, bytes) per block: ggml's tables for the types this model holds.
        let (block, size) = match t.ty {
            flint::gguf::GgmlType::F32 => (1, 4),
            flint::gguf::GgmlType::Q4_1 => (32, 20),
            flint::gguf::GgmlType::Q8_0 => (32, 34),
            other => panic!("{}: no block size written here for {other}", t.name),
        };
        let want = t.n_rows() * (t.row_len() / block * size);
        let planned = s.plan.get(&t.name).map(|b| b.bytes);
        assert_eq!(
            planned,
            Some(want),
            "{}: planned vs rows × row bytes",
            t.name
        );
    }
}

/// Lossless speculation rests on this: logits of a verify batch of k+1 rows are bit-identical
/// to the same tokens run one at a time (every kernel reduces in a fixed order per row, and
/// the multi-row attention folds splits exactly like the decode path).
#[test]
fn verify_batch_rows_are_bit_identical_to_decode_steps() {
    let spec = draft_params();
    let mut s = setup(spec);
    let prompt: Vec<u32> = u32s(&fixture()["cases"][2]["prompt_ids"]);
    let draft = [504u32, 3575, 282, 4649, 314, 30, 198];
    let n_vocab = s.fwd.hp.n_vocab as usize;
    // One token at a time.
    s.fwd.step(&s.ctx, &prompt, 1).unwrap();
    let mut sequential = Vec::new();
    for &t in &draft {
        s.fwd.step(&s.ctx, &[t], 1).unwrap();
        sequential.extend(s.fwd.logits(&s.ctx).unwrap());
    }
    // The same tokens as one verify batch, after rolling the cache back.
    s.fwd.kv.truncate_to(0, prompt.len() as u32).unwrap();
    s.fwd.step(&s.ctx, &draft, draft.len() as u32).unwrap();
    let batched = s.fwd.logits(&s.ctx).unwrap();
    assert_eq!(batched.len(), draft.len() * n_vocab);
    for (i, (a, b)) in batched.iter().zip(&sequential).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "row {} logit {}: {a} vs {b}",
            i / n_vocab,
            i % n_vocab
        );
    }
    common::gpu::assert_clean(&s.ctx);
}

/// A 40-row prompt (longer than one 64 KiB X window of 576-wide rows), two decode steps and a
/// 7-row verify batch, each reading the caches the steps before wrote.
const STEP_ROWS: [usize; 4] = [40, 1, 1, 7];

/// The logits of each of the [`STEP_ROWS`] steps and the dispatches each records.
fn run_steps(s: &mut Setup) -> (Vec<Vec<f32>>, Vec<usize>) {
    let prompt: Vec<u32> = u32s(&fixture()["cases"][2]["prompt_ids"]);
    let tokens: Vec<u32> = prompt.iter().cycle().take(49).copied().collect();
    let mut logits = Vec::new();
    let mut dispatches = Vec::new();
    let mut at = 0;
    for rows in STEP_ROWS {
        let t = &tokens[at..at + rows];
        at += rows;
        let (n, n_logits) = (rows as u32, rows.min(7) as u32);
        s.fwd.step(&s.ctx, t, n_logits).unwrap();
        logits.push(s.fwd.logits(&s.ctx).unwrap());
        dispatches.push(s.fwd.record(n, n_logits).unwrap().0.len());
    }
    common::gpu::assert_clean(&s.ctx);
    (logits, dispatches)
}

fn assert_same_bits(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}");
    if let Some(j) = (0..a.len()).find(|&j| a[j].to_bits() != b[j].to_bits()) {
        panic!("{what}: logit {j} differs: {} vs {}", a[j], b[j]);
    }
}

/// RoPE and the KV store done by the q | k | v matmul (`ForwardSpec::rope_in_qkv`, one dispatch
/// less per layer) give the logits of the separate RoPE + KV store op bit for bit.
#[test]
fn rope_in_the_qkv_matmul_keeps_every_logit_bit() {
    let fused = run_steps(&mut setup_with(common::gpu::ctx(), draft_params(), true));
    let apart = run_steps(&mut setup_with(common::gpu::ctx(), draft_params(), false));
    for (i, rows) in STEP_ROWS.iter().enumerate() {
        let what = format!("step {i} ({rows} rows)");
        assert_eq!(fused.1[i] + 30, apart.1[i], "{what}: dispatches");
        assert_same_bits(&what, &fused.0[i], &apart.0[i]);
    }
}

/// Without subgroups the CPU driver gets another kernel family (X through 64 KiB uniform
/// windows, one dispatch per 28 columns of the prompt; serial attention for every row count),
/// which must give the same logits bit for bit.
#[test]
fn cpu_kernel_families_give_the_same_logits() {
    let with = run_steps(&mut setup_with(common::gpu::ctx(), draft_params(), true));
    let ctx = common::gpu::ctx_features(true, false);
    let without = run_steps(&mut setup_with(ctx, draft_params(), true));
    for (i, rows) in STEP_ROWS.iter().enumerate() {
        assert_same_bits(
            &format!("step {i} ({rows} rows)"),
            &without.0[i],
            &with.0[i],
        );
    }
}
