//! Selection over a vocabulary on the GPU: greedy argmax (`shaders/argmax.wgsl`) and sorted
//! top-k candidates (`shaders/topk.wgsl`) of logits `[n_rows, n_cols]`.
//!
//! Order: value descending, ties to the lower id (llama.cpp's greedy sampler keeps the first
//! maximum). Both run in two stages recorded in one pass: `partial` (each invocation scans one
//! list of `n_per_list` columns, strided so a workgroup reads contiguous memory, and writes the
//! list's best candidate, its head, to a scratch buffer; no barriers, which is what lavapipe
//! rewards) and `merge` (one invocation per row: argmax folds the `n_lists` heads; top-k takes
//! the k best heads, then the k best columns of those k lists, which must hold the whole top k).
//! The selection is exact, so results are identical to the oracle and batch invariant.
//!
//! Outputs: argmax u32 `[n_rows]`; top-k ids u32 `[n_rows, k]` and values f32 `[n_rows, k]`,
//! `k <= MAX_K` and `k <= n_cols`.

use crate::gpu::buffers::{create_storage, read_back};
use crate::gpu::{BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;

use super::{bad_input, build, check_f32s, grid, params_uniform, read, rewrite_params};
use super::{rows_of, upload_f32, write, PARAMS};

/// Invocations per workgroup (the `WG_SIZE` override of both shaders).
pub const WG_SIZE: u32 = 64;
/// The largest k of top-k (`MAX_K` of `topk.wgsl`).
pub const MAX_K: u32 = 64;
/// Lists per row aimed at (1024: 16 workgroups per row; a merge of 1024 heads, plus for top-k
/// at most k lists of `n_cols / 1024` columns).
const TARGET_LISTS: u32 = 1024;
/// The fewest columns per list (short rows).
const MIN_PER_LIST: u32 = 16;

/// Mirrors `struct Params` of `argmax.wgsl` and `topk.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SelectParams {
    pub n_rows: u32,
    pub n_cols: u32,
    /// Columns scanned by one invocation of `partial`.
    pub n_per_list: u32,
    /// Workgroups of `partial` per row.
    pub groups_per_row: u32,
    /// Partial results per row: `groups_per_row * WG_SIZE`.
    pub n_lists: u32,
    /// Top-k only (1 for argmax).
    pub k: u32,
    pub _pad: [u32; 2],
}

const _: () = assert!(std::mem::size_of::<SelectParams>() == 32);

/// Mirrors `struct Cand` of `common/reduce_select.wgsl`: one scratch entry.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Cand {
    pub value: f32,
    pub id: u32,
}

const ARGMAX_BINDINGS: &[BindingSpec] = &[PARAMS, read(1), write(2), write(3)];
const TOPK_BINDINGS: &[BindingSpec] = &[PARAMS, read(1), write(2), write(3), write(4)];

/// The variant of `argmax` (`top_k == false`) or `topk`, stage `partial` or `merge` (a define,
/// `STAGE_*`, as well as the entry point: the pipeline cache keys variants by defines).
pub fn variant(top_k: bool, merge: bool) -> ShaderVariant {
    ShaderVariant {
        shader: if top_k { "topk" } else { "argmax" },
        entry_point: if merge { "merge" } else { "partial" },
        defines: vec![(
            if merge {
                "STAGE_MERGE"
            } else {
                "STAGE_PARTIAL"
            },
            String::new(),
        )],
        overrides: vec![("WG_SIZE", f64::from(WG_SIZE))],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: if top_k {
            TOPK_BINDINGS
        } else {
            ARGMAX_BINDINGS
        },
    }
}

/// Every variant of both shaders.
pub fn variants() -> Vec<ShaderVariant> {
    let mut out = Vec::new();
    for top_k in [false, true] {
        for merge in [false, true] {
            out.push(variant(top_k, merge));
        }
    }
    out
}

/// The stage layout for `n_rows` rows of `n_cols`.
/// Bytes of the scratch an argmax (`k` = 1) or top-k over `[n_rows, n_cols]` allocates: one
/// (value, id) pair per list per row (what the memory planner charges).
pub fn scratch_bytes(n_rows: u32, n_cols: u32, k: u32) -> u64 {
    let p = layout(n_rows, n_cols, k);
    u64::from(p.n_rows) * u64::from(p.n_lists) * 8
}

fn layout(n_rows: u32, n_cols: u32, k: u32) -> SelectParams {
    let n_per_list = n_cols.div_ceil(TARGET_LISTS).max(MIN_PER_LIST);
    let groups_per_row = n_cols.div_ceil(WG_SIZE * n_per_list).max(1);
    SelectParams {
        n_rows,
        n_cols,
        n_per_list,
        groups_per_row,
        n_lists: groups_per_row * WG_SIZE,
        k,
        _pad: [0; 2],
    }
}

/// Both dispatches of an argmax or top-k, built for at most `max_rows` rows.
#[derive(Debug)]
pub struct Select {
    pub partial: Dispatch,
    pub merge: Dispatch,
    params: SelectParams,
    max_rows: u32,
    /// The list heads, `[max_rows, n_lists]` [`Cand`]s, owned by the op.
    pub scratch: wgpu::Buffer,
}

impl Select {
    /// Argmax of each row of `logits` `[n_rows, n_cols]` into `out` (u32 `[n_rows]`).
    pub fn argmax(
        ctx: &GpuContext,
        logits: &wgpu::Buffer,
        out: &wgpu::Buffer,
        n_rows: u32,
        n_cols: u32,
    ) -> Result<Select, GpuError> {
        let params = layout(n_rows, n_cols, 1);
        check_f32s("argmax output", out, u64::from(n_rows))?;
        Select::new(ctx, false, params, logits, &[out])
    }

    /// The k best (value, id) of each row of `logits` `[n_rows, n_cols]`, sorted, into `ids`
    /// (u32 `[n_rows, k]`) and `values` (f32 `[n_rows, k]`).
    pub fn top_k(
        ctx: &GpuContext,
        logits: &wgpu::Buffer,
        ids: &wgpu::Buffer,
        values: &wgpu::Buffer,
        n_rows: u32,
        n_cols: u32,
        k: u32,
    ) -> Result<Select, GpuError> {
        if k == 0 || k > MAX_K || k > n_cols {
            let expected = format!("1..={} (and at most n_cols = {n_cols})", MAX_K);
            return Err(bad_input("top-k k", expected, k));
        }
        let params = layout(n_rows, n_cols, k);
        let n_out = u64::from(n_rows) * u64::from(k);
        check_f32s("top-k ids", ids, n_out)?;
        check_f32s("top-k values", values, n_out)?;
        Select::new(ctx, true, params, logits, &[ids, values])
    }

    fn new(
        ctx: &GpuContext,
        top_k: bool,
        params: SelectParams,
        logits: &wgpu::Buffer,
        outputs: &[&wgpu::Buffer],
    ) -> Result<Select, GpuError> {
        let what = if top_k { "top-k" } else { "argmax" };
        if params.n_cols == 0 {
            return Err(bad_input(&format!("{what} columns"), "at least 1", 0));
        }
        let n = u64::from(params.n_rows) * u64::from(params.n_cols);
        super::to_u32(&format!("{what} logits elements"), n)?;
        check_f32s(&format!("{what} logits"), logits, n)?;
        let entries = u64::from(params.n_rows) * u64::from(params.n_lists);
        super::to_u32(&format!("{what} scratch entries"), entries)?;
        let scratch = create_storage(ctx, &format!("{what} scratch"), entries * 8)?;
        let uniform = params_uniform(ctx, what, &params)?;
        let mut buffers = vec![logits, &scratch];
        buffers.extend_from_slice(outputs);
        let (g1, g2) = grids(ctx, &params)?;
        let label = format!("{what} partial");
        let partial = build(ctx, &variant(top_k, false), &label, &uniform, &buffers, g1)?;
        let label = format!("{what} merge");
        let merge = build(ctx, &variant(top_k, true), &label, &uniform, &buffers, g2)?;
        Ok(Select {
            partial,
            merge,
            params,
            max_rows: params.n_rows,
            scratch,
        })
    }

    /// Both dispatches, in recording order.
    pub fn dispatches(&self) -> [&Dispatch; 2] {
        [&self.partial, &self.merge]
    }

    /// Selects over the first `n_rows` rows from the next submission on (at most the built
    /// count).
    pub fn set_rows(&mut self, ctx: &GpuContext, n_rows: u32) -> Result<(), GpuError> {
        if n_rows > self.max_rows {
            let expected = format!("at most {} (the built row count)", self.max_rows);
            return Err(bad_input("argmax/top-k rows", expected, n_rows));
        }
        self.params.n_rows = n_rows;
        rewrite_params(ctx, &self.partial, &self.params)?;
        let (g1, g2) = grids(ctx, &self.params)?;
        self.partial.grid = g1;
        self.merge.grid = g2;
        Ok(())
    }

    pub fn params(&self) -> SelectParams {
        self.params
    }
}

/// Grids of `partial` (n_rows × groups_per_row groups) and `merge` (one lane per row).
fn grids(ctx: &GpuContext, p: &SelectParams) -> Result<([u32; 3], [u32; 3]), GpuError> {
    let partial_groups = u64::from(p.n_rows) * u64::from(p.groups_per_row);
    let g1 = grid(ctx, "select partial", partial_groups, WG_SIZE)?;
    let merge_groups = u64::from(p.n_rows).div_ceil(u64::from(WG_SIZE));
    let g2 = grid(ctx, "select merge", merge_groups, WG_SIZE)?;
    Ok((g1, g2))
}

fn words(bytes: &[u8]) -> impl Iterator<Item = [u8; 4]> + '_ {
    bytes.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]])
}

/// Runs argmax now over the rows of `logits` `[logits.len() / n_cols, n_cols]`.
pub fn argmax_on_gpu(
    ctx: &GpuContext,
    logits: &[f32],
    n_cols: usize,
) -> Result<Vec<u32>, GpuError> {
    let (n_rows, n_cols) = rows_of(logits.len(), n_cols, "argmax logits")?;
    let x = upload_f32(ctx, "argmax logits", logits)?;
    let out = create_storage(ctx, "argmax output", u64::from(n_rows) * 4)?;
    let op = Select::argmax(ctx, &x, &out, n_rows, n_cols)?;
    let raw = super::run_and_read(ctx, "argmax", &op.dispatches(), &out, n_rows as usize)?;
    Ok(raw.into_iter().map(u32::from_le_bytes).collect())
}

/// Runs top-k now over the rows of `logits` `[logits.len() / n_cols, n_cols]`; returns
/// `(ids, values)`, each `[n_rows, k]`.
pub fn top_k_on_gpu(
    ctx: &GpuContext,
    logits: &[f32],
    n_cols: usize,
    k: u32,
) -> Result<(Vec<u32>, Vec<f32>), GpuError> {
    let (n_rows, n_cols) = rows_of(logits.len(), n_cols, "top-k logits")?;
    let x = upload_f32(ctx, "top-k logits", logits)?;
    let n_out = u64::from(n_rows) * u64::from(k);
    let ids = create_storage(ctx, "top-k ids", n_out * 4)?;
    let values = create_storage(ctx, "top-k values", n_out * 4)?;
    let op = Select::top_k(ctx, &x, &ids, &values, n_rows, n_cols, k)?;
    let raw_ids = super::run_and_read(ctx, "top-k", &op.dispatches(), &ids, n_out as usize)?;
    let raw_values = read_back(ctx, &values, 0, n_out * 4)?;
    Ok((
        raw_ids.into_iter().map(u32::from_le_bytes).collect(),
        words(&raw_values).map(f32::from_le_bytes).collect(),
    ))
}
