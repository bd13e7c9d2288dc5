//! The memory plan of mixture-of-experts models is what loading allocates: every expert
//! tensor, router, shared expert and the MoE block's scratch (`act.moe.*`) planned with the
//! bytes wgpu reports for it, on llama.cpp's fixtures `tests/data/moe/` (F32 and Q4_0 experts;
//! qwen35moe with its shared expert), and expert tensors split past the binding limit only at
//! expert boundaries, with the planner charging exactly those splits.

use crate::common;

use std::path::Path;

use flint::gguf::{GgmlType, GgufFile};
use flint::kernels::matmul::layout::{device_bytes_grouped, split_plan, split_plan_grouped};
use flint::memory::{self, Budget, DeviceLimits, TargetShape};
use flint::model::forward::{Allocator, Forward};
use flint::model::{weights, Hparams};

fn check_allocations(name: &str) {
    let ctx = common::gpu::ctx();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/moe/{name}.gguf"));
    let file = GgufFile::open(&path).unwrap();
    let hp = Hparams::from_gguf(&file).unwrap();
    let params = common::forward::params(256, 16);
    let shape = TargetShape {
        hp: &hp,
        tensors: &file.tensors,
    };
    let budget = Budget::resolve(None, Some(&ctx));
    let plan = memory::forward_plan(
        shape,
        None,
        &params,
        budget,
        DeviceLimits::from_context(&ctx),
    );
    assert!(plan.fits(), "{:?}", plan.misfit_summary());
    let w = weights::load(&ctx, &file, &hp, false).unwrap();
    let mut allocated = w.allocations.clone();
    let mut alloc = Allocator::new(&ctx, &plan);
    let _fwd = Forward::new(&ctx, hp, w, &params, &mut alloc).unwrap();
    allocated.extend(alloc.records);
    let mut seen = std::collections::HashSet::new();
    for (buf, bytes) in &allocated {
        let planned: u64 = buf
            .split('+')
            .map(|p| {
                let b = plan.get(p);
                b.unwrap_or_else(|| panic!("{name}: {p} allocated but not planned"))
                    .bytes
            })
            .sum();
        assert_eq!(*bytes, planned, "{name}: {buf}: allocated vs planned");
        seen.extend(buf.split('+').map(str::to_string));
    }
    for b in &plan.buffers {
        assert!(
            seen.contains(&b.name) || b.bytes == 0,
            "{name}: {} planned but not allocated",
            b.name
        );
    }
    let experts = allocated
        .iter()
        .filter(|(n, _)| n.contains("_exps"))
        .count();
    let scratch = allocated
        .iter()
        .filter(|(n, _)| n.starts_with("act.moe."))
        .count();
    assert!(
        experts > 0 && scratch >= 7,
        "{name}: {experts} expert tensors, {scratch} scratch"
    );
}

#[test]
fn moe_allocations_equal_the_plan() {
    check_allocations("qwen3moe-a-q4");
    check_allocations("qwen35moe-a");
}

#[test]
fn expert_tensors_split_only_between_experts() {
    // Qwen3.5-35B-A3B's ffn_gate_exps: [2048, 512, 256] in Q4_K, 151 MB, under a 64 MiB limit.
    let (ty, k, n, e) = (GgmlType::Q4_K, 2048u64, 512u64, 256u64);
    let limit = 64 << 20;
    let grouped = split_plan_grouped(ty, [k, n * e], limit, n).unwrap();
    assert!(grouped.len() > 1);
    let mut next = 0;
    for s in &grouped {
        assert_eq!(s.row0, next);
        assert_eq!(s.n_rows % n, 0, "a split cuts an expert: {s:?}");
        assert!(s.bytes <= limit);
        next += s.n_rows;
    }
    assert_eq!(next, n * e);
    let limits = wgpu::Limits {
        max_storage_buffer_binding_size: limit,
        max_buffer_size: limit,
        ..wgpu::Limits::default()
    };
    let charged = device_bytes_grouped(ty, [k, n * e], &limits, n).unwrap();
    assert_eq!(charged, grouped.iter().map(|s| s.bytes).sum::<u64>());
    // Row splits of the same tensor cut experts (so the grouped plan is needed).
    let rows = split_plan(ty, [k, n * e], limit).unwrap();
    assert!(rows.iter().any(|s| s.n_rows % n != 0));
    // An expert larger than the limit is refused, naming the group.
    let err = split_plan_grouped(ty, [k, n * e], 128 << 10, n).unwrap_err();
    assert!(err.to_string().contains("512 row(s)"), "{err}");
}
