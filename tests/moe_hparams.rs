//! The expert keys of `qwen3moe` / `qwen35moe` as llama.cpp b11434 reads them, on both readers
//! (the GPU path's `flint::model::moe::MoeHparams` and the oracle's `RefMoe`), and refusals
//! that name what they refuse: routing keys whose values contradict llama.cpp's hard-coded rule
//! for these architectures (`src/models/qwen3moe.cpp`, `build_moe_ffn`: softmax, renormalised
//! top-k, no scale, no groups), a shared expert qwen3moe does not have, and expert or routing
//! tensors flint does not run (a selection bias `exp_probs_b`, a merged `ffn_gate_up_exps`).

use flint::gguf::{GgmlType, Gguf, GgufWriter, MetaArray, MetaValue};
use flint::model::presets::preset_writer;
use flint::model::shapes::check_shapes;
use flint::model::Hparams;
use flint::reference::meta::{RefHparams, RefMoe};

fn tiny(edit: impl FnOnce(&mut GgufWriter)) -> Gguf {
    let mut w = preset_writer("qwen3moe-tiny-q8_0").unwrap().unwrap();
    edit(&mut w);
    Gguf::parse(&w.to_bytes().unwrap()).unwrap()
}

/// Both readers' errors for `g` (GPU hparams + shapes, oracle hparams + RefMoe).
fn errors(g: &Gguf) -> [String; 2] {
    let gpu = Hparams::from_gguf(g).and_then(|hp| check_shapes(g, &hp));
    let oracle = RefHparams::from_gguf(g).and_then(|hp| RefMoe::from_gguf(g, &hp));
    [
        gpu.err().map(|e| e.to_string()).unwrap_or_default(),
        oracle.err().map(|e| e.to_string()).unwrap_or_default(),
    ]
}

#[test]
fn both_readers_agree_on_the_expert_keys() {
    let g = tiny(|_| {});
    let hp = Hparams::from_gguf(&g).unwrap();
    check_shapes(&g, &hp).unwrap();
    let moe = hp.moe.unwrap();
    let r = RefMoe::from_gguf(&g, &RefHparams::from_gguf(&g).unwrap()).unwrap();
    assert_eq!(
        (moe.n_expert, moe.n_expert_used, moe.n_ff_exp),
        (16, 4, 128)
    );
    assert_eq!(
        (r.n_expert, r.n_expert_used, r.n_ff_exp),
        (moe.n_expert, moe.n_expert_used, moe.n_ff_exp)
    );
    assert_eq!((moe.n_ff_shexp, r.n_ff_shexp), (None, None));
    // llama.cpp: without expert_feed_forward_length the width is feed_forward_length / k;
    // a uniform per-layer array of k is one value.
    let g = tiny(|w| {
        w.set("qwen3moe.expert_feed_forward_length", MetaValue::U32(0));
        let k = MetaValue::Array(MetaArray::U32(vec![4; 4]));
        w.set("qwen3moe.expert_used_count", k);
    });
    let hp = Hparams::from_gguf(&g).unwrap();
    assert_eq!(hp.moe.unwrap().n_ff_exp, 512 / 4);
}

#[test]
fn contradicting_routing_keys_are_refused_by_name() {
    let cases: [(&str, MetaValue); 6] = [
        ("qwen3moe.expert_gating_func", MetaValue::U32(2)),
        ("qwen3moe.expert_weights_norm", MetaValue::Bool(false)),
        ("qwen3moe.expert_weights_scale", MetaValue::F32(2.5)),
        ("qwen3moe.expert_group_count", MetaValue::U32(4)),
        ("qwen3moe.expert_shared_count", MetaValue::U32(1)),
        (
            "qwen3moe.expert_used_count",
            MetaValue::Array(MetaArray::U32(vec![4, 4, 2, 4])),
        ),
    ];
    for (key, value) in cases {
        let g = tiny(|w| {
            w.set(key, value);
        });
        for e in errors(&g) {
            assert!(e.contains(key), "{key}: '{e}'");
        }
    }
    // Accepted: the values llama.cpp hard-codes.
    let g = tiny(|w| {
        w.set("qwen3moe.expert_gating_func", MetaValue::U32(1));
        w.set("qwen3moe.expert_weights_norm", MetaValue::Bool(true));
        w.set("qwen3moe.expert_weights_scale", MetaValue::F32(1.0));
    });
    assert_eq!(errors(&g), [String::new(), String::new()]);
    let g = tiny(|w| {
        w.set("qwen3moe.expert_count", MetaValue::U32(0));
    });
    for e in errors(&g) {
        assert!(e.contains("qwen3moe.expert_count"), "'{e}'");
    }
}

#[test]
fn unsupported_expert_tensors_are_refused_by_name() {
    for (name, shape) in [
        ("blk.1.exp_probs_b.bias", vec![16u64]),
        ("blk.2.ffn_gate_up_exps.weight", vec![256, 256, 16]),
    ] {
        let g = tiny(|w| {
            w.add_tensor_shape(name, &shape, GgmlType::F32).unwrap();
        });
        let hp = Hparams::from_gguf(&g).unwrap();
        let e = check_shapes(&g, &hp).unwrap_err().to_string();
        assert!(e.contains(name), "{name}: '{e}'");
    }
}
