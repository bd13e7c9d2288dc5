//! The memory planner on shape-only files built from published dimensions (`model::presets`):
//! the seed scenario. Qwen3-8B in Q4_K_M with its DSpark drafter (5 layers, block 7, taps
//! [2, 10, 18, 26, 34], Markov rank 256, confidence head) in Q8_0, on a 16 GiB budget.

use flint::gguf::{GgmlType, Gguf};
use flint::memory::budget::BudgetSource;
use flint::memory::suggest::suggestions;
use flint::memory::{
    plan, Budget, DeviceLimits, DraftParams, DrafterShape, Kind, Owner, Plan, RunParams,
    TargetShape,
};
use flint::model::{presets, DrafterMeta, Hparams};

const GIB: u64 = 1 << 30;

fn parse(bytes: Result<Vec<u8>, flint::gguf::GgufError>) -> Gguf {
    let g = Gguf::parse(&bytes.unwrap()).unwrap();
    assert!(g.shape_only);
    g
}

struct Scenario {
    target: Gguf,
    hp: Hparams,
    drafter: Gguf,
    meta: DrafterMeta,
}

impl Scenario {
    fn new() -> Scenario {
        let target = parse(presets::preset("qwen3-8b-q4_k_m").unwrap());
        let drafter = parse(presets::preset("qwen3-8b-dspark-q8_0").unwrap());
        let hp = Hparams::from_gguf(&target).unwrap();
        let meta = DrafterMeta::from_gguf(&drafter).unwrap();
        Scenario {
            target,
            hp,
            drafter,
            meta,
        }
    }

    fn params(&self, n_ctx: u32, kv: GgmlType) -> RunParams {
        RunParams {
            n_ctx,
            type_k: kv,
            type_v: kv,
            draft: Some(DraftParams {
                n_draft: 7,
                inject_chunk: 512,
                type_k: kv,
                type_v: kv,
                window: None,
            }),
            ..RunParams::default()
        }
    }

    fn shapes(&self) -> (TargetShape<'_>, DrafterShape<'_>) {
        (
            TargetShape {
                hp: &self.hp,
                tensors: &self.target.tensors,
            },
            DrafterShape {
                meta: &self.meta,
                tensors: &self.drafter.tensors,
            },
        )
    }

    fn plan(&self, p: &RunParams) -> Plan {
        let (t, d) = self.shapes();
        plan(
            t,
            Some(d),
            p,
            Budget::new(16 * GIB, BudgetSource::Flag),
            DeviceLimits::GENERIC,
        )
    }
}

#[test]
fn hyperparameters_are_read_from_the_shape_only_files() {
    let s = Scenario::new();
    assert_eq!(
        (s.hp.n_layer, s.hp.n_embd, s.hp.n_head, s.hp.n_head_kv),
        (36, 4096, 32, 8)
    );
    assert_eq!(
        (s.hp.head_dim, s.hp.n_ff, s.hp.n_vocab),
        (128, 12288, 151936)
    );
    assert!(s.hp.qk_norm && s.hp.rope_neox && !s.hp.tied_embeddings);
    assert_eq!(s.meta.target_layers, vec![2, 10, 18, 26, 34]);
    assert_eq!(
        (s.meta.block_size, s.meta.markov_rank, s.meta.target_hidden),
        (7, 256, 4096)
    );
    assert!(s.meta.has_confidence && !s.meta.own_embd && !s.meta.own_output);
    assert_eq!(s.meta.tap_width(), 5 * 4096);
}

#[test]
fn seed_scenario_fits_16gib_at_32k_with_f16_kv() {
    let s = Scenario::new();
    let p = s.plan(&s.params(32768, GgmlType::F16));
    assert!(p.fits(), "{:?}", p.misfit_summary());
    // Target KV: 36 layers × 2 × 32768 × 8 × 128 × 2 bytes = 4.5 GiB.
    assert_eq!(
        p.sum(Some(Owner::Target), Some(Kind::Kv)),
        36 * 2 * 32768 * 8 * 128 * 2
    );
    // Drafter KV: 5 layers × 2 × (32768 + γ = 7 block rows) × 8 × 128 × 2 bytes ≈ 640 MiB.
    assert_eq!(
        p.sum(Some(Owner::Drafter), Some(Kind::Kv)),
        5 * 2 * (32768 + 7) * 8 * 128 * 2
    );
}

#[test]
fn drafter_buffers_other_than_kv_do_not_grow_with_context() {
    let s = Scenario::new();
    let non_kv = |p: &Plan| -> Vec<(String, u64)> {
        p.buffers
            .iter()
            .filter(|b| b.owner == Owner::Drafter && b.kind != Kind::Kv)
            .map(|b| (b.name.clone(), b.bytes))
            .collect()
    };
    let kv = |p: &Plan| p.sum(Some(Owner::Drafter), Some(Kind::Kv));
    let plans: Vec<Plan> = [4096u32, 32768, 131072]
        .iter()
        .map(|&c| s.plan(&s.params(c, GgmlType::F16)))
        .collect();
    assert_eq!(non_kv(&plans[0]), non_kv(&plans[1]));
    assert_eq!(non_kv(&plans[0]), non_kv(&plans[2]));
    // KV grows linearly with the context: (c + γ) rows of 5 × 2 × 8 × 128 × 2 bytes.
    for (p, c) in plans.iter().zip([4096u64, 32768, 131072]) {
        assert_eq!(kv(p), (c + 7) * 5 * 2 * 8 * 128 * 2);
    }
    // The injection staging is U rows × tap width, the draft rows are γ: neither is n_ctx-sized.
    let staging = plans[2].get("drafter.inject.taps").unwrap().bytes;
    assert_eq!(staging, 512 * 5 * 4096 * 4);
    let q = plans[2].get("drafter.draft.q").unwrap().bytes;
    assert_eq!(q, 7 * 4096 * 4);
    // Nothing on the target side but its KV and the split-KV partials (n_head × (hd + 2) floats
    // per 256 rows) depends on the context either.
    let target_fixed = |p: &Plan| -> u64 {
        p.buffers
            .iter()
            .filter(|b| {
                b.owner == Owner::Target && b.kind != Kind::Kv && b.name != "act.attn_partials"
            })
            .map(|b| b.bytes)
            .sum()
    };
    assert_eq!(target_fixed(&plans[0]), target_fixed(&plans[2]));
}

#[test]
fn seed_scenario_at_128k_is_refused_with_f16_and_fits_with_q4_0() {
    let s = Scenario::new();
    let f16 = s.params(131072, GgmlType::F16);
    let p = s.plan(&f16);
    assert!(!p.fits());
    let (t, d) = s.shapes();
    let alts = suggestions(t, Some(d), &f16, &p);
    assert!(alts.iter().any(|a| a.contains("q4_0")), "{alts:?}");
    assert!(
        alts.iter().any(|a| a.starts_with("largest -c with f16 KV")),
        "{alts:?}"
    );
    let q4 = s.plan(&s.params(131072, GgmlType::Q4_0));
    assert!(q4.fits(), "{:?}", q4.misfit_summary());
}

#[test]
fn plans_check_buffer_and_binding_limits() {
    let s = Scenario::new();
    let (t, d) = s.shapes();
    let tight = DeviceLimits {
        max_buffer_size: 2 * GIB,
        max_storage_binding: 128 << 20,
    };
    let p = plan(
        t,
        Some(d),
        &s.params(32768, GgmlType::F16),
        Budget::new(64 * GIB, BudgetSource::Flag),
        tight,
    );
    // 32768 × 8 × 128 × 2 = 64 MiB per KV buffer fits; weights are split, never bound whole.
    assert!(p.fits(), "{:?}", p.misfit_summary());
    let p = plan(
        t,
        Some(d),
        &s.params(131072, GgmlType::F16),
        Budget::new(64 * GIB, BudgetSource::Flag),
        tight,
    );
    let m = p.misfit_summary();
    assert!(m.iter().any(|l| l.contains("max storage binding")), "{m:?}");
}

#[test]
fn seed_report_drafter_needs_megabytes_not_5888_mib_of_compute() {
    // The reference implementation reserved ~5888 MiB of drafter compute at -c 32768 for this
    // drafter (6 layers, d 5120, 40/4 heads, vocab 248320, γ 4, 5 taps). flint's drafter compute
    // and staging do not depend on the context at all.
    let target = parse(presets::preset("qwen3-8b-q4_k_m").unwrap());
    let hp = Hparams::from_gguf(&target).unwrap();
    let drafter = parse(presets::preset("bonsai-27b-dspark-q4_1").unwrap());
    let meta = DrafterMeta::from_gguf(&drafter).unwrap();
    assert_eq!(
        meta.target_layers,
        vec![2, 17, 32, 47, 62],
        "legacy taps shift by one"
    );
    assert_eq!(
        (meta.block_size, meta.hp.n_layer, meta.hp.n_vocab),
        (4, 6, 248320)
    );
    let t = TargetShape {
        hp: &hp,
        tensors: &target.tensors,
    };
    let d = DrafterShape {
        meta: &meta,
        tensors: &drafter.tensors,
    };
    let p = RunParams {
        n_ctx: 32768,
        draft: Some(DraftParams {
            n_draft: 4,
            inject_chunk: 512,
            type_k: GgmlType::F16,
            type_v: GgmlType::F16,
            window: None,
        }),
        ..RunParams::default()
    };
    let plan = plan(
        t,
        Some(d),
        &p,
        Budget::new(16 * GIB, BudgetSource::Flag),
        DeviceLimits::GENERIC,
    );
    let compute = plan.sum(Some(Owner::Drafter), Some(Kind::Compute))
        + plan.sum(Some(Owner::Drafter), Some(Kind::Staging));
    // 52.4 MB of tap staging (512 rows × 25600 floats) + 12.6 MB of injection scratch + ~4.4 MB
    // for the 4 draft rows (logits included): about 66 MiB, whatever the context.
    assert!(compute < 80 << 20, "{compute}");
    assert_eq!(
        plan.get("drafter.inject.taps").unwrap().bytes,
        512 * 5 * 5120 * 4
    );
    // Drafter KV at 32k, f16: 6 layers × 2 × 4 heads × 128 × 2 bytes = 12 KiB per token, for
    // the context and the γ = 4 block rows.
    assert_eq!(
        plan.sum(Some(Owner::Drafter), Some(Kind::Kv)),
        12 * 1024 * (32768 + 4)
    );
}
