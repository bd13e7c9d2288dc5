//! Routed experts in host memory read by the GPU (`memory::placement`,
//! `gpu::host_buffers`): on random `qwen3moe-tiny-q8_0` and `qwen35moe-tiny-q8_0` models,
//! greedy tokens with every expert on the host (`--cpu-moe`), with a partial placement
//! (`--n-cpu-moe 2`; one tensor by `-ot`) and in a batched step of two sequences are those of
//! the all-device run, and batched logits are bit-identical to solo ones. The kernels are the
//! same; only the memory the expert buffers live in differs.
//!
//! Oracle chain: the all-device run is itself held to llama.cpp's logits and the CPU oracle
//! (`tests/moe_forward.rs`) and to batch invariance (`tests/moe_batch.rs`); this test holds the
//! host placements to it.

use crate::common;

use std::path::Path;

use flint::engine::{Engine, EngineOptions};
use flint::memory::placement::rules;
use flint::memory::PlacementRules;
use flint::model::forward::batch::Segment;

fn load(model: &Path, placement: PlacementRules, n_seq: u32) -> Engine {
    let opts = EngineOptions {
        model: model.to_path_buf(),
        n_ctx: 128,
        n_ubatch: 64,
        placement,
        ..EngineOptions::default()
    };
    Engine::load(&opts, n_seq).unwrap()
}

fn device() -> PlacementRules {
    PlacementRules {
        overrides: Vec::new(),
        auto: false,
    }
}

fn greedy(eng: &mut Engine, prompt: &[u32]) -> Vec<u32> {
    common::generate(eng, prompt, 16, None, false).generated_token_ids
}

/// The last-row logits of each prompt (as bits): in one batched step, or each alone.
fn step_logits(eng: &mut Engine, prompts: &[Vec<u32>], together: bool) -> Vec<Vec<u32>> {
    for s in 0..prompts.len() {
        eng.reset(s).unwrap();
    }
    let segs: Vec<Segment> = prompts
        .iter()
        .enumerate()
        .map(|(seq, p)| Segment {
            seq,
            tokens: p,
            n_logits: 1,
        })
        .collect();
    let groups: Vec<&[Segment]> = match together {
        true => vec![&segs[..]],
        false => segs.chunks(1).collect(),
    };
    let mut out = Vec::new();
    for g in groups {
        eng.step(g).unwrap();
        let v = eng.fwd.hp().n_vocab as usize;
        let l = eng.fwd.logits(&eng.ctx).unwrap();
        out.extend(l.chunks(v).map(|r| r.iter().map(|x| x.to_bits()).collect()));
    }
    out
}

fn check(preset: &str, seed: u64) {
    let tmp = common::temp_dir("moe-placement");
    let model = common::random_preset(tmp.path(), preset, seed);
    let mut eng = load(&model, device(), 1);
    assert_eq!(eng.plan.host_total(), 0);
    let prompt = eng
        .tok
        .encode("Experts in host memory", true, true)
        .unwrap();
    let want = greedy(&mut eng, &prompt);
    let prompts: Vec<Vec<u32>> = vec![prompt.clone(), eng.tok.encode("a b c", true, true).unwrap()];
    let solo_device = step_logits(&mut eng, &prompts[..1], false);
    drop(eng);
    let placements = [
        ("--cpu-moe", rules(&[], true, None).unwrap()),
        ("--n-cpu-moe 2", rules(&[], false, Some(2)).unwrap()),
        (
            "-ot blk.3 down",
            rules(&[r"blk\.3\.ffn_down_exps=CPU".into()], false, None).unwrap(),
        ),
    ];
    for (what, placement) in placements {
        let mut eng = load(&model, placement, 2);
        assert!(
            eng.plan.host_total() > 0,
            "{preset} {what}: nothing on the host"
        );
        assert!(
            eng.ctx
                .features()
                .contains(flint::gpu::host_buffers::FEATURE),
            "{preset} {what}: device without host storage"
        );
        assert_eq!(
            greedy(&mut eng, &prompt),
            want,
            "{preset} {what}: tokens differ"
        );
        let together = step_logits(&mut eng, &prompts, true);
        let alone = step_logits(&mut eng, &prompts, false);
        assert!(
            together == alone,
            "{preset} {what}: batched logits differ from solo"
        );
        assert!(
            alone[0] == solo_device[0],
            "{preset} {what}: logits differ from the all-device run"
        );
    }
}

#[test]
fn qwen3moe_host_experts_give_the_device_tokens() {
    check("qwen3moe-tiny-q8_0", 11);
}

#[test]
fn qwen35moe_host_experts_give_the_device_tokens() {
    check("qwen35moe-tiny-q8_0", 12);
}

/// Speculation with every expert on the host: greedy DSpark output (a random drafter from
/// `flint dspark init`'s generator; its verify batches route to many experts) is the
/// all-device plain decoding's.
#[test]
fn dspark_with_host_experts_is_plain_decoding() {
    use flint::engine::DraftOptions;
    use flint::gguf::GgufFile;
    use flint::model::drafter_init::{random_drafter, InitOptions};
    let tmp = common::temp_dir("moe-placement-spec");
    let model = common::random_preset(tmp.path(), "qwen35moe-tiny-q8_0", 13);
    let mut eng = load(&model, device(), 1);
    let prompt = eng
        .tok
        .encode("Drafts over host experts", true, true)
        .unwrap();
    let want = greedy(&mut eng, &prompt);
    drop(eng);
    let dpath = tmp.path().join("drafter.gguf");
    let opts = InitOptions {
        seed: 2,
        ..InitOptions::default()
    };
    random_drafter(&GgufFile::open(&model).unwrap(), &opts)
        .unwrap()
        .write_file(&dpath)
        .unwrap();
    let opts = EngineOptions {
        model: model.clone(),
        n_ctx: 128,
        n_ubatch: 64,
        draft: Some(DraftOptions::new(dpath)),
        placement: rules(&[], true, None).unwrap(),
        ..EngineOptions::default()
    };
    let mut deng = Engine::load(&opts, 1).unwrap();
    assert!(deng.plan.host_total() > 0);
    let mut dspark = common::drive::take(&mut deng);
    let (out, s) = common::drive::speculate(&mut deng, &mut dspark, 4, &prompt, 16);
    assert_eq!(
        out, want,
        "DSpark over host experts differs from plain decoding"
    );
    assert!(s.cycles > 0, "the drafter never drafted: {s:?}");
}
