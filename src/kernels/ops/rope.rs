//! Rotary position embedding on the GPU (`shaders/rope.wgsl`), ggml_rope_ext semantics without
//! YaRN: x `[n_tokens, n_heads, head_dim]`, positions `[n_tokens]` (i32), a frequency table
//! `[n_rot / 2]` built once per model by [`rope_freqs`].
//!
//! `theta(t, i) = f32(pos[t]) * freqs[i]` with `freqs[i] = freq_scale * freq_base^(-2i/n_rot) /
//! freq_factors[i]`, computed in f64 and rounded once to f32 (llama3-style scaling arrives as the
//! `rope_freqs.weight` factors). ggml computes the same product in f32 steps (and its CPU backend
//! by repeated multiplication), so the angle agrees to a few ulp; the CPU oracle uses this exact
//! table, so GPU and oracle share theta bit for bit and differ only in sin/cos.
//! YaRN (ext_factor ≠ 0) is not implemented; its ramp is linear in the position, so it would
//! fold into this table plus an output scale.
//!
//! Pairs: [`RopeMode::Normal`] rotates `(2i, 2i+1)`, [`RopeMode::Neox`] `(i, i + n_rot/2)`;
//! elements `n_rot..head_dim` pass through. Variants: `NEOX`, `IN_PLACE`.

use crate::gpu::buffers::create_storage_init;
use crate::gpu::{BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::launch::Dispatch;

use super::{bad_input, build, check_f32s, grid, params_uniform, read, rewrite_params, to_u32};
use super::{upload_f32, write, HostIo, Io, PARAMS};

/// Invocations per workgroup (the `WG_SIZE` override).
pub const WG_SIZE: u32 = 64;

/// Mirrors `struct Params` of `rope.wgsl`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RopeParams {
    pub n_tokens: u32,
    pub n_heads: u32,
    pub head_dim: u32,
    pub n_rot: u32,
}

const _: () = assert!(std::mem::size_of::<RopeParams>() == 16);

/// Which elements of a head form a rotated pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeMode {
    /// llama: adjacent pairs `(2i, 2i + 1)` (ggml mode 0).
    Normal,
    /// GPT-NeoX / Qwen: pairs `(i, i + n_rot/2)` (ggml mode 2).
    Neox,
}

/// The rotation of a model (from its GGUF metadata).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeConfig {
    /// Rotated dimensions per head (`rope.dimension_count`), even, at most head_dim.
    pub n_rot: u32,
    pub mode: RopeMode,
    /// `rope.freq_base` (10000 for llama 2).
    pub freq_base: f32,
    /// `1 / rope.scaling.factor` for linear scaling, else 1.
    pub freq_scale: f32,
}

/// The shape of the rotated tensor `[n_tokens, n_heads, head_dim]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RopeShape {
    pub n_tokens: u32,
    pub n_heads: u32,
    pub head_dim: u32,
}

const BINDINGS_OUT: &[BindingSpec] = &[PARAMS, read(1), write(2), read(3), read(4)];
const BINDINGS_IN_PLACE: &[BindingSpec] = &[PARAMS, write(2), read(3), read(4)];

/// The variant for a mode, in place or not.
pub fn variant(mode: RopeMode, in_place: bool) -> ShaderVariant {
    let mut defines = Vec::new();
    if mode == RopeMode::Neox {
        defines.push(("NEOX", String::new()));
    }
    if in_place {
        defines.push(("IN_PLACE", String::new()));
    }
    ShaderVariant {
        shader: "rope",
        entry_point: "main",
        defines,
        overrides: vec![("WG_SIZE", f64::from(WG_SIZE))],
        requires_f16: false,
        requires_subgroups: false,
        requires_int64: false,
        bindings: if in_place {
            BINDINGS_IN_PLACE
        } else {
            BINDINGS_OUT
        },
    }
}

/// Every variant this kernel may use, on any device.
pub fn variants() -> Vec<ShaderVariant> {
    let mut out = Vec::new();
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for in_place in [false, true] {
            out.push(variant(mode, in_place));
        }
    }
    out
}

/// The frequency table `[n_rot / 2]`: `freq_scale * freq_base^(-2i/n_rot) / freq_factors[i]`,
/// in f64, rounded once to f32. `freq_factors` (`rope_freqs.weight`) must have `n_rot / 2`
/// finite positive entries.
pub fn rope_freqs(cfg: &RopeConfig, freq_factors: Option<&[f32]>) -> Result<Vec<f32>, GpuError> {
    if cfg.n_rot == 0 || cfg.n_rot % 2 != 0 {
        return Err(bad_input("RoPE n_rot", "even and at least 2", cfg.n_rot));
    }
    for (what, v) in [("freq_base", cfg.freq_base), ("freq_scale", cfg.freq_scale)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(bad_input(&format!("RoPE {what}"), "finite and > 0", v));
        }
    }
    let half = cfg.n_rot as usize / 2;
    if let Some(ff) = freq_factors {
        if ff.len() != half {
            return Err(bad_input(
                "RoPE freq factors",
                format!("{half} values"),
                ff.len(),
            ));
        }
        if let Some(bad) = ff.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
            return Err(bad_input("RoPE freq factor", "finite and > 0", bad));
        }
    }
    let base = f64::from(cfg.freq_base);
    Ok((0..half)
        .map(|i| {
            let ff = freq_factors.map_or(1.0, |f| f64::from(f[i]));
            let exponent = -2.0 * i as f64 / f64::from(cfg.n_rot);
            (f64::from(cfg.freq_scale) * base.powf(exponent) / ff) as f32
        })
        .collect())
}

/// A built RoPE over at most `max_tokens` tokens.
#[derive(Debug)]
pub struct Rope {
    pub dispatch: Dispatch,
    params: RopeParams,
    max_tokens: u32,
}

fn pairs(p: &RopeParams) -> u64 {
    u64::from(p.n_tokens) * u64::from(p.n_heads) * u64::from(p.head_dim / 2)
}

impl Rope {
    /// RoPE of x `[n_tokens, n_heads, head_dim]` (from `io`) at `positions` (i32 `[n_tokens]`)
    /// with `freqs` (f32 `[cfg.n_rot / 2]`, from [`rope_freqs`]).
    pub fn new(
        ctx: &GpuContext,
        io: Io<'_>,
        positions: &wgpu::Buffer,
        freqs: &wgpu::Buffer,
        shape: RopeShape,
        cfg: &RopeConfig,
    ) -> Result<Rope, GpuError> {
        if shape.head_dim % 2 != 0 || cfg.n_rot == 0 || cfg.n_rot % 2 != 0 {
            let actual = format!("head_dim {}, n_rot {}", shape.head_dim, cfg.n_rot);
            return Err(bad_input("RoPE dims", "both even, n_rot >= 2", actual));
        }
        if cfg.n_rot > shape.head_dim {
            let expected = format!("at most head_dim = {}", shape.head_dim);
            return Err(bad_input("RoPE n_rot", expected, cfg.n_rot));
        }
        let n = u64::from(shape.n_tokens) * u64::from(shape.n_heads) * u64::from(shape.head_dim);
        to_u32("RoPE elements", n)?;
        io.check("RoPE x", n)?;
        check_f32s("RoPE positions", positions, u64::from(shape.n_tokens))?;
        check_f32s("RoPE frequency table", freqs, u64::from(cfg.n_rot / 2))?;
        let mut buffers = io.buffers();
        buffers.extend([positions, freqs]);
        let params = RopeParams {
            n_tokens: shape.n_tokens,
            n_heads: shape.n_heads,
            head_dim: shape.head_dim,
            n_rot: cfg.n_rot,
        };
        let label = "rope";
        let uniform = params_uniform(ctx, label, &params)?;
        let g = grid(
            ctx,
            label,
            pairs(&params).div_ceil(u64::from(WG_SIZE)),
            WG_SIZE,
        )?;
        let v = variant(cfg.mode, io.in_place());
        let dispatch = build(ctx, &v, label, &uniform, &buffers, g)?;
        Ok(Rope {
            dispatch,
            params,
            max_tokens: shape.n_tokens,
        })
    }

    /// Rotates the first `n_tokens` tokens from the next submission on (at most the built
    /// count); the positions buffer is the caller's to rewrite.
    pub fn set_tokens(&mut self, ctx: &GpuContext, n_tokens: u32) -> Result<(), GpuError> {
        if n_tokens > self.max_tokens {
            let expected = format!("at most {} (the built token count)", self.max_tokens);
            return Err(bad_input("RoPE tokens", expected, n_tokens));
        }
        self.params.n_tokens = n_tokens;
        rewrite_params(ctx, &self.dispatch, &self.params)?;
        let groups = pairs(&self.params).div_ceil(u64::from(WG_SIZE));
        self.dispatch.grid = grid(ctx, "rope", groups, WG_SIZE)?;
        Ok(())
    }

    pub fn params(&self) -> RopeParams {
        self.params
    }
}

/// Runs RoPE now on x `[n_tokens, n_heads, head_dim]` at `positions` (`[n_tokens]`) and
/// returns y (same shape).
pub fn rope_on_gpu(
    ctx: &GpuContext,
    x: &[f32],
    positions: &[i32],
    shape: RopeShape,
    cfg: &RopeConfig,
    freq_factors: Option<&[f32]>,
    in_place: bool,
) -> Result<Vec<f32>, GpuError> {
    if positions.len() as u64 != u64::from(shape.n_tokens) {
        let expected = format!("{} (n_tokens)", shape.n_tokens);
        return Err(bad_input("RoPE positions", expected, positions.len()));
    }
    let want = u64::from(shape.n_tokens) * u64::from(shape.n_heads) * u64::from(shape.head_dim);
    if x.len() as u64 != want {
        let expected = format!("{shape:?} = {want} elements");
        return Err(bad_input("RoPE x", expected, x.len()));
    }
    let table = rope_freqs(cfg, freq_factors)?;
    let host = HostIo::new(ctx, "rope x", x, in_place)?;
    let pos = create_storage_init(ctx, "rope positions", bytemuck::cast_slice(positions))?;
    let freqs = upload_f32(ctx, "rope freqs", &table)?;
    let op = Rope::new(ctx, host.io(), &pos, &freqs, shape, cfg)?;
    super::run_and_read_f32(ctx, "rope", &[&op.dispatch], host.out(), x.len())
}
