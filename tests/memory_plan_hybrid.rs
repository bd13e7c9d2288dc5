//! The memory planner on the seed's pair, from shape-only presets: Ternary-Bonsai-27B (`qwen35`:
//! 48 Gated DeltaNet layers, 16 gated-attention layers, legacy 128-element Q2_0) with its DSpark
//! drafter (6 layers, block 4, 5 taps, Q4_1), on a 16 GiB budget. Only the 16 attention layers
//! have a KV cache; the DeltaNet layers hold a recurrent state of fixed size per sequence, and a
//! speculative rollback costs one copy of it, at any draft length and any context.

use std::process::Command;

use flint::gguf::{GgmlType, Gguf};
use flint::memory::budget::BudgetSource;
use flint::memory::{
    plan, Budget, DeviceLimits, DraftParams, DrafterShape, Kind, Owner, Plan, RunParams,
    TargetShape,
};
use flint::model::{presets, DrafterMeta, Hparams};

const GIB: u64 = 1 << 30;

fn parse(name: &str) -> Gguf {
    let g = Gguf::parse(&presets::preset(name).unwrap().unwrap()).unwrap();
    assert!(g.shape_only);
    g
}

struct Pair {
    target: Gguf,
    hp: Hparams,
    drafter: Gguf,
    meta: DrafterMeta,
}

impl Pair {
    fn new() -> Pair {
        let target = parse("ternary-bonsai-27b-q2_0");
        let drafter = parse("ternary-bonsai-27b-dspark-q4_1");
        let hp = Hparams::from_gguf(&target).unwrap();
        let meta = DrafterMeta::from_gguf(&drafter).unwrap();
        Pair {
            target,
            hp,
            drafter,
            meta,
        }
    }

    fn plan(&self, n_ctx: u32, kv: GgmlType, n_draft: u32) -> Plan {
        let p = RunParams {
            n_ctx,
            type_k: kv,
            type_v: kv,
            draft: Some(DraftParams {
                n_draft,
                inject_chunk: 512,
                type_k: kv,
                type_v: kv,
                window: None,
            }),
            ..RunParams::default()
        };
        plan(
            TargetShape {
                hp: &self.hp,
                tensors: &self.target.tensors,
            },
            Some(DrafterShape {
                meta: &self.meta,
                tensors: &self.drafter.tensors,
            }),
            &p,
            Budget::new(16 * GIB, BudgetSource::Flag),
            DeviceLimits::GENERIC,
        )
    }
}

/// Per DeltaNet layer: conv state (d_conv − 1) × conv_dim = 3 × 10240 and S state
/// n_v × head_k × head_v = 48 × 128 × 128, f32.
const STATE_PER_LAYER: u64 = (3 * 10240 + 48 * 128 * 128) * 4;

#[test]
fn the_27b_hybrid_reads_as_48_deltanet_and_16_attention_layers() {
    let p = Pair::new();
    let h = p.hp.hybrid.as_ref().expect("qwen35 is hybrid");
    assert_eq!((p.hp.n_layer, h.n_recurrent()), (64, 48));
    assert_eq!(
        p.hp.kv_layers(),
        (0..16).map(|i| 4 * i + 3).collect::<Vec<_>>()
    );
    assert_eq!((h.conv_dim(), h.value_dim(), h.d_conv), (10240, 6144, 4));
    assert_eq!((h.n_k_heads, h.n_v_heads, h.head_k_dim), (16, 48, 128));
}

#[test]
fn seed_pair_fits_16gib_at_32k_with_state_and_rollback_constant() {
    let pair = Pair::new();
    let p = pair.plan(32768, GgmlType::F16, 4);
    assert!(p.fits(), "{:?}", p.misfit_summary());
    // KV: 16 attention layers × 2 × 32768 × 4 heads × 256 × 2 bytes = 2 GiB.
    assert_eq!(
        p.sum(Some(Owner::Target), Some(Kind::Kv)),
        16 * 2 * 32768 * 4 * 256 * 2
    );
    let state = p.sum(Some(Owner::Target), Some(Kind::Recurrent));
    assert_eq!(state, 48 * STATE_PER_LAYER);
    assert_eq!(p.sum(Some(Owner::Target), Some(Kind::Rollback)), state);
    // Neither the state nor its rollback copy depends on the draft length or the context.
    for (n_ctx, n_draft) in [(4096, 1), (32768, 2), (131072, 4)] {
        let q = pair.plan(n_ctx, GgmlType::Q4_0, n_draft);
        assert_eq!(q.sum(Some(Owner::Target), Some(Kind::Recurrent)), state);
        assert_eq!(q.sum(Some(Owner::Target), Some(Kind::Rollback)), state);
    }
}

#[test]
fn seed_pair_at_128k_needs_a_quantized_cache() {
    let pair = Pair::new();
    let f16 = pair.plan(131072, GgmlType::F16, 4);
    let q4 = pair.plan(131072, GgmlType::Q4_0, 4);
    assert!(q4.fits(), "{:?}", q4.misfit_summary());
    // f16 KV at 128k is 8 GiB on the target alone: with 6.66 GiB of weights it cannot fit.
    assert_eq!(
        f16.sum(Some(Owner::Target), Some(Kind::Kv)),
        16 * 2 * 131072 * 4 * 256 * 2
    );
    assert!(!f16.fits());
}

#[test]
fn flint_plan_lists_recurrent_state_and_rollback_for_the_seed_pair() {
    let tmp = tempfile::tempdir().unwrap();
    let (t, d) = (tmp.path().join("t.gguf"), tmp.path().join("d.gguf"));
    for (name, out) in [
        ("ternary-bonsai-27b-q2_0", &t),
        ("ternary-bonsai-27b-dspark-q4_1", &d),
    ] {
        let st = Command::new(env!("CARGO_BIN_EXE_flint"))
            .args(["gguf", "preset", name])
            .arg(out)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .arg("plan")
        .arg("-m")
        .arg(&t)
        .arg("-md")
        .arg(&d)
        .args(["-c", "32768", "--gpu-mem", "16GiB"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    for want in ["recurrent", "rollback", "149.6 MiB", "fits:"] {
        assert!(text.contains(want), "no '{want}' in:\n{text}");
    }
    let kv_line = text
        .lines()
        .find(|l| l.contains("target") && l.contains(" kv "))
        .unwrap();
    assert!(
        kv_line.contains(" 32 ") && kv_line.contains("2.00 GiB"),
        "{kv_line}"
    );
}

#[test]
fn the_drafters_position_window_costs_nothing_beside_its_kv() {
    let pair = Pair::new();
    let with_window = |window: Option<u32>| {
        let p = RunParams {
            n_ctx: 32768,
            draft: Some(DraftParams {
                n_draft: 4,
                inject_chunk: 512,
                type_k: GgmlType::F16,
                type_v: GgmlType::F16,
                window,
            }),
            ..RunParams::default()
        };
        plan(
            TargetShape {
                hp: &pair.hp,
                tensors: &pair.target.tensors,
            },
            Some(DrafterShape {
                meta: &pair.meta,
                tensors: &pair.drafter.tensors,
            }),
            &p,
            Budget::new(16 * GIB, BudgetSource::Flag),
            DeviceLimits::GENERIC,
        )
    };
    let (full, windowed) = (with_window(None), with_window(Some(4096)));
    let drafter_kv = |p: &Plan| p.sum(Some(Owner::Drafter), Some(Kind::Kv));
    // 6 layers × 2 × (4096 + γ 4) rows × 4 KV heads × 128 × 2 bytes: the window's K/V only.
    assert_eq!(drafter_kv(&windowed), 6 * 2 * (4096 + 4) * 4 * 128 * 2);
    assert!(drafter_kv(&windowed) * 7 < drafter_kv(&full));
    for kind in [Kind::Compute, Kind::Staging, Kind::Io] {
        let sum = |p: &Plan| p.sum(Some(Owner::Drafter), Some(kind));
        assert_eq!(sum(&windowed), sum(&full), "{kind:?}");
    }
}
