//! Fused attention (`attn_fused.wgsl`, [`FusedAttention`]) for multi-row calls: prefill
//! ubatches, speculative verify batches and the drafter's γ-row block. No partials buffer: one
//! workgroup per (query row, KV head, chunk of ≤ 8 query heads) walks the row's 256-key splits in
//! order, computes each split's partial with the split pass's code and folds it into a running
//! state with the reduce pass's fold, in the reduce pass's order. Each output row is therefore
//! bit-identical to the two-pass (decode) path over the same visible keys
//! (`tests/kernels_attention_fused.rs`); its scratch is workgroup memory (24.2 KiB) plus a
//! 16-byte state per (row, head) ([`AttnShape::fused_state_bytes`]), so nothing but the K/V
//! caches grows with the context.
//!
//! Passes: lavapipe ends every loop of a shader invocation after 65535 iterations of all its
//! loops together (gallivm's `LP_MAX_TGSI_LOOP_ITERATIONS`), which one workgroup folding a long
//! context would exceed, silently. So a dispatch folds at most [`pass_splits`] splits per
//! workgroup (half that budget by an upper bound of the shader's loop counts) and is recorded
//! once per pass, the running state resuming from `out` and the state buffer. The first pass
//! uses the `FIRST_PASS` pipeline. Bits do not depend on the number of passes.
//!
//! Shapes and mask modes as [`super::Attention`]; the same [`AttnShape`] describes a call site.
//! A model builds a [`FusedAttention`] once per (layer, buffer set), and per step calls
//! [`FusedAttention::set_step`] before recording [`FusedAttention::dispatches`]. Parallelism is
//! `n_q · n_kv_heads · ceil(group / 8)` workgroups, so decode (one row) keeps the two-pass path,
//! whose splits run in parallel.

use crate::gpu::buffers::{create_storage, create_uniform, upload};
use crate::gpu::{BindingKind, BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::{bind_group, Dispatch};
use crate::kernels::{dispatch_grid, spec};

use super::layout::{KvLayout, KvType};
use super::serial::{
    rows_variant, serial_pass_splits, serial_variant, use_rows, use_serial, ROWS_MIN_Q,
    SERIAL_WG_SIZE,
};
use super::shape::{check_io, need, AttnIo, AttnShape, SPLIT_SIZE};

/// Invocations per workgroup of the fused pass (one key each in the score phase).
pub const FUSED_WG_SIZE: u32 = 256;

/// Loop iterations a pass may run per invocation: half of lavapipe's 65535.
const LOOP_BUDGET: u64 = 65535 / 2;

/// Splits one fused workgroup folds per pass for `heads` query heads (≤ 8) over `kv`: the
/// budget over an upper bound of the loop iterations one invocation runs per split (every
/// inner loop of `common/kv_attn.wgsl` counted as if not unrolled, plus its exit test). At
/// least 1. Head dim 128, 4 heads, f16: 18 splits (4608 keys) per pass; head dim 256, 8 heads,
/// f16: 5.
pub fn pass_splits(kv: &KvLayout, heads: u32) -> u32 {
    let wg = u64::from(FUSED_WG_SIZE);
    let split = u64::from(SPLIT_SIZE);
    let d = u64::from(kv.head_dim);
    let dims = u64::from(kv.ty.word_dims());
    let qw = d / dims;
    let h = u64::from(heads.max(1));
    let scores = split.div_ceil(wg) * (qw * (1 + dims * (h + 1)) + h + 1);
    let max = split + 1;
    let exp = (h * split).div_ceil(wg);
    let pv = (h * qw).div_ceil(wg) * (split * (dims + 1) + dims + 1);
    let per_split = scores + max + exp + pv + 8;
    let fixed = 2 * (h * d).div_ceil(wg) + 16;
    let n = LOOP_BUDGET.saturating_sub(fixed) / per_split;
    u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}

/// Bindings of `attn_fused.wgsl`: params, q, k cache, v cache, positions, mask, out, state.
pub const FUSED_BINDINGS: &[BindingSpec] = &[
    spec(0, BindingKind::Uniform),
    spec(1, BindingKind::StorageRead),
    spec(2, BindingKind::StorageRead),
    spec(3, BindingKind::StorageRead),
    spec(4, BindingKind::StorageRead),
    spec(5, BindingKind::StorageRead),
    spec(6, BindingKind::StorageReadWrite),
    spec(7, BindingKind::StorageReadWrite),
];

/// The fused variant for a cache type; `use_f16` as for [`super::attend::split_variant`] (the
/// same cache binding and conversion, so the same values); `first` starts from the empty state
/// (the first pass), otherwise from the saved one.
pub fn fused_variant(ty: KvType, use_f16: bool, first: bool) -> ShaderVariant {
    let (defines, use_f16) = ty.cache_defines(use_f16);
    ShaderVariant {
        shader: "attn_fused",
        entry_point: "main",
        defines,
        overrides: vec![
            ("WG_SIZE", f64::from(FUSED_WG_SIZE)),
            ("FIRST_PASS", f64::from(u8::from(first))),
        ],
        requires_f16: use_f16,
        requires_subgroups: false,
        requires_int64: false,
        bindings: FUSED_BINDINGS,
    }
}

/// The dispatches of a fused attention call site (first pass, later passes), with their shared
/// params uniform.
#[derive(Debug)]
pub struct FusedAttention {
    pub shape: AttnShape,
    pub first: Dispatch,
    pub next: Dispatch,
    /// Passes the current step records (`first` once, then `next`).
    pub passes: u32,
    /// Runs `attn_serial.wgsl` (CPU adapters, f16 cache) instead of `attn_fused.wgsl`.
    serial: bool,
    /// `attn_rows.wgsl` (first pass, later passes) where [`use_rows`]: steps of at least
    /// [`ROWS_MIN_Q`] rows run it instead of `first` and `next` (same bits).
    rows: Option<[Dispatch; 2]>,
    /// The current step runs `rows`.
    rows_step: bool,
    /// It uploads its params uniform (not one shared with another call site).
    owns_params: bool,
}

impl FusedAttention {
    /// Builds the dispatches, set for `max_q` rows and `max_kv_len` keys. `state` is scratch of
    /// [`AttnShape::fused_state_bytes`] bytes (it may be shared by call sites that run in
    /// turn, like the layers of a model).
    pub fn new(
        ctx: &GpuContext,
        shape: AttnShape,
        b: AttnIo<'_>,
        state: &wgpu::Buffer,
    ) -> Result<Self, GpuError> {
        Self::new_sharing(ctx, shape, b, state, None)
    }

    /// [`FusedAttention::new`]; with `shared`, it binds that params uniform, owned by a call
    /// site of the same shape that is set for the same rows and keys before every step this
    /// one records (the layers of one sequence in a batched step), and uploads none itself.
    pub fn new_sharing(
        ctx: &GpuContext,
        shape: AttnShape,
        b: AttnIo<'_>,
        state: &wgpu::Buffer,
        shared: Option<&wgpu::Buffer>,
    ) -> Result<Self, GpuError> {
        let placeholder = create_storage(ctx, "attention placeholder", 4)?;
        let (positions, mask) = check_io(&shape, &b, &placeholder)?;
        need("fused attention state", state, shape.fused_state_bytes())?;
        let params = shape.params(shape.max_q, shape.max_kv_len)?;
        let uniform = match shared {
            Some(u) => u.clone(),
            None => create_uniform(ctx, "fused attention params", &params)?,
        };
        let resources = [
            uniform.as_entire_binding(),
            b.q.as_entire_binding(),
            b.k_cache.as_entire_binding(),
            b.v_cache.as_entire_binding(),
            positions.as_entire_binding(),
            mask.as_entire_binding(),
            b.out.as_entire_binding(),
            state.as_entire_binding(),
        ];
        let serial = use_serial(ctx, shape.kv.ty);
        let make = |variant: ShaderVariant, first: bool| -> Result<Dispatch, GpuError> {
            let variant = shape.kv.variant(variant);
            let pipeline = ctx.pipelines().get(ctx, &variant)?;
            let label = format!(
                "fused attention {:?} {} first={first}",
                shape.kv.ty, variant.shader
            );
            Ok(Dispatch {
                bind_group: bind_group(ctx, &pipeline, &label, &resources)?,
                label,
                pipeline,
                params: Some(uniform.clone()),
                grid: [0, 0, 1],
            })
        };
        let [first, next] = [true, false].map(|first| {
            let variant = if serial {
                let int64 = ctx.has_int64() && ctx.has_f16_in_f32();
                serial_variant(shape.kv.head_dim, ctx.has_f16(), int64, first)
            } else {
                fused_variant(shape.kv.ty, ctx.has_f16(), first)
            };
            make(variant, first)
        });
        let rows = if use_rows(ctx, shape.kv.ty, shape.kv.head_dim) {
            let d = shape.kv.head_dim;
            Some([
                make(rows_variant(d, true), true)?,
                make(rows_variant(d, false), false)?,
            ])
        } else {
            None
        };
        let mut attn = FusedAttention {
            shape,
            first: first?,
            next: next?,
            passes: 0,
            serial,
            rows,
            rows_step: false,
            owns_params: shared.is_none(),
        };
        attn.set_step(ctx, shape.max_q, shape.max_kv_len)?;
        Ok(attn)
    }

    /// Sets the next recording to `n_q` rows over `kv_len` keys (params uniform, grid, passes).
    pub fn set_step(&mut self, ctx: &GpuContext, n_q: u32, kv_len: u32) -> Result<(), GpuError> {
        self.set_step_at(ctx, n_q, kv_len, 0)
    }

    /// [`FusedAttention::set_step`] for query rows `row0..row0 + n_q` of the bound q, positions
    /// and out buffers (one sequence's rows of a batch; the state scratch is indexed the same
    /// way). Each row's bits are those of the same row at `row0` 0.
    pub fn set_step_at(
        &mut self,
        ctx: &GpuContext,
        n_q: u32,
        kv_len: u32,
        row0: u32,
    ) -> Result<(), GpuError> {
        let mut p = self.shape.params(n_q, kv_len)?;
        if row0
            .checked_add(n_q)
            .is_none_or(|end| end > self.shape.max_q)
        {
            return Err(super::shape::bad(
                "query rows",
                format!("within the {} bound rows", self.shape.max_q),
                format!("{row0}..{row0}+{n_q}"),
            ));
        }
        p.row0 = row0;
        self.rows_step = self.rows.is_some() && n_q >= ROWS_MIN_Q;
        let groups = if self.serial {
            p.pass_splits = serial_pass_splits(self.shape.kv.head_dim);
            if self.rows_step {
                // A workgroup per (head, block of 8 rows).
                u64::from(p.n_head) * u64::from(n_q.div_ceil(SERIAL_WG_SIZE))
            } else {
                // One invocation per (row, head); the shader derives its tasks from n_q, n_head.
                (u64::from(n_q) * u64::from(p.n_head)).div_ceil(u64::from(SERIAL_WG_SIZE))
            }
        } else {
            u64::from(p.n_tasks)
        };
        let max = ctx.limits().max_compute_workgroups_per_dimension;
        let (x, y) = dispatch_grid("fused attention", groups, max)?;
        if let (true, Some(uniform)) = (self.owns_params, &self.first.params) {
            upload(
                ctx,
                "fused attention params",
                uniform,
                0,
                bytemuck::bytes_of(&p),
            )?;
        }
        self.first.grid = [x, y, 1];
        self.next.grid = [x, y, 1];
        if let Some(rows) = &mut self.rows {
            for d in rows {
                d.grid = [x, y, 1];
            }
        }
        self.passes = p.n_splits.div_ceil(p.pass_splits).max(1);
        Ok(())
    }

    /// The dispatches to record, in order: the first pass, then `passes - 1` later passes.
    pub fn dispatches(&self) -> Vec<&Dispatch> {
        let (first, next) = match &self.rows {
            Some([first, next]) if self.rows_step => (first, next),
            _ => (&self.first, &self.next),
        };
        let mut out = vec![first];
        out.extend((1..self.passes).map(|_| next));
        out
    }
}
