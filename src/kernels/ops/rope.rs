//! Rotary position embedding on the GPU (`shaders/rope.wgsl`), ggml_rope_ext semantics with
//! YaRN: x `[n_tokens, n_heads, head_dim]`, positions `[n_tokens]` (i32), a table
//! `[n_rot / 2 + 1]` built once per model by [`rope_table`]: `n_rot / 2` frequencies, then the
//! scale of cos and sin.
//!
//! `theta(t, i) = f32(pos[t]) * table[i]`, `(cos θ, sin θ) * table[n_rot / 2]`. Without YaRN
//! `table[i] = freq_scale * freq_base^(-2i/n_rot) / freq_factors[i]` and the scale is 1 (or the
//! model's attention factor), computed in f64 and rounded once to f32 (llama3-style scaling
//! arrives as the `rope_freqs.weight` factors). ggml computes the same product in f32 steps (and
//! its CPU backend by repeated multiplication), so the angle agrees to a few ulp; the CPU oracle
//! builds the same table, so GPU and oracle share theta bit for bit and differ only in sin/cos.
//!
//! YaRN (ggml's `rope_yarn`, ext_factor ≠ 0, see [`RopeYarn`]): ggml mixes, per rotation i, the
//! interpolated angle `freq_scale · θ_extrap` and the extrapolated one `θ_extrap` by `r_i =
//! ramp(corr_dims, i) · ext_factor`, which does not depend on the position:
//! `θ = θ_extrap · (freq_scale · (1 − r_i) + r_i)`. So YaRN is one more per-dimension factor of
//! the same table, built here on the host once per model, and costs the kernels nothing per
//! token; its magnitude correction `mscale = attn_factor · (1 + 0.1 · ln(1 / freq_scale))`
//! multiplies cos and sin, and is the table's last entry. The scale lives in the table rather
//! than in each kernel's params because the table is the one thing every RoPE path binds
//! (`rope.wgsl`, `rope_kv.wgsl`, the q | k | v matmul's RoPE epilogue, the DSpark injection
//! pass): none of them can miss it. It is not folded into the attention scale: that would also
//! scale the pass-through dims `n_rot..head_dim` and change how k rounds into an f16 cache.
//! A scale of exactly 1 (every model without YaRN or an attention factor) leaves every bit as
//! it was: `x · 1` is exact.
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
    /// `1 / rope.scaling.factor` for linear scaling and YaRN, else 1.
    pub freq_scale: f32,
}

/// ggml_rope_ext's YaRN parameters (llama.cpp's `rope_yarn`, `rope_yarn_ramp`,
/// `ggml_rope_yarn_corr_dims`; `docs/shaders-ops.md` cites the version checked). With
/// `ext_factor` 0 only `attn_factor` is used (as the cos/sin scale, as ggml does).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeYarn {
    /// `rope.scaling.original_context_length`: the training context YaRN extends.
    pub n_ctx_orig: u32,
    /// How much of the extrapolated angle the ramp mixes in (1 for `rope.scaling.type = yarn`).
    pub ext_factor: f32,
    /// The cos/sin scale before YaRN's own magnitude correction.
    pub attn_factor: f32,
    /// Rotations past this many turns over `n_ctx_orig` are extrapolated (32).
    pub beta_fast: f32,
    /// Rotations under this many turns over `n_ctx_orig` are interpolated (1).
    pub beta_slow: f32,
}

/// ggml's `ggml_rope_yarn_corr_dims`, in f32 as ggml computes it: the rotation indices
/// `[low, high]` between which YaRN's ramp goes from extrapolation (below `low`) to
/// interpolation (above `high`).
pub fn yarn_corr_dims(
    n_rot: u32,
    n_ctx_orig: u32,
    freq_base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    // The rotation index whose wavelength spans n_ctx_orig / beta turns.
    let dim = |beta: f32| {
        n_rot as f32 * (n_ctx_orig as f32 / (beta * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * freq_base.ln())
    };
    let start = dim(beta_fast).floor();
    let end = dim(beta_slow).ceil();
    [start.max(0.0), end.min(n_rot as f32 - 1.0)]
}

/// `r_i = rope_yarn_ramp(low, high, 2i) · ext_factor` for every rotation i (f32, as ggml).
fn yarn_mix(n_rot: u32, corr: [f32; 2], ext_factor: f32) -> Vec<f32> {
    let [low, high] = corr;
    (0..n_rot / 2)
        .map(|i| {
            let y = (i as f32 - low) / (high - low).max(0.001);
            (1.0 - y.clamp(0.0, 1.0)) * ext_factor
        })
        .collect()
}

/// Entries of the table of `n_rot` rotated dims: `n_rot / 2` frequencies, then the scale.
pub fn table_len(n_rot: u32) -> u32 {
    n_rot / 2 + 1
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

/// The table without YaRN or an attention factor: [`rope_table`] with `None`.
pub fn rope_freqs(cfg: &RopeConfig, freq_factors: Option<&[f32]>) -> Result<Vec<f32>, GpuError> {
    rope_table(cfg, None, freq_factors)
}

/// The table `[n_rot / 2 + 1]` ([`table_len`]): for rotation i, `freq_base^(-2i/n_rot) /
/// freq_factors[i]` times `freq_scale` (no YaRN) or times `freq_scale · (1 − r_i) + r_i`
/// (YaRN's ramp, see the module doc), in f64, rounded once to f32; then the cos/sin scale: 1
/// without `yarn`, `attn_factor` with ext_factor 0, else `attn_factor · (1 + 0.1 ·
/// ln(1 / freq_scale))`. `freq_factors` (`rope_freqs.weight`) must have `n_rot / 2` finite
/// positive entries; they divide the YaRN frequencies as ggml's `theta / ff` does.
pub fn rope_table(
    cfg: &RopeConfig,
    yarn: Option<&RopeYarn>,
    freq_factors: Option<&[f32]>,
) -> Result<Vec<f32>, GpuError> {
    if cfg.n_rot == 0 || !cfg.n_rot.is_multiple_of(2) {
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
    if let Some(y) = yarn {
        check_yarn(y)?;
    }
    let mix = yarn.filter(|y| y.ext_factor != 0.0).map(|y| {
        let corr = yarn_corr_dims(
            cfg.n_rot,
            y.n_ctx_orig,
            cfg.freq_base,
            y.beta_fast,
            y.beta_slow,
        );
        yarn_mix(cfg.n_rot, corr, y.ext_factor)
    });
    let base = f64::from(cfg.freq_base);
    let scale = f64::from(cfg.freq_scale);
    let mut table: Vec<f32> = (0..half)
        .map(|i| {
            let ff = freq_factors.map_or(1.0, |f| f64::from(f[i]));
            let exponent = -2.0 * i as f64 / f64::from(cfg.n_rot);
            match &mix {
                // The table before YaRN, expression for expression: the same bits.
                None => (scale * base.powf(exponent) / ff) as f32,
                Some(r) => {
                    let r = f64::from(r[i]);
                    (base.powf(exponent) / ff * (scale * (1.0 - r) + r)) as f32
                }
            }
        })
        .collect();
    table.push(match yarn {
        None => 1.0,
        Some(y) if y.ext_factor == 0.0 => y.attn_factor,
        Some(y) => (f64::from(y.attn_factor) * (1.0 + 0.1 * (1.0 / scale).ln())) as f32,
    });
    Ok(table)
}

/// YaRN parameters every formula above is defined for.
fn check_yarn(y: &RopeYarn) -> Result<(), GpuError> {
    if y.n_ctx_orig == 0 {
        return Err(bad_input("YaRN original context", "at least 1", 0));
    }
    for (what, v) in [
        ("YaRN beta_fast", y.beta_fast),
        ("YaRN beta_slow", y.beta_slow),
        ("RoPE attn_factor", y.attn_factor),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(bad_input(what, "finite and > 0", v));
        }
    }
    if !(y.ext_factor.is_finite() && y.ext_factor >= 0.0) {
        return Err(bad_input(
            "YaRN ext_factor",
            "finite and >= 0",
            y.ext_factor,
        ));
    }
    Ok(())
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
    /// with the table `freqs` (f32 `[cfg.n_rot / 2 + 1]`, from [`rope_table`]).
    pub fn new(
        ctx: &GpuContext,
        io: Io<'_>,
        positions: &wgpu::Buffer,
        freqs: &wgpu::Buffer,
        shape: RopeShape,
        cfg: &RopeConfig,
    ) -> Result<Rope, GpuError> {
        if !shape.head_dim.is_multiple_of(2) || cfg.n_rot == 0 || !cfg.n_rot.is_multiple_of(2) {
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
        check_f32s("RoPE table", freqs, u64::from(table_len(cfg.n_rot)))?;
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

/// Runs RoPE now on x `[n_tokens, n_heads, head_dim]` at `positions` (`[n_tokens]`), with
/// YaRN where `yarn` says, and returns y (same shape).
#[allow(clippy::too_many_arguments)]
pub fn rope_on_gpu(
    ctx: &GpuContext,
    x: &[f32],
    positions: &[i32],
    shape: RopeShape,
    cfg: &RopeConfig,
    yarn: Option<&RopeYarn>,
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
    let table = rope_table(cfg, yarn, freq_factors)?;
    let host = HostIo::new(ctx, "rope x", x, in_place)?;
    let pos = create_storage_init(ctx, "rope positions", bytemuck::cast_slice(positions))?;
    let freqs = upload_f32(ctx, "rope freqs", &table)?;
    let op = Rope::new(ctx, host.io(), &pos, &freqs, shape, cfg)?;
    super::run_and_read_f32(ctx, "rope", &[&op.dispatch], host.out(), x.len())
}
