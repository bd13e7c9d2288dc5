//! Gemma 3's window-only KV cache: a sliding layer keeps `window + max_rows` rows in a ring
//! (positions stay absolute), a global layer the whole context.
//!
//! - The plan charges exactly that (sizes from first principles: rows × KV heads × head_dim × 2
//!   bytes of f16).
//! - A prompt several windows long, prefilled in ubatches and decoded past more windows, gives
//!   the bits of the same model with a full cache (`FLINT_SWA_FULL=1`, llama.cpp's
//!   `--swa-full`), and both stay within the device bound of `tests/gemma3_llamacpp.rs` of the
//!   CPU oracle (which keeps every row). A rollback by at most a step's rows, replayed, gives
//!   the same bits again; a deeper cut is refused.
//! - The token embedding split by rows past a small binding limit (the tied LM head too) gives
//!   the same bits.
//! - Speculative greedy output on a random-weight Gemma 3 target equals plain decoding, with a
//!   random DSpark drafter and with adversarial drafters that force rollbacks, on prompts
//!   longer than the window; batched steps (a ring per slot) give each sequence its tokens
//!   alone.
//!
//! One test function: `FLINT_SWA_FULL` is process-wide, so nothing else here builds a forward
//! while it is set.

mod common;

use std::path::Path;

use flint::engine::batching::{plan_step, Work};
use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::gguf::{GgmlType, GgufFile};
use flint::gpu::{DeviceOptions, GpuContext};
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::model::forward::batch::Segment;
use flint::model::forward::Forward;
use flint::model::gemma3::SWA_FULL_ENV;
use flint::reference::forward::{Capture, Rows};
use flint::reference::gemma3::RefGemma3Model;
use flint::speculative::adversarial::{Adversary, AdversaryKind};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/gemma3");
/// |device − CPU oracle (f16 K/V)| over 80 positions (measured: tiny-a 1.5e-3, tiny-b 3.2e-4;
/// tests/gemma3_llamacpp.rs measures 6.2e-4 over its 24).
const DEVICE_ORACLE_BOUND: f32 = 5e-3;
const N_CTX: u32 = 128;
const UBATCH: u32 = 4;

/// Logits of every step: the prompt in ubatches (logits of each chunk's last row), then
/// `n_gen` greedy tokens, one logits row per step.
fn run(ctx: &GpuContext, fwd: &mut Forward, prompt: &[u32], n_gen: usize) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    for chunk in prompt.chunks(UBATCH as usize) {
        fwd.step(ctx, chunk, 1).unwrap();
        out.push(fwd.logits(ctx).unwrap());
    }
    for _ in 0..n_gen {
        let next = fwd.argmax(ctx).unwrap()[0];
        fwd.step(ctx, &[next], 1).unwrap();
        out.push(fwd.logits(ctx).unwrap());
    }
    out
}

fn forward(ctx: &GpuContext, file: &GgufFile, full: bool) -> (Forward, flint::memory::Plan) {
    if full {
        std::env::set_var(SWA_FULL_ENV, "1");
    }
    let params = common::forward::params(N_CTX, UBATCH);
    let plan = common::forward::plan(ctx, file, &params);
    let fwd = common::forward::gpu_forward(ctx, file, &params);
    std::env::remove_var(SWA_FULL_ENV);
    (fwd, plan)
}

fn planned(plan: &flint::memory::Plan, name: &str) -> u64 {
    plan.buffers
        .iter()
        .find(|b| b.name == name)
        .unwrap_or_else(|| panic!("{name} not planned"))
        .bytes
}

fn ring_against_full(ctx: &GpuContext, name: &str, window: u32, n_layer: u32, global: &[u32]) {
    let file = GgufFile::open(&Path::new(DATA).join(format!("{name}.gguf"))).unwrap();
    let (mut ring, plan) = forward(ctx, &file, false);
    let (mut full, full_plan) = forward(ctx, &file, true);
    let hp = ring.hp.clone();
    let row_bytes = u64::from(hp.n_head_kv) * u64::from(hp.head_dim) * 2;
    for il in 0..n_layer {
        let rows = if global.contains(&il) {
            N_CTX
        } else {
            window + UBATCH
        };
        for kv in ["k", "v"] {
            let n = format!("kv.{kv}.{il}");
            assert_eq!(
                planned(&plan, &n),
                u64::from(rows) * row_bytes,
                "{name} {n}"
            );
            assert_eq!(planned(&full_plan, &n), u64::from(N_CTX) * row_bytes);
        }
    }
    assert!(ring.ring() && !full.ring());

    // Five windows of prompt, then decoding past five more.
    let mut rng = common::Rng::new(7);
    let prompt: Vec<u32> = (0..5 * window)
        .map(|_| rng.below(u64::from(hp.n_vocab)) as u32)
        .collect();
    let n_gen = 5 * window as usize;
    let got = run(ctx, &mut ring, &prompt, n_gen);
    let want = run(ctx, &mut full, &prompt, n_gen);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        common::gpu::assert_bits_eq(&format!("{name} step {i}: ring vs full"), g, w);
    }

    // The CPU oracle over the same tokens, every row at once.
    let len = ring.kv.len(0).unwrap();
    let mut tokens = prompt.clone();
    let n_prompt_steps = prompt.len().div_ceil(UBATCH as usize);
    for row in &got[n_prompt_steps - 1..got.len() - 1] {
        tokens.push(argmax(row));
    }
    assert_eq!(tokens.len() as u32, len);
    let oracle = RefGemma3Model::load(&file).unwrap();
    let mut cache = oracle.new_cache(GgmlType::F16).unwrap();
    let capture = Capture {
        rows: Rows::All,
        ..Default::default()
    };
    let all = oracle.forward(&mut cache, &tokens, 0, &capture).unwrap();
    let v = hp.n_vocab as usize;
    // Each prompt chunk's last row, then every decoded row.
    let ub = UBATCH as usize;
    let mut rows: Vec<usize> = (0..n_prompt_steps)
        .map(|c| ((c + 1) * ub).min(prompt.len()) - 1)
        .collect();
    rows.extend(prompt.len()..tokens.len());
    let mut worst = 0f32;
    for (step, &r) in rows.iter().enumerate() {
        let want = &all.logits[r * v..(r + 1) * v];
        worst = worst.max(common::gpu::max_abs(&got[step], want));
    }
    eprintln!("{name}: ring vs CPU oracle worst |Δlogit| {worst:.3e}");
    assert!(worst <= DEVICE_ORACLE_BOUND, "{name}: {worst}");

    // Rollback by a step's rows, replayed: the same bits. A deeper cut is refused.
    assert!(ring.can_truncate(len - UBATCH) && ring.can_truncate(0));
    assert!(!ring.can_truncate(len - UBATCH - 1));
    assert!(ring.truncate(len - UBATCH - 1).is_err());
    let tail = &tokens[(len - UBATCH) as usize..];
    ring.truncate(len - UBATCH).unwrap();
    ring.step(ctx, tail, 1).unwrap();
    let again = ring.logits(ctx).unwrap();
    common::gpu::assert_bits_eq(&format!("{name}: replay"), &again, got.last().unwrap());
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

/// tiny-b's token embedding (64 × 320 f32, 80 KiB) split past a 64 KiB binding: the gather
/// and the tied LM head give the bits of the whole table.
fn split_embedding(ctx: &GpuContext) {
    let file = GgufFile::open(&Path::new(DATA).join("tiny-b.gguf")).unwrap();
    let small = common::gpu::ctx_with(DeviceOptions {
        max_storage_binding_override: Some(64 << 10),
        ..DeviceOptions::default()
    });
    let (mut whole, _) = forward(ctx, &file, false);
    let (mut split, _) = forward(&small, &file, false);
    assert_eq!(whole.weights.token_embd.splits.len(), 1);
    assert!(split.weights.token_embd.splits.len() > 1);
    let prompt: Vec<u32> = (0..12).map(|i| (i * 37) % 320).collect();
    let a = run(ctx, &mut whole, &prompt, 4);
    let b = run(&small, &mut split, &prompt, 4);
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        common::gpu::assert_bits_eq(&format!("split embedding step {i}"), y, x);
    }
}

fn engine(model: &Path, draft: Option<DraftOptions>) -> Engine {
    common::engine(model, 256, draft)
}

/// Speculative greedy output on a random `gemma3-tiny-f32` target (window 16, a 32-row ring)
/// is plain decoding, prompts longer than the window.
fn speculation_is_plain_decoding() {
    let tmp = common::temp_dir("gemma3-spec");
    let model = common::random_preset(tmp.path(), "gemma3-tiny-f32", 21);
    let n = 24;
    let mut eng = engine(&model, None);
    assert!(eng.fwd.ring());
    let prompts: Vec<Vec<u32>> = [
        "a sliding window of sixteen tokens is shorter than this prompt, by far",
        "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
    ]
    .iter()
    .map(|p| eng.tok.encode(p, true, true).unwrap())
    .collect();
    let expected: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            assert!(p.len() > 32, "prompt of {} tokens", p.len());
            eng.reset(0).unwrap();
            let s = common::generate(&mut eng, p, n, None, false);
            s.generated_token_ids
        })
        .collect();
    let n_vocab = eng.fwd.hp().n_vocab;
    drop(eng);
    batched_sequences_give_their_tokens_alone(&model, &prompts, n);
    let target = GgufFile::open(&model).unwrap();
    let gamma = 4;
    let opts = InitOptions {
        block: gamma,
        seed: 5,
        ..InitOptions::default()
    };
    let dpath = tmp.path().join("drafter.gguf");
    random_drafter(&target, &opts)
        .unwrap()
        .write_file(&dpath)
        .unwrap();
    let mut deng = engine(&model, Some(DraftOptions::new(dpath)));
    let mut dspark = common::drive::take(&mut deng);
    for (p, want) in prompts.iter().zip(&expected) {
        let seq: Vec<u32> = p.iter().chain(want).copied().collect();
        let mut adv: common::drive::Slot =
            Box::new(Adversary::new(AdversaryKind::Partial, seq, gamma, n_vocab));
        let (out, s) = common::drive::speculate(&mut deng, &mut adv, gamma, p, n);
        assert_eq!(&out, want, "partial drafts: output differs from plain");
        assert!(s.accepted > 0 && s.accepted < s.drafted, "{s:?}");
        let (out, s) = common::drive::speculate(&mut deng, &mut dspark, gamma, p, n);
        assert_eq!(&out, want, "random DSpark: output differs from plain");
        assert!(s.cycles > 0, "the DSpark drafter never drafted: {s:?}");
    }
}

/// Batched steps (`flint serve`'s path, a ring per slot): three sequences admitted at
/// different steps, prompts cut into chunks beside the others' decode rows, each gives the
/// greedy tokens it gives alone.
fn batched_sequences_give_their_tokens_alone(model: &Path, prompts: &[Vec<u32>], n: usize) {
    let opts = EngineOptions {
        model: model.to_path_buf(),
        n_ctx: 256,
        n_ubatch: 16,
        ..EngineOptions::default()
    };
    let mut alone = Engine::load(&opts, 1).unwrap();
    let want: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            alone.reset(0).unwrap();
            let s = common::generate(&mut alone, p, n, None, false);
            s.generated_token_ids
        })
        .collect();
    drop(alone);
    let k = prompts.len();
    let mut eng = Engine::load(&opts, k as u32).unwrap();
    let (mut fed, mut next) = (vec![0usize; k], vec![0u32; k]);
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); k];
    let mut step = 0;
    while out.iter().any(|o| o.len() < n) {
        let work: Vec<Work> = (0..k)
            .filter(|&s| step >= 2 * s && out[s].len() < n)
            .map(|s| Work {
                seq: s,
                prompt_left: prompts[s].len() - fed[s],
            })
            .collect();
        step += 1;
        let rows = plan_step(&work, eng.fwd.max_rows() as usize);
        let mut segs = Vec::new();
        let mut logits_of = Vec::new();
        for &(s, m) in &rows {
            let (tokens, logits) = if fed[s] < prompts[s].len() {
                let part = &prompts[s][fed[s]..fed[s] + m];
                (part, fed[s] + m == prompts[s].len())
            } else {
                (std::slice::from_ref(&next[s]), true)
            };
            segs.push(Segment {
                seq: s,
                tokens,
                n_logits: u32::from(logits),
            });
            if logits {
                logits_of.push(s);
            }
        }
        if segs.is_empty() {
            continue;
        }
        eng.step(&segs).unwrap();
        for &(s, m) in &rows {
            fed[s] = (fed[s] + m).min(prompts[s].len());
        }
        let ids = eng.fwd.argmax(&eng.ctx).unwrap();
        for (&s, &t) in logits_of.iter().zip(&ids) {
            out[s].push(t);
            next[s] = t;
        }
    }
    for (s, (g, w)) in out.iter().zip(&want).enumerate() {
        assert_eq!(&g[..w.len()], &w[..], "sequence {s}: batched vs alone");
    }
}

#[test]
fn ring_caches_keep_the_bits_of_a_full_cache_and_speculation_stays_exact() {
    let ctx = common::gpu::ctx();
    let t = std::time::Instant::now();
    // tiny-a: 7 layers, window 8, layer 5 global; tiny-b: 3 layers, window 6, layer 2 global.
    ring_against_full(&ctx, "tiny-a", 8, 7, &[5]);
    ring_against_full(&ctx, "tiny-b", 6, 3, &[2]);
    eprintln!("ring against full: {:.1?}", t.elapsed());
    split_embedding(&ctx);
    eprintln!("split embedding: {:.1?}", t.elapsed());
    speculation_is_plain_decoding();
    eprintln!("speculation: {:.1?}", t.elapsed());
    common::gpu::assert_clean(&ctx);
}
