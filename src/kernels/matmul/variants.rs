//! Shader variants of the matmul family: the kernel [`Family`] (how many invocations share a
//! row and how they reduce), the column tile `TM`, prefill staging, and the registry
//! [`super::variants`] that `tests/shaders.rs` validates.
//!
//! The bits of a result depend on the weight type and `Family::lanes` only (see
//! docs/shaders-matmul.md): mat-vec, small batches and prefill tiles of one family agree bit for
//! bit, and so do the subgroup and workgroup-memory reductions of the same lane count.

use crate::gguf::GgmlType;
use crate::gpu::{BindingKind, BindingSpec, GpuContext, GpuError, ShaderVariant};
use crate::kernels::ops::glu::Glu;
use crate::kernels::spec;

use super::epilogue::{glu_epilogue, with_glu, with_glu_paired, with_split3, with_split3_rope};
use super::layout::{layout, SUPPORTED_TYPES};

/// Prefill tile depth in elements (`BK`): a multiple of every unit (4, 32, 64, 128, 256).
pub const BK: u32 = 256;

/// How the lanes of a row combine their partial sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduce {
    /// One invocation per row (lanes = 1): nothing to combine.
    None,
    /// `subgroupShuffleXor` butterfly (needs subgroups of at least `lanes` invocations).
    Subgroup,
    /// The same tree through workgroup memory.
    Shared,
}

/// A kernel family: everything that shapes the workgroups. Pick one per device
/// ([`Family::for_context`]) and use it for every matmul of a model: results are bit-identical
/// across M only within one lane count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Family {
    /// Invocations sharing one row (a power of two, at most 32).
    pub lanes: u32,
    /// Rows per workgroup.
    pub rows: u32,
    pub reduce: Reduce,
    /// Prefill (M > 16) stages X through workgroup memory in tiles of [`STAGED_TM`] columns;
    /// otherwise it runs the unstaged 16-column tile over all columns (faster where workgroup
    /// memory is ordinary memory and barriers are costly, as on lavapipe). Same bits either way.
    pub mm_staged: bool,
    /// Bind X as a uniform window where it fits ([`X_WINDOW`]); same bits as storage.
    pub x_uniform: bool,
    /// The 32-element block formats run `matmul_rows.wgsl` (lanes = 1 only): 4 or 8 rows per
    /// invocation ([`rows_per_invocation`]), [`ROWS_WG`] invocations per workgroup, so each
    /// load of X serves several rows. Same bits as this family's `matmul.wgsl` variants.
    pub multi_row: bool,
    /// `matmul_rows.wgsl` reads W and X as 64-bit components (`INT64`, needs wgpu's
    /// `SHADER_INT64`): a CPU driver loads vectors one component at a time. Same bits.
    pub int64: bool,
    /// `matmul_rows.wgsl` reads each block of X once per workgroup, a vec4 per lane, and shares
    /// it by `subgroupBroadcast` (`X_BCAST`; needs subgroups of exactly [`ROWS_WG`]
    /// invocations): on a CPU driver every lane's load is a gather, so this is 8× fewer. These
    /// variants read X from storage even where `x_uniform` (which then serves `matmul.wgsl`):
    /// one dispatch covers all columns, where 64 KiB windows cut a prefill matmul into one
    /// dispatch per 8 to 24 columns. Same bits.
    pub x_bcast: bool,
}

impl Family {
    /// One invocation per row, vec4 accumulation (the running sum in `.x` for the 32-element
    /// block formats), no barrier outside prefill staging: what CPU Vulkan drivers (lavapipe)
    /// run fastest.
    pub const SERIAL: Family = Family {
        lanes: 1,
        rows: 32,
        reduce: Reduce::None,
        mm_staged: false,
        x_uniform: true,
        multi_row: true,
        int64: false,
        x_bcast: false,
    };

    /// `lanes` invocations per row (a warp on NVIDIA when 32), 128 invocations per workgroup,
    /// reduced by subgroup shuffles or through workgroup memory.
    pub const fn wide(lanes: u32, subgroups: bool) -> Family {
        Family {
            lanes,
            rows: 128 / lanes,
            reduce: if subgroups {
                Reduce::Subgroup
            } else {
                Reduce::Shared
            },
            mm_staged: true,
            x_uniform: false,
            multi_row: false,
            int64: false,
            x_bcast: false,
        }
    }

    /// The family for this device: [`Family::SERIAL`] on CPU adapters, otherwise 32 lanes with
    /// subgroup reduction when every subgroup holds at least 32 invocations.
    pub fn for_context(ctx: &GpuContext) -> Family {
        let info = ctx.info();
        if ctx.is_cpu() {
            // matmul_rows.wgsl unpacks f16 scales with unpack2x16float.
            let f16_in_f32 = ctx.has_f16_in_f32();
            let sg_rows_wg = ctx.has_subgroups()
                && info.limits.min_subgroup_size == ROWS_WG
                && info.limits.max_subgroup_size == ROWS_WG;
            return Family {
                multi_row: f16_in_f32,
                int64: f16_in_f32 && ctx.has_int64(),
                x_bcast: f16_in_f32 && sg_rows_wg,
                ..Family::SERIAL
            };
        }
        let subgroups = ctx.has_subgroups() && info.limits.min_subgroup_size >= 32;
        Family::wide(32, subgroups)
    }

    fn requires_subgroups(&self) -> bool {
        self.reduce == Reduce::Subgroup
    }

    /// The choice in words, for `flint bench`'s `kernels` field: lanes per row and what the
    /// CPU-driver kernel uses, e.g. `matmul 1 lane, rows kernel, int64, x broadcast, x uniform`.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "matmul {} lane{}",
            self.lanes,
            if self.lanes == 1 { "" } else { "s" }
        );
        let flags = [
            (self.reduce == Reduce::Subgroup, "subgroup reduce"),
            (self.reduce == Reduce::Shared, "shared reduce"),
            (self.mm_staged, "staged prefill"),
            (self.multi_row, "rows kernel"),
            (self.int64, "int64"),
            (self.x_bcast, "x broadcast"),
            (self.x_uniform, "x uniform"),
        ];
        for (on, name) in flags {
            if on {
                out.push_str(", ");
                out.push_str(name);
            }
        }
        out
    }

    /// Whether `matmul_rows.wgsl` variants of this family need subgroups.
    fn rows_requires_subgroups(&self) -> bool {
        self.x_bcast
    }
}

/// [`Family::SERIAL`] with 64-bit loads (what lavapipe gets).
pub const SERIAL_INT64: Family = Family {
    int64: true,
    ..Family::SERIAL
};

/// [`SERIAL_INT64`] sharing X loads by subgroup broadcast (what lavapipe gets with subgroups).
pub const SERIAL_INT64_BCAST: Family = Family {
    x_bcast: true,
    ..SERIAL_INT64
};

/// The families the runtime may pick, plus the 8-lane subgroup family the tests run on lavapipe
/// (subgroups of 8) and the 8-lane shared family it must match.
pub const REGISTERED_FAMILIES: [Family; 7] = [
    Family::SERIAL,
    SERIAL_INT64,
    SERIAL_INT64_BCAST,
    Family::wide(32, true),
    Family::wide(32, false),
    Family::wide(8, true),
    Family::wide(8, false),
];

/// Bytes of the uniform window through which `X_UNIFORM` variants read X.
pub const X_WINDOW: u64 = 65536;

/// The widest column tile of families that read X through uniform windows (wider tiles were
/// slower on lavapipe: 8 and 16 columns cost 1.5–2× the 4-column tile at M = 8 and 64).
pub const UNIFORM_X_MAX_TM: u32 = 4;

/// The widest column tile of `matmul_rows.wgsl` (block formats on CPU drivers): each weight
/// block is decoded once for 8 columns, 8 rows share each X load. A Q4_1 1536×576 weight on
/// lavapipe (median of 5): M = 8 0.540 → 0.497 ms, M = 64 4.44 → 3.56 ms against two or
/// sixteen 4-column tiles.
pub const ROWS_MAX_TM: u32 = 8;

/// Column tiles of the mat-vec / small-batch path (M = 1..=16 uses the smallest TM >= M).
pub const BATCH_TMS: [u32; 5] = [1, 2, 4, 8, 16];

/// Columns per invocation (and X tile height) of the staged prefill path.
pub const STAGED_TM: u32 = 8;

/// Bindings of `matmul.wgsl` and `matmul_baseline.wgsl`: params, w, x, y.
pub const MATMUL_BINDINGS: &[BindingSpec] = &[
    spec(0, BindingKind::Uniform),
    spec(1, BindingKind::StorageRead),
    spec(2, BindingKind::StorageRead),
    spec(3, BindingKind::StorageReadWrite),
];

/// Bindings of `embed.wgsl`: params, w, ids, out (the same kinds as matmul).
pub const EMBED_BINDINGS: &[BindingSpec] = MATMUL_BINDINGS;

/// [`MATMUL_BINDINGS`] with X (binding 2) a uniform window.
pub const MATMUL_BINDINGS_XU: &[BindingSpec] = &[
    MATMUL_BINDINGS[0],
    MATMUL_BINDINGS[1],
    BindingSpec {
        group: 0,
        binding: 2,
        kind: BindingKind::Uniform,
    },
    MATMUL_BINDINGS[3],
];

fn type_define(ty: GgmlType) -> Result<&'static str, GpuError> {
    layout(ty)?;
    Ok(match ty {
        GgmlType::F32 => "TYPE_F32",
        GgmlType::F16 => "TYPE_F16",
        GgmlType::BF16 => "TYPE_BF16",
        GgmlType::Q4_0 => "TYPE_Q4_0",
        GgmlType::Q4_1 => "TYPE_Q4_1",
        GgmlType::Q5_0 => "TYPE_Q5_0",
        GgmlType::Q5_1 => "TYPE_Q5_1",
        GgmlType::Q8_0 => "TYPE_Q8_0",
        GgmlType::Q2_K => "TYPE_Q2_K",
        GgmlType::Q3_K => "TYPE_Q3_K",
        GgmlType::Q4_K => "TYPE_Q4_K",
        GgmlType::Q5_K => "TYPE_Q5_K",
        GgmlType::Q1_0 => "TYPE_Q1_0",
        GgmlType::Q2_0 => "TYPE_Q2_0",
        // One layout, one shader: the two types share their variants.
        GgmlType::Q2_0_G128 | GgmlType::PQ2_0 => "TYPE_Q2_0_G128",
        GgmlType::TQ1_0 => "TYPE_TQ1_0",
        GgmlType::TQ2_0 => "TYPE_TQ2_0",
        GgmlType::IQ4_NL => "TYPE_IQ4_NL",
        GgmlType::IQ4_XS => "TYPE_IQ4_XS",
        GgmlType::MXFP4 => "TYPE_MXFP4",
        GgmlType::IQ2_XXS => "TYPE_IQ2_XXS",
        GgmlType::IQ2_XS => "TYPE_IQ2_XS",
        GgmlType::IQ2_S => "TYPE_IQ2_S",
        GgmlType::IQ3_XXS => "TYPE_IQ3_XXS",
        GgmlType::IQ3_S => "TYPE_IQ3_S",
        GgmlType::IQ1_S => "TYPE_IQ1_S",
        GgmlType::IQ1_M => "TYPE_IQ1_M",
        _ => "TYPE_Q6_K",
    })
}

/// A variant's text defines.
pub(crate) type Defines = Vec<(&'static str, String)>;

/// Type defines, with `USE_F16` only where it changes something (F16 weights).
pub(crate) fn type_defines(ty: GgmlType, use_f16: bool) -> Result<(Defines, bool), GpuError> {
    let mut defines = vec![(type_define(ty)?, String::new())];
    let f16 = use_f16 && ty == GgmlType::F16;
    if f16 {
        defines.push(("USE_F16", String::new()));
    }
    Ok((defines, f16))
}

/// Invocations per workgroup of `matmul_rows.wgsl` (one SIMD group of lavapipe's 256-bit
/// vectors).
pub const ROWS_WG: u32 = 8;

/// Rows per invocation of `matmul_rows.wgsl` (written out in the shader): 8 for the 4- and
/// 8-column tiles (prefill, verify: X loads are most of the cost there), 4 for mat-vec and 2
/// columns (a workgroup of 32 rows keeps the 192-row K/V projections spread over the CPU's
/// threads; 8 rows per invocation measured slower on a decode step, docs/shaders-matmul.md).
pub fn rows_per_invocation(tm: u32) -> u32 {
    if tm >= 4 {
        8
    } else {
        4
    }
}

/// The widest column tile `family` uses for `ty` when it reads X through uniform windows.
pub fn uniform_max_tm(family: Family, ty: GgmlType) -> u32 {
    if uses_rows_kernel(family, ty, ROWS_MAX_TM, false) {
        ROWS_MAX_TM
    } else {
        UNIFORM_X_MAX_TM
    }
}

/// Whether this choice runs `matmul_rows.wgsl` (else `matmul.wgsl`).
pub fn uses_rows_kernel(family: Family, ty: GgmlType, tm: u32, staged: bool) -> bool {
    family.multi_row
        && family.lanes == 1
        && !staged
        && is_legacy_block(ty)
        && matches!(tm, 1 | 2 | 4 | 8)
}

/// Rows one workgroup covers for this choice.
pub fn workgroup_rows(family: Family, ty: GgmlType, tm: u32, staged: bool) -> u32 {
    if uses_rows_kernel(family, ty, tm, staged) {
        ROWS_WG * rows_per_invocation(tm)
    } else {
        family.rows
    }
}

/// The 32-element block formats `matmul_rows.wgsl` decodes.
pub fn is_legacy_block(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0
    )
}

/// The matmul variant for `ty` in `family` with `tm` columns per invocation, staged (prefill)
/// or not: `matmul_rows.wgsl` where [`uses_rows_kernel`], else `matmul.wgsl`. `nb_even`: the
/// weight's rows hold an even number of blocks (`matmul_rows.wgsl` then loads them in pairs
/// with 64-bit integers).
pub fn matmul_variant(
    ty: GgmlType,
    family: Family,
    tm: u32,
    staged: bool,
    use_f16: bool,
    x_uniform: bool,
    nb_even: bool,
) -> Result<ShaderVariant, GpuError> {
    let (mut defines, f16) = type_defines(ty, use_f16)?;
    if uses_rows_kernel(family, ty, tm, staged) {
        defines.push(("WG", format!("{ROWS_WG}u")));
        if rows_per_invocation(tm) == 8 {
            defines.push(("R8", String::new()));
        }
        defines.push(("TM", format!("{tm}u")));
        if tm >= 2 {
            defines.push(("TM_2", String::new()));
        }
        if tm >= 4 {
            defines.push(("TM_4", String::new()));
        }
        if tm == 8 {
            defines.push(("TM_8", String::new()));
        }
        if x_uniform {
            defines.push(("X_UNIFORM", String::new()));
        }
        if family.int64 {
            defines.push(("INT64", String::new()));
            if nb_even {
                defines.push(("PAIRS", String::new()));
            }
        }
        if family.x_bcast {
            defines.push(("X_BCAST", String::new()));
        }
        return Ok(ShaderVariant {
            shader: "matmul_rows",
            entry_point: "main",
            defines,
            overrides: Vec::new(),
            requires_f16: false,
            requires_subgroups: family.rows_requires_subgroups(),
            requires_int64: family.int64,
            bindings: if x_uniform {
                MATMUL_BINDINGS_XU
            } else {
                MATMUL_BINDINGS
            },
        });
    }
    defines.push(("LANES", format!("{}u", family.lanes)));
    defines.push(("ROWS", format!("{}u", family.rows)));
    defines.push(("TM", format!("{tm}u")));
    match family.reduce {
        Reduce::None => {}
        Reduce::Subgroup => defines.push(("RED_SUBGROUP", String::new())),
        Reduce::Shared => defines.push(("RED_SHARED", String::new())),
    }
    if staged {
        defines.push(("STAGE_X", String::new()));
        defines.push(("BK", format!("{BK}u")));
    }
    if x_uniform {
        defines.push(("X_UNIFORM", String::new()));
    }
    Ok(ShaderVariant {
        shader: "matmul",
        entry_point: "main",
        defines,
        overrides: Vec::new(),
        requires_f16: f16,
        requires_subgroups: family.requires_subgroups(),
        requires_int64: false,
        bindings: if x_uniform {
            MATMUL_BINDINGS_XU
        } else {
            MATMUL_BINDINGS
        },
    })
}

/// The one-invocation-per-output baseline (`matmul_baseline.wgsl`; exact decoders, no f16).
pub fn baseline_variant(ty: GgmlType) -> Result<ShaderVariant, GpuError> {
    let (defines, f16) = type_defines(ty, false)?;
    Ok(ShaderVariant {
        shader: "matmul_baseline",
        entry_point: "main",
        defines,
        overrides: Vec::new(),
        requires_f16: f16,
        requires_subgroups: false,
        requires_int64: false,
        bindings: MATMUL_BINDINGS,
    })
}

/// The embedding gather (`embed.wgsl`; exact decoders, so never `USE_F16`).
pub fn embed_variant(ty: GgmlType) -> Result<ShaderVariant, GpuError> {
    let (defines, f16) = type_defines(ty, false)?;
    Ok(ShaderVariant {
        shader: "embed",
        entry_point: "main",
        defines,
        overrides: Vec::new(),
        requires_f16: f16,
        requires_subgroups: false,
        requires_int64: false,
        bindings: EMBED_BINDINGS,
    })
}

/// Every variant of this family (all types, registered families, tiles, f16 on and off).
pub fn variants() -> Vec<ShaderVariant> {
    let mut out: Vec<ShaderVariant> = Vec::new();
    let mut push = |v: Result<ShaderVariant, GpuError>| {
        if let Ok(v) = v {
            if !out.contains(&v) {
                out.push(v);
            }
        }
    };
    for ty in SUPPORTED_TYPES {
        for f16 in [false, true] {
            for family in REGISTERED_FAMILIES {
                for nb_even in [false, true] {
                    for tm in BATCH_TMS {
                        for xu in [false, true] {
                            if xu && !family.x_uniform {
                                continue;
                            }
                            if xu && family.x_bcast && uses_rows_kernel(family, ty, tm, false) {
                                continue; // broadcast variants read X from storage
                            }
                            let v = matmul_variant(ty, family, tm, false, f16, xu, nb_even);
                            if let Ok(v) = &v {
                                if glu_epilogue(family, ty) && v.shader == "matmul_rows" {
                                    for glu in [Glu::Swiglu, Glu::Geglu] {
                                        push(with_glu(v.clone(), glu));
                                        push(with_glu_paired(v.clone(), glu));
                                    }
                                    push(with_split3(v.clone()));
                                    push(with_split3_rope(v.clone()));
                                }
                            }
                            push(v);
                        }
                    }
                    push(matmul_variant(
                        ty, family, STAGED_TM, true, f16, false, nb_even,
                    ));
                }
            }
        }
        push(baseline_variant(ty));
        push(embed_variant(ty));
    }
    out
}
