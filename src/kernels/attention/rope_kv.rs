//! A layer's RoPE and KV store in one dispatch (`shaders/rope_kv.wgsl`), for f16 K and V
//! caches: q `[n_tokens, n_head, head_dim]` is rotated in place, k `[n_tokens, n_kv_heads,
//! head_dim]` is rotated on its way into the K cache and v `[n_tokens, n_kv_heads, head_dim_v]`
//! goes into the V cache, at the positions of a u32 buffer `[n_tokens]`.
//!
//! It replaces four dispatches ([`crate::kernels::ops::rope::Rope`] on q and on k, then
//! [`super::KvStore`] on k and on v) with the same bits; a dispatch is a fixed cost, about 37 µs
//! on lavapipe (30 layers: 90 dispatches, about 3 ms per decode step). The k buffer keeps its
//! unrotated values (only the cache is read after the store).

use crate::gpu::{BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;
use crate::kernels::ops::rope::{table_len, RopeConfig, RopeMode};
use crate::kernels::ops::{bad_input, build, check_f32s, grid, params_uniform, rewrite_params};

use super::layout::{KvLayout, KvType};
use crate::gpu::BindingKind;
use crate::kernels::spec;

/// Invocations per workgroup (the `WG_SIZE` override).
pub const WG_SIZE: u32 = 64;

/// Mirrors `struct RopeKvParams` of `shaders/common/rope_kv_params.wgsl` (`rope_kv.wgsl` and the
/// matmul RoPE epilogue).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RopeKvParams {
    pub n_tokens: u32,
    pub n_head: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub head_dim_v: u32,
    pub n_rot: u32,
    pub n_ctx: u32,
    /// First token row of the call: a batch runs one call per sequence over its rows (0 in
    /// the matmul epilogue).
    pub row0: u32,
}

const _: () = assert!(std::mem::size_of::<RopeKvParams>() == 32);

const BINDINGS: &[BindingSpec] = &[
    spec(0, BindingKind::Uniform),
    spec(1, BindingKind::StorageReadWrite),
    spec(2, BindingKind::StorageRead),
    spec(3, BindingKind::StorageRead),
    spec(4, BindingKind::StorageRead),
    spec(5, BindingKind::StorageRead),
    spec(6, BindingKind::StorageReadWrite),
    spec(7, BindingKind::StorageReadWrite),
];

/// The variant for a RoPE pairing.
pub fn variant(mode: RopeMode) -> ShaderVariant {
    let mut defines = Vec::new();
    if mode == RopeMode::Neox {
        defines.push(("NEOX", String::new()));
    }
    ShaderVariant {
        shader: "rope_kv",
        entry_point: "main",
        defines,
        overrides: vec![("WG_SIZE", f64::from(WG_SIZE))],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: BINDINGS,
    }
}

/// Every variant this kernel may use.
pub fn variants() -> Vec<ShaderVariant> {
    vec![variant(RopeMode::Normal), variant(RopeMode::Neox)]
}

/// What [`RopeKv`] reads and writes.
#[derive(Debug, Clone, Copy)]
pub struct RopeKvIo<'a> {
    /// f32 `[max_tokens, n_head, head_dim]`, rotated in place.
    pub q: &'a wgpu::Buffer,
    /// f32 `[max_tokens, n_kv_heads, head_dim]`.
    pub k: &'a wgpu::Buffer,
    /// f32 `[max_tokens, n_kv_heads, head_dim_v]`.
    pub v: &'a wgpu::Buffer,
    /// u32 `[max_tokens]`.
    pub positions: &'a wgpu::Buffer,
    /// f32 `[n_rot / 2 + 1]`: the RoPE table (from `rope_table`: frequencies, then the cos/sin
    /// scale).
    pub freqs: &'a wgpu::Buffer,
    pub k_cache: &'a wgpu::Buffer,
    pub v_cache: &'a wgpu::Buffer,
}

/// The fused RoPE + KV store of one layer, built for at most `max_tokens` tokens.
#[derive(Debug)]
pub struct RopeKv {
    pub dispatch: Dispatch,
    params: RopeKvParams,
    mode: RopeMode,
    max_tokens: u32,
    /// It uploads its params uniform (not one shared with another op).
    owns_params: bool,
}

/// Invocations for `p`: with normal pairs one per (token, pair index), which rotates that pair
/// of every head by one angle; with NEOX pairs q pairs, then K and V cache words.
fn units(p: &RopeKvParams, mode: RopeMode) -> u64 {
    let t = u64::from(p.n_tokens);
    if mode == RopeMode::Normal {
        return t * u64::from(p.head_dim.max(p.head_dim_v) / 2);
    }
    let q = u64::from(p.n_head) * u64::from(p.head_dim / 2);
    let kv = u64::from(p.n_kv_heads) * u64::from(p.head_dim / 2 + p.head_dim_v / 2);
    t * (q + kv)
}

impl RopeKv {
    /// Whether the fused op covers these caches (f16 K and V with the same heads and rows).
    pub fn supports(k: &KvLayout, v: &KvLayout) -> bool {
        k.ty == KvType::F16
            && v.ty == KvType::F16
            && k.n_kv_heads == v.n_kv_heads
            && k.n_ctx == v.n_ctx
            && k.ring == v.ring
    }

    /// The checked params of the op [`RopeKv::new`] builds over `io`; also what the
    /// split-output matmul's RoPE epilogue binds where it does the op's work
    /// ([`crate::kernels::matmul::SplitRope`]).
    pub fn shape(
        io: RopeKvIo<'_>,
        n_head: u32,
        layouts: [&KvLayout; 2],
        cfg: &RopeConfig,
        max_tokens: u32,
    ) -> Result<RopeKvParams, GpuError> {
        let [kl, vl] = layouts;
        if !RopeKv::supports(kl, vl) {
            let actual = format!("K {kl:?}, V {vl:?}");
            return Err(bad_input(
                "fused RoPE + KV store caches",
                "f16 K and V",
                actual,
            ));
        }
        let head_dim = kl.head_dim;
        if cfg.n_rot == 0 || !cfg.n_rot.is_multiple_of(2) || cfg.n_rot > head_dim {
            let expected = format!("even, 2..={head_dim}");
            return Err(bad_input("RoPE n_rot", expected, cfg.n_rot));
        }
        let t = u64::from(max_tokens);
        let n_kv = u64::from(kl.n_kv_heads);
        check_f32s("RoPE q", io.q, t * u64::from(n_head) * u64::from(head_dim))?;
        check_f32s("KV store k", io.k, t * n_kv * u64::from(head_dim))?;
        check_f32s("KV store v", io.v, t * n_kv * u64::from(vl.head_dim))?;
        check_f32s("KV positions", io.positions, t)?;
        check_f32s("RoPE table", io.freqs, u64::from(table_len(cfg.n_rot)))?;
        for (what, l, cache) in [("K cache", kl, io.k_cache), ("V cache", vl, io.v_cache)] {
            if cache.size() < l.buffer_bytes() {
                let expected = format!("at least {} bytes ({l:?})", l.buffer_bytes());
                return Err(bad_input(what, expected, format!("{} bytes", cache.size())));
            }
        }
        let params = RopeKvParams {
            n_tokens: max_tokens,
            n_head,
            n_kv_heads: kl.n_kv_heads,
            head_dim,
            head_dim_v: vl.head_dim,
            n_rot: cfg.n_rot,
            n_ctx: kl.n_ctx,
            row0: 0,
        };
        crate::kernels::ops::to_u32(
            "fused RoPE + KV store invocations",
            units(&params, cfg.mode),
        )?;
        Ok(params)
    }

    /// Builds the op for `n_head` query heads and the caches' layouts, set for `max_tokens`.
    pub fn new(
        ctx: &GpuContext,
        io: RopeKvIo<'_>,
        n_head: u32,
        layouts: [&KvLayout; 2],
        cfg: &RopeConfig,
        max_tokens: u32,
    ) -> Result<RopeKv, GpuError> {
        RopeKv::new_sharing(ctx, io, n_head, layouts, cfg, max_tokens, None)
    }

    /// [`RopeKv::new`]; with `shared`, it binds that params uniform, owned by an op of the same
    /// params that is set for the same rows before every step this one records (the layers of
    /// one sequence in a batched step), and uploads none itself.
    pub fn new_sharing(
        ctx: &GpuContext,
        io: RopeKvIo<'_>,
        n_head: u32,
        layouts: [&KvLayout; 2],
        cfg: &RopeConfig,
        max_tokens: u32,
        shared: Option<&wgpu::Buffer>,
    ) -> Result<RopeKv, GpuError> {
        let params = RopeKv::shape(io, n_head, layouts, cfg, max_tokens)?;
        let label = "rope + kv store";
        let uniform = match shared {
            Some(u) => u.clone(),
            None => params_uniform(ctx, label, &params)?,
        };
        let buffers = [
            io.q,
            io.k,
            io.v,
            io.positions,
            io.freqs,
            io.k_cache,
            io.v_cache,
        ];
        let g = grid(
            ctx,
            label,
            units(&params, cfg.mode).div_ceil(u64::from(WG_SIZE)),
            WG_SIZE,
        )?;
        let v = layouts[0].variant(variant(cfg.mode));
        let dispatch = build(ctx, &v, label, &uniform, &buffers, g)?;
        Ok(RopeKv {
            dispatch,
            params,
            mode: cfg.mode,
            max_tokens,
            owns_params: shared.is_none(),
        })
    }

    /// The shape it was built for (`n_tokens` as last set).
    pub fn params(&self) -> RopeKvParams {
        self.params
    }

    /// Its RoPE pairing.
    pub fn mode(&self) -> RopeMode {
        self.mode
    }

    /// Its params uniform (`RopeKvParams`), which the split-output matmul's RoPE epilogue
    /// binds as well ([`crate::kernels::matmul::SplitRope`]).
    pub fn uniform(&self) -> Option<&wgpu::Buffer> {
        self.dispatch.params.as_ref()
    }

    /// Rotates and stores the first `n_tokens` tokens from the next submission on.
    pub fn set_tokens(&mut self, ctx: &GpuContext, n_tokens: u32) -> Result<(), GpuError> {
        self.set_tokens_at(ctx, n_tokens, 0)
    }

    /// Rotates and stores tokens `row0..row0 + n_tokens` of the bound buffers from the next
    /// submission on (one sequence's rows of a batch).
    pub fn set_tokens_at(
        &mut self,
        ctx: &GpuContext,
        n_tokens: u32,
        row0: u32,
    ) -> Result<(), GpuError> {
        if row0
            .checked_add(n_tokens)
            .is_none_or(|end| end > self.max_tokens)
        {
            let expected = format!("at most {} (the built token count)", self.max_tokens);
            let actual = format!("{row0}..{row0}+{n_tokens}");
            return Err(bad_input("RoPE + KV store tokens", expected, actual));
        }
        self.params.n_tokens = n_tokens;
        self.params.row0 = row0;
        if self.owns_params {
            rewrite_params(ctx, &self.dispatch, &self.params)?;
        }
        let groups = units(&self.params, self.mode).div_ceil(u64::from(WG_SIZE));
        self.dispatch.grid = grid(ctx, "rope + kv store", groups, WG_SIZE)?;
        Ok(())
    }
}
