//! Deferred injection on the real model with a random-weight drafter: rows committed by
//! single-row steps wait in the tap staging (`BatchForward::set_tap_row`) and reach the drafter
//! as one chunk (the engine's step does this for plain and bypassed steps).
//! - Staging: rows captured at staging rows `0..k` by `k` single-row steps are, bit for bit, the
//!   rows captured one step at a time at row 0 (the target is deterministic).
//! - Drafts: the drafter's logits after one chunk of `k` rows are, bit for bit, those after `k`
//!   single-row injections (the K/V-only pass treats rows independently and its kernels are
//!   batch invariant: measured max |logit diff| 0 on lavapipe, so the earlier tolerance,
//!   1e-4 × (1 + max |logit|), became an exact comparison), and the drafts are identical.
//!   A staging that kept every row at row 0 fails this comparison (checked).
//! - A step whose rows would land past the staging is refused, and the next one in range runs.
//! - A generation that bypasses the drafter for stretches longer than `U` equals plain
//!   decoding, injects in fewer submits than it commits rows, and leaves the drafter holding
//!   every committed row; it starts from staging row 0 whatever a failed one left, and a
//!   drafter without a staging limit of its own is held to the target's.

use crate::common;

use common::gpu::assert_bits_eq;
use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::gguf::GgufFile;
use flint::gpu::buffers::read_back;
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::model::forward::batch::Segment;
use flint::speculative::adversarial::{Adversary, AdversaryKind};
use flint::speculative::bypass::BypassConfig;
use flint::speculative::dspark::Dspark;
use flint::speculative::{SpecOptions, VerifyPolicy};

const U: u32 = 16;

/// An engine with a random drafter written to a temp directory (kept as long as the engine).
fn engine(dir_name: &str) -> (Engine, tempfile::TempDir) {
    let tmp = common::temp_dir(dir_name);
    let dir = tmp.path();
    let target = GgufFile::open(&common::model_path()).unwrap();
    let path = dir.join("drafter.gguf");
    let opts = InitOptions {
        block: 4,
        seed: 9,
        ..InitOptions::default()
    };
    random_drafter(&target, &opts)
        .unwrap()
        .write_file(&path)
        .unwrap();
    let mut d = DraftOptions::new(path);
    d.inject_chunk = U;
    let eng = Engine::load(
        &EngineOptions {
            model: common::model_path(),
            n_ctx: 256,
            n_ubatch: 512,
            draft: Some(d),
            ..EngineOptions::default()
        },
        1,
    )
    .unwrap();
    (eng, tmp)
}

fn prompt(eng: &Engine) -> Vec<u32> {
    eng.tok
        .encode(
            "The history of the printing press begins in the fifteenth century, when \
             Johannes Gutenberg combined movable metal type",
            true,
            true,
        )
        .unwrap()
}

/// Staging rows `0..n` `[n, width]`.
fn staged(eng: &Engine, ds: &Dspark, n: usize) -> Vec<f32> {
    let width = ds.meta.tap_width() as usize;
    let bytes = read_back(&eng.ctx, ds.taps_buffer(), 0, (n * width * 4) as u64).unwrap();
    bytemuck::pod_collect_to_vec(&bytes)
}

/// How rows after the prompt reach the drafter.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Staging {
    /// Each step's row at staging row 0, injected at once.
    RowByRow,
    /// Step i's row at staging row i, all injected as one chunk.
    Deferred,
    /// Every step's row at row 0, then one chunk of all (what a broken deferral would do).
    Overwritten,
}

/// Prefills `p`, runs `follow` one token a step, and drafts after the last: (staged rows of
/// the single steps, drafts, drafter logits).
fn run(
    eng: &mut Engine,
    ds: &mut Dspark,
    p: &[u32],
    follow: &[u32],
    how: Staging,
) -> (Vec<f32>, flint::speculative::dspark::Draft, Vec<f32>) {
    eng.reset(0).unwrap();
    ds.reset();
    eng.fwd.set_tap_row(0, 0).unwrap();
    let n = p.len() as u32;
    step(eng, p).unwrap();
    ds.inject(&eng.ctx, n, 0).unwrap();
    let mut taps = Vec::new();
    for (i, &t) in follow.iter().enumerate() {
        let row = if how == Staging::Deferred {
            i as u32
        } else {
            0
        };
        eng.fwd.set_tap_row(0, row).unwrap();
        step(eng, &[t]).unwrap();
        if how == Staging::RowByRow {
            taps.extend(staged(eng, ds, 1));
            ds.inject(&eng.ctx, 1, n + i as u32).unwrap();
        }
    }
    let k = follow.len();
    if how != Staging::RowByRow {
        taps = staged(eng, ds, k);
        ds.inject(&eng.ctx, k as u32, n).unwrap();
    }
    eng.fwd.set_tap_row(0, 0).unwrap();
    let anchor = eng.fwd.argmax(&eng.ctx).unwrap()[0];
    let draft = ds.draft(&eng.ctx, anchor, n + k as u32, None).unwrap();
    let logits = ds.logits(&eng.ctx).unwrap();
    (taps, draft, logits)
}

/// One step of `tokens` on sequence 0, the last row's logits computed.
fn step(eng: &mut Engine, tokens: &[u32]) -> flint::Result<()> {
    let seg = Segment {
        seq: 0,
        tokens,
        n_logits: 1,
    };
    eng.fwd.step(&eng.ctx, &[seg])
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn rows_staged_by_single_steps_inject_as_one_chunk() {
    let (mut eng, _tmp) = engine("spec-deferred");
    let mut slot = common::drive::take(&mut eng);
    let ds = slot.as_dspark().unwrap();
    let mut p = prompt(&eng);
    p.truncate(12); // one prefill step (U = 16 rows)
                    // Tokens the target would not necessarily pick: any committed rows will do.
    let follow: Vec<u32> = p.iter().rev().take(7).copied().collect();
    let (taps_1, draft_1, logits_1) = run(&mut eng, &mut *ds, &p, &follow, Staging::RowByRow);
    let (taps_k, draft_k, logits_k) = run(&mut eng, &mut *ds, &p, &follow, Staging::Deferred);
    assert_eq!(taps_k.len(), taps_1.len());
    assert!(
        taps_k == taps_1,
        "rows staged at rows 0..k differ from rows staged one by one"
    );
    // Batch-invariant kernels: the same bits whatever the chunking (a tolerance would hide a
    // chunk-dependent summation path, which the design rules out).
    let err = max_diff(&logits_k, &logits_1);
    eprintln!("one chunk vs row by row: max |logit diff| {err:.2e} (bound: identical bits)");
    assert_bits_eq("one chunk vs row by row: logits", &logits_k, &logits_1);
    assert_eq!(draft_k.tokens, draft_1.tokens, "one chunk: drafts differ");
    // The comparison sees a staging that lost rows (measured on lavapipe: max |logit diff| 1.9).
    let (_, _, logits_0) = run(&mut eng, &mut *ds, &p, &follow, Staging::Overwritten);
    let err = max_diff(&logits_0, &logits_1);
    eprintln!("rows overwritten at row 0: max |logit diff| {err:.2e}");
    assert!(
        logits_0
            .iter()
            .zip(&logits_1)
            .any(|(a, b)| a.to_bits() != b.to_bits()),
        "rows overwritten at row 0 went unnoticed"
    );

    // Past the staging: refused with the rows named, and nothing is lost.
    eng.reset(0).unwrap();
    ds.reset();
    eng.fwd.set_tap_row(0, U).unwrap();
    let err = step(&mut eng, &p[..1]).unwrap_err().to_string();
    assert!(err.contains("row copy"), "unexpected error: {err}");
    assert_eq!(
        eng.fwd.kv().len(0).unwrap(),
        0,
        "a refused step committed rows"
    );
    eng.fwd.set_tap_row(0, U - 1).unwrap();
    step(&mut eng, &p[..1]).unwrap();
    eng.fwd.set_tap_row(0, 0).unwrap();
}

#[test]
fn bypassed_stretches_longer_than_the_staging_reach_the_drafter() {
    let (mut eng, _tmp) = engine("spec-deferred-gen");
    let mut ds = common::drive::take(&mut eng);
    let p = prompt(&eng);
    let n = 48;
    eng.reset(0).unwrap();
    let want = common::generate(&mut eng, &p, n, None, false).generated_token_ids;
    // A breaker that trips on any rejection, plain stretches of 20 steps (> U = 16).
    let bypass = BypassConfig {
        margin: 0.0,
        min_acceptance: 1.0,
        window: 1,
        probe_cycles: 1,
        plain_steps: 20,
        max_plain_steps: 20,
        ..BypassConfig::default()
    };
    let opts = SpecOptions {
        n_max: 4,
        policy: VerifyPolicy::Fixed,
        bypass: Some(bypass),
    };
    eng.reset(0).unwrap();
    // Taps left pointing past row 0 (a generation that failed half-way) are reset.
    eng.fwd.set_tap_row(0, U - 1).unwrap();
    let s = common::drive::run_spec(&mut eng, &mut ds, opts.clone(), &p, n, None);
    assert_eq!(
        s.generated_token_ids, want,
        "output differs from plain decoding"
    );
    let spec = s.spec.unwrap();
    eprintln!("{}", spec.summary(s.generated_tokens));
    assert!(spec.bypassed > u64::from(U), "no stretch past U: {spec:?}");
    assert!(spec.cycles >= 2, "no probe after a stretch: {spec:?}");
    let committed = eng.fwd.kv().len(0).unwrap();
    assert_eq!(ds.next_position(), committed, "the drafter misses rows");
    assert!(
        spec.injections < u64::from(committed) - p.len() as u64,
        "one injection per row: {spec:?}"
    );
    // A drafter without a staging limit of its own: the target's staging (U rows) still
    // bounds the wait.
    let seq: Vec<u32> = p.iter().chain(&want).copied().collect();
    let n_vocab = eng.fwd.hp().n_vocab;
    let mut adv: common::drive::Slot =
        Box::new(Adversary::new(AdversaryKind::AlwaysWrong, seq, 4, n_vocab));
    eng.reset(0).unwrap();
    let s = common::drive::run_spec(&mut eng, &mut adv, opts, &p, n, None);
    assert_eq!(s.generated_token_ids, want, "adversary: output differs");
    let spec = s.spec.unwrap();
    assert!(
        spec.bypassed > u64::from(U),
        "adversary: no stretch past U: {spec:?}"
    );
}
