//! The Bonsai presets (`flint gguf preset`): PrismML's 1-bit and ternary models and the seed's
//! drafter, shape-only. Their sizes are held to the published figures (llama-bench's model
//! sizes: Bonsai-8B Q1_0 1.07 GiB, Ternary-Bonsai-8B Q2_0 2.03 GiB, Ternary-Bonsai-27B Q2_0
//! 6.66 GiB, 26.90 B parameters), which checks the dimensions and the block types together;
//! `flint info` reads all four, and `flint plan` plans the 8B ones at `-c 32768` on 8 GiB.

use crate::common;

use std::process::Command;

use flint::gguf::{GgmlType, Gguf};
use flint::model::presets;

const GIB: f64 = (1u64 << 30) as f64;

fn preset(name: &str) -> Gguf {
    let bytes = presets::preset(name)
        .expect("known preset")
        .expect("writes");
    let g = Gguf::parse(&bytes).expect("parses");
    assert!(g.shape_only);
    g
}

fn weight_bytes(g: &Gguf) -> u64 {
    g.tensors.iter().map(|t| t.n_bytes).sum()
}

#[test]
fn sizes_match_the_published_figures() {
    for (name, gib, ty) in [
        ("bonsai-8b-q1_0", 1.07, GgmlType::Q1_0),
        ("ternary-bonsai-8b-q2_0", 2.03, GgmlType::Q2_0_G128),
        ("ternary-bonsai-27b-q2_0", 6.66, GgmlType::Q2_0_G128),
    ] {
        let g = preset(name);
        let size = weight_bytes(&g) as f64 / GIB;
        eprintln!("{name}: {size:.3} GiB (published {gib})");
        assert!((size - gib).abs() < 0.006, "{name}: {size} GiB");
        let q = g.tensor("blk.0.ffn_up.weight").expect("ffn_up");
        assert_eq!(q.ty, ty, "{name}: the parser reads the layout written");
    }
    let params: u64 = preset("ternary-bonsai-27b-q2_0")
        .tensors
        .iter()
        .map(|t| t.n_elements())
        .sum();
    assert!((params as f64 / 1e9 - 26.90).abs() < 0.01, "{params}");
    let d = preset("ternary-bonsai-27b-dspark-q4_1");
    for (t, ty) in [
        ("token_embd.weight", GgmlType::Q2_0_G128),
        ("dspark.fc.weight", GgmlType::Q2_0_G128),
        ("dspark.markov_head_a.weight", GgmlType::BF16),
        ("blk.0.attn_q.weight", GgmlType::Q4_1),
    ] {
        assert_eq!(d.tensor(t).map(|x| x.ty), Some(ty), "{t}");
    }
}

#[test]
fn info_reads_all_four_and_plan_plans_the_8b_ones() {
    let tmp = common::temp_dir("bonsai");
    let flint = env!("CARGO_BIN_EXE_flint");
    for name in [
        "bonsai-8b-q1_0",
        "ternary-bonsai-8b-q2_0",
        "ternary-bonsai-27b-q2_0",
        "ternary-bonsai-27b-dspark-q4_1",
    ] {
        let path = tmp.path().join(format!("{name}.gguf"));
        let out = Command::new(flint)
            .args(["gguf", "preset", name])
            .arg(&path)
            .output()
            .expect("run flint");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let info = Command::new(flint).arg("info").arg(&path).output().unwrap();
        let text = String::from_utf8_lossy(&info.stdout);
        assert!(
            info.status.success(),
            "info {name}: {}",
            String::from_utf8_lossy(&info.stderr)
        );
        assert!(text.contains("totals:"), "{name}: {text}");
        if name.contains("q2_0") || name.contains("dspark") {
            assert!(text.contains("g128 (PrismML legacy)"), "{name}: {text}");
        }
        if !name.contains("8b") {
            continue;
        }
        let plan = Command::new(flint)
            .args(["plan", "-m"])
            .arg(&path)
            .args(["-c", "32768", "--gpu-mem", "8GiB"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&plan.stdout);
        eprintln!("{text}");
        assert!(
            plan.status.success(),
            "plan {name}: {}",
            String::from_utf8_lossy(&plan.stderr)
        );
        assert!(text.contains("fits:"), "{name}: {text}");
        assert!(
            text.contains("weights") && text.contains("kv"),
            "{name}: {text}"
        );
    }
}
