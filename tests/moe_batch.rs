//! Batch invariance of a mixture-of-experts target across sequences: 8 sequences run as one
//! batched step (`engine::Engine`), each row's logits bit-identical to the same
//! sequence's step run alone, on `qwen3moe-tiny-q8_0` with random weights. The rows route to
//! different experts (checked on the CPU oracle: the 8 rows' expert sets differ in every layer).

use crate::common;

use std::path::Path;

use flint::engine::Engine;
use flint::engine::EngineOptions;
use flint::gguf::{GgmlType, GgufFile};
use flint::model::forward::batch::Segment;
use flint::reference::forward::{Capture, RefModel, Rows};

const SEQS: usize = 8;

/// The last-row logits of each prompt: all in one batched step, or each in its own step.
fn logits(model: &Path, prompts: &[Vec<u32>], together: bool) -> Vec<Vec<u32>> {
    let opts = EngineOptions {
        model: model.to_path_buf(),
        n_ctx: 64,
        n_ubatch: 16,
        ..EngineOptions::default()
    };
    let mut eng = Engine::load(&opts, SEQS as u32).unwrap();
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

#[test]
fn a_row_is_bit_identical_alone_and_in_a_batch_of_eight() {
    let tmp = common::temp_dir("moe-batch");
    let model = common::random_preset(tmp.path(), "qwen3moe-tiny-q8_0", 7);
    let prompts: Vec<Vec<u32>> = (0..SEQS as u32)
        .map(|s| vec![(s * 37 + 11) % 256, (s * 101 + 5) % 256])
        .collect();
    // The oracle's experts for each prompt's last row, per layer: not all the same.
    let oracle = RefModel::load(&GgufFile::open(&model).unwrap()).unwrap();
    let capture = Capture {
        rows: Rows::Last,
        named: true,
        ..Capture::default()
    };
    let mut sets = vec![std::collections::BTreeSet::new(); oracle.weights.layers.len()];
    for p in &prompts {
        let mut cache = oracle.new_cache(GgmlType::F16).unwrap();
        let out = oracle.forward(&mut cache, p, 0, &capture).unwrap();
        for (il, set) in sets.iter_mut().enumerate() {
            let t = out.get(&format!("ffn_moe_topk-{il}")).unwrap();
            let k = t.shape[1];
            let last: Vec<u32> = t.data[t.data.len() - k..]
                .iter()
                .map(|&x| x as u32)
                .collect();
            set.insert(last);
        }
    }
    for (il, s) in sets.iter().enumerate() {
        assert!(
            s.len() > 1,
            "layer {il}: every row routes to the same experts"
        );
    }
    let together = logits(&model, &prompts, true);
    let alone = logits(&model, &prompts, false);
    assert_eq!(together.len(), SEQS);
    for (s, (a, b)) in alone.iter().zip(&together).enumerate() {
        assert!(
            a == b,
            "sequence {s}: logits alone and in the batch of {SEQS} differ"
        );
    }
    eprintln!(
        "expert sets per layer over the 8 rows: {:?}",
        sets.iter().map(|s| s.len()).collect::<Vec<_>>()
    );
}
