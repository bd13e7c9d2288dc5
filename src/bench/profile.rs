//! `flint bench --profile`: where one forward step spends its time. The step's dispatch list
//! (the one a real step records into one pass) is timed whole, then dispatch by dispatch, each
//! submitted alone and waited for, and grouped by kernel (the shader variant's key): count,
//! milliseconds per step and share. A real step with its readback counts the submits and
//! readbacks per token. Per-dispatch times include one submit and one wait each, so their sum
//! exceeds the whole step by the dispatch overhead, which the table reports too.
//!
//! Each kernel's row also gives the workgroups its dispatches launch per step (the sum of
//! `x·y·z` over its dispatches) and their grids (`x×y×z`, with how many dispatches launch each),
//! so a dispatch's shape (how much of a GPU's parallelism a kernel can fill) can be checked on a
//! CPU driver, where its speed says nothing.

use std::collections::BTreeMap;
use std::time::Instant;

use super::stats::median;
use crate::engine::Engine;
use crate::gpu::GpuContext;
use crate::kernels::launch::{submit, Dispatch};
use crate::model::forward::batch::Segment;
use crate::{Error, Result};

/// One kernel's share of a step.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTime {
    /// Shader and variant key (`matmul_q4_1[…]`).
    pub kernel: String,
    pub count: usize,
    /// Milliseconds per step, dispatches timed alone.
    pub ms: f64,
    /// Workgroups launched per step: the sum of `x·y·z` over the kernel's dispatches.
    pub workgroups: u64,
    /// The distinct grids `[x, y, z]` of its dispatches, each with how many dispatches use it
    /// (ascending by grid).
    pub grids: Vec<([u32; 3], usize)>,
}

/// Workgroups a dispatch of `grid` launches: `x·y·z`.
pub fn workgroups(grid: [u32; 3]) -> u64 {
    grid.iter().map(|&g| u64::from(g)).product()
}

/// Per kernel: dispatches, milliseconds, dispatches per grid.
type Acc = (usize, f64, BTreeMap<[u32; 3], usize>);

/// Groups timed dispatches `(kernel key, grid, ms)` by kernel: count, summed time, workgroups
/// and distinct grids per kernel, slowest kernel first.
pub fn group_by_kernel(timed: &[(String, [u32; 3], f64)]) -> Vec<KernelTime> {
    let mut by_kernel: BTreeMap<&str, Acc> = BTreeMap::new();
    for (kernel, grid, ms) in timed {
        let e = by_kernel.entry(kernel).or_default();
        e.0 += 1;
        e.1 += ms;
        *e.2.entry(*grid).or_default() += 1;
    }
    let mut kernels: Vec<KernelTime> = by_kernel
        .into_iter()
        .map(|(kernel, (count, ms, grids))| KernelTime {
            kernel: kernel.to_string(),
            count,
            ms,
            workgroups: grids.iter().map(|(&g, &n)| n as u64 * workgroups(g)).sum(),
            grids: grids.into_iter().collect(),
        })
        .collect();
    kernels.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    kernels
}

/// `grids` as `x×y×z` (with `(×n)` where n dispatches share it), at most 3 then `…`.
fn render_grids(grids: &[([u32; 3], usize)]) -> String {
    let mut parts: Vec<String> = grids
        .iter()
        .take(3)
        .map(|([x, y, z], n)| match n {
            1 => format!("{x}×{y}×{z}"),
            n => format!("{x}×{y}×{z} (×{n})"),
        })
        .collect();
    if grids.len() > 3 {
        parts.push(format!("… {} more", grids.len() - 3));
    }
    parts.join(", ")
}

/// The profile of a step of `rows` rows at depth `depth`.
#[derive(Debug, Clone, PartialEq)]
pub struct StepProfile {
    pub rows: u32,
    /// Rows whose logits the step computes (the last ones).
    pub logit_rows: u32,
    pub depth: u32,
    pub dispatches: usize,
    /// The whole step as one pass and one submit (median of the repetitions).
    pub whole_ms: f64,
    /// Sum of the dispatches timed alone.
    pub isolated_ms: f64,
    /// Per step, counted on a real step with its argmax readback.
    pub submits: u64,
    pub readbacks: u64,
    pub kernels: Vec<KernelTime>,
}

/// `list` timed whole and dispatch by dispatch (medians of `reps`): (whole ms, kernels,
/// dispatches).
fn time_list(
    ctx: &GpuContext,
    list: &[&Dispatch],
    reps: u32,
) -> Result<(f64, Vec<KernelTime>, usize)> {
    if list.is_empty() {
        return Err(Error::Usage("the step recorded no dispatches".into()));
    }
    let reps = reps.max(1);
    let mut whole = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        submit(ctx, "profile step", list)?;
        ctx.poll("profile", true)?;
        whole.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut timed = Vec::with_capacity(list.len());
    for d in list {
        let mut times = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            submit(ctx, "profile dispatch", &[*d])?;
            ctx.poll("profile", true)?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let v = &d.pipeline.variant;
        timed.push((
            format!("{} [{}]", v.shader, v.key()),
            d.grid,
            median(&times),
        ));
    }
    Ok((median(&whole), group_by_kernel(&timed), list.len()))
}

/// Profile a batched decode step of `b` sequences, each at depth `depth` (batched steps:
/// per-sequence attention and DeltaNet calls, split-KV where it applies). The depth's rows are
/// assumed, not run ([`crate::model::forward::batch::BatchForward::assume_rows`]): the K/V and
/// states hold whatever the buffers hold, which changes no dispatch's shape or work, so a 32k
/// depth profiles in seconds even on a CPU driver.
pub fn profile_batched(eng: &mut Engine, b: u32, depth: u32, reps: u32) -> Result<StepProfile> {
    let n_vocab = eng.hp().n_vocab;
    let mut rng = super::TokenRng::new(0x9A0F);
    let tokens = rng.tokens(b, n_vocab);
    let seqs = b as usize;
    if seqs > eng.n_seq() {
        return Err(Error::Usage(format!(
            "--profile -npl {b}: the engine has {} sequences",
            eng.n_seq()
        )));
    }
    for seq in 0..seqs {
        eng.reset(seq)?;
        eng.assume_rows(seq, depth)?;
    }
    let segs: Vec<Segment<'_>> = (0..seqs)
        .map(|seq| Segment {
            seq,
            tokens: &tokens[seq..=seq],
            n_logits: 1,
        })
        .collect();
    let (s0, r0) = eng.ctx.counters().get();
    eng.step(&segs)?;
    eng.argmax()?;
    let (s1, r1) = eng.ctx.counters().get();
    for seq in 0..seqs {
        eng.reset(seq)?;
        eng.assume_rows(seq, depth)?;
    }
    let ctx = std::sync::Arc::clone(&eng.ctx);
    let list = eng.record_step(&segs)?;
    let (whole, kernels, n_dispatches) = time_list(&ctx, &list, reps)?;
    drop(list);
    for seq in 0..seqs {
        eng.reset(seq)?;
    }
    Ok(StepProfile {
        rows: b,
        logit_rows: b,
        depth,
        dispatches: n_dispatches,
        whole_ms: whole,
        isolated_ms: kernels.iter().map(|k| k.ms).sum(),
        submits: s1 - s0,
        readbacks: r1 - r0,
        kernels,
    })
}

/// Profile a step of `rows` rows (1: a decode step; more: a prefill ubatch or verify batch)
/// computing the logits of the last `logit_rows` rows (1 for decode and prefill, `rows` for a
/// verify step) after `depth` cached tokens, over `reps` repetitions.
pub fn profile_step(
    engine: &mut Engine,
    rows: u32,
    logit_rows: u32,
    depth: u32,
    reps: u32,
) -> Result<StepProfile> {
    let n_vocab = engine.hp().n_vocab;
    let mut rng = super::TokenRng::new(0x9A0F);
    super::fill_depth(engine, depth, &mut rng)?;
    let tokens = rng.tokens(rows, n_vocab);
    let seg = Segment {
        seq: 0,
        tokens: &tokens,
        n_logits: logit_rows,
    };
    // A real step: how many submits and readbacks a token costs.
    engine.checkpoint(0)?;
    let (s0, r0) = engine.ctx.counters().get();
    engine.step(std::slice::from_ref(&seg))?;
    engine.argmax()?;
    let (s1, r1) = engine.ctx.counters().get();
    engine.truncate(0, depth)?;
    let ctx = std::sync::Arc::clone(&engine.ctx);
    let list = engine.record_step(std::slice::from_ref(&seg))?;
    let (whole, kernels, n_dispatches) = time_list(&ctx, &list, reps)?;
    drop(list);
    // The repeated submits ran the step's recurrent layers again and again (hybrid models):
    // the engine leaves with an empty sequence rather than a state its cache does not match.
    engine.reset(0)?;
    Ok(StepProfile {
        rows,
        logit_rows,
        depth,
        dispatches: n_dispatches,
        whole_ms: whole,
        isolated_ms: kernels.iter().map(|k| k.ms).sum(),
        submits: s1 - s0,
        readbacks: r1 - r0,
        kernels,
    })
}

/// The profile as a markdown table.
pub fn render(p: &StepProfile) -> String {
    let mut out = format!(
        "step of {} row(s) ({} with logits) at depth {}: {} dispatches, {} submit(s) and {} \
         readback(s) per step, whole step {:.2} ms (one pass, one submit); dispatches alone sum to {:.2} ms \
         ({:.1} µs of overhead per dispatch)\n\n",
        p.rows,
        p.logit_rows,
        p.depth,
        p.dispatches,
        p.submits,
        p.readbacks,
        p.whole_ms,
        p.isolated_ms,
        1e3 * (p.isolated_ms - p.whole_ms).max(0.0) / p.dispatches as f64,
    );
    out.push_str(
        "| kernel | dispatches | workgroups / step | grid (x×y×z) | ms / step (alone) | share |\n\
         |---|---:|---:|---|---:|---:|\n",
    );
    for k in &p.kernels {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.3} | {:.1} % |\n",
            k.kernel,
            k.count,
            k.workgroups,
            render_grids(&k.grids),
            k.ms,
            100.0 * k.ms / p.isolated_ms.max(1e-12)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two kernels, one with two grids: counts, times, `Σ x·y·z` and the grid list.
    #[test]
    fn grouping_sums_workgroups_per_kernel() {
        let timed = vec![
            ("a".to_string(), [9, 1, 1], 1.0),
            ("b".to_string(), [4, 2, 3], 5.0),
            ("a".to_string(), [9, 1, 1], 1.5),
            ("a".to_string(), [2, 3, 1], 0.5),
        ];
        let k = group_by_kernel(&timed);
        assert_eq!(k[0].kernel, "b");
        assert_eq!((k[0].count, k[0].workgroups), (1, 24));
        assert_eq!(k[1].kernel, "a");
        assert_eq!((k[1].count, k[1].workgroups), (3, 9 + 9 + 6));
        assert_eq!(k[1].grids, vec![([2, 3, 1], 1), ([9, 1, 1], 2)]);
        assert_eq!(k[1].ms, 3.0);
        assert_eq!(render_grids(&k[1].grids), "2×3×1, 9×1×1 (×2)");
        assert_eq!(workgroups([0, 5, 1]), 0);
    }
}
