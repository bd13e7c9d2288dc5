//! The epilogues of `matmul_rows.wgsl` (CPU-driver families): the GLU `y = act(gate) * (X .
//! W^T)` ([`with_glu`]) and the split output of a stacked q | k | v weight ([`with_split3`],
//! or with RoPE and the KV store, [`with_split3_rope`]), their bindings, and where they exist
//! ([`glu_epilogue`]).

use crate::gguf::GgmlType;
use crate::gpu::{BindingKind, BindingSpec, GpuError, ShaderVariant};
use crate::kernels::ops::glu::Glu;

use super::variants::{
    uniform_max_tm, uses_rows_kernel, Family, BATCH_TMS, MATMUL_BINDINGS, MATMUL_BINDINGS_XU,
    ROWS_WG,
};

/// [`MATMUL_BINDINGS`] plus the gate projection (binding 4) of the GLU epilogue.
pub const MATMUL_BINDINGS_GLU: &[BindingSpec] = &[
    MATMUL_BINDINGS[0],
    MATMUL_BINDINGS[1],
    MATMUL_BINDINGS[2],
    MATMUL_BINDINGS[3],
    BindingSpec {
        group: 0,
        binding: 4,
        kind: BindingKind::StorageRead,
    },
];
/// [`MATMUL_BINDINGS_XU`] (X uniform) plus the GLU gate.
pub const MATMUL_BINDINGS_XU_GLU: &[BindingSpec] = &[
    MATMUL_BINDINGS_XU[0],
    MATMUL_BINDINGS_XU[1],
    MATMUL_BINDINGS_XU[2],
    MATMUL_BINDINGS_XU[3],
    MATMUL_BINDINGS_GLU[4],
];

/// [`MATMUL_BINDINGS`] plus Y2 and Y3 (bindings 4, 5) of the split output (`SPLIT3`).
pub const MATMUL_BINDINGS_SPLIT3: &[BindingSpec] = &[
    MATMUL_BINDINGS[0],
    MATMUL_BINDINGS[1],
    MATMUL_BINDINGS[2],
    MATMUL_BINDINGS[3],
    BindingSpec {
        group: 0,
        binding: 4,
        kind: BindingKind::StorageReadWrite,
    },
    BindingSpec {
        group: 0,
        binding: 5,
        kind: BindingKind::StorageReadWrite,
    },
];
/// [`MATMUL_BINDINGS_XU`] (X uniform) plus Y2 and Y3.
pub const MATMUL_BINDINGS_XU_SPLIT3: &[BindingSpec] = &[
    MATMUL_BINDINGS_XU[0],
    MATMUL_BINDINGS_XU[1],
    MATMUL_BINDINGS_XU[2],
    MATMUL_BINDINGS_XU[3],
    MATMUL_BINDINGS_SPLIT3[4],
    MATMUL_BINDINGS_SPLIT3[5],
];

/// The RoPE + KV store epilogue's bindings after Y (`SPLIT3` with `ROPE`): positions and
/// frequencies (4, 5), the K and V caches (6, 7) and the RoPE params uniform (8).
const ROPE_BINDINGS: [BindingSpec; 5] = [
    BindingSpec {
        group: 0,
        binding: 4,
        kind: BindingKind::StorageRead,
    },
    BindingSpec {
        group: 0,
        binding: 5,
        kind: BindingKind::StorageRead,
    },
    BindingSpec {
        group: 0,
        binding: 6,
        kind: BindingKind::StorageReadWrite,
    },
    BindingSpec {
        group: 0,
        binding: 7,
        kind: BindingKind::StorageReadWrite,
    },
    BindingSpec {
        group: 0,
        binding: 8,
        kind: BindingKind::Uniform,
    },
];
/// [`MATMUL_BINDINGS`] plus the RoPE epilogue's.
pub const MATMUL_BINDINGS_SPLIT3_ROPE: &[BindingSpec] = &[
    MATMUL_BINDINGS[0],
    MATMUL_BINDINGS[1],
    MATMUL_BINDINGS[2],
    MATMUL_BINDINGS[3],
    ROPE_BINDINGS[0],
    ROPE_BINDINGS[1],
    ROPE_BINDINGS[2],
    ROPE_BINDINGS[3],
    ROPE_BINDINGS[4],
];
/// [`MATMUL_BINDINGS_XU`] (X uniform) plus the RoPE epilogue's.
pub const MATMUL_BINDINGS_XU_SPLIT3_ROPE: &[BindingSpec] = &[
    MATMUL_BINDINGS_XU[0],
    MATMUL_BINDINGS_XU[1],
    MATMUL_BINDINGS_XU[2],
    MATMUL_BINDINGS_XU[3],
    ROPE_BINDINGS[0],
    ROPE_BINDINGS[1],
    ROPE_BINDINGS[2],
    ROPE_BINDINGS[3],
    ROPE_BINDINGS[4],
];

/// Whether every matmul of `ty` in `family` runs `matmul_rows.wgsl` whatever the column count
/// (so its epilogues, the GLU of [`with_glu`] and the split output of [`with_split3`], are
/// available on every path and keep batch invariance).
pub fn glu_epilogue(family: Family, ty: GgmlType) -> bool {
    family.x_uniform
        && BATCH_TMS
            .iter()
            .filter(|&&tm| tm <= uniform_max_tm(family, ty))
            .all(|&tm| uses_rows_kernel(family, ty, tm, false))
}

/// `v` (a `matmul_rows.wgsl` variant) with the GLU epilogue `y = act(gate) * (X . W^T)`.
pub fn with_glu(v: ShaderVariant, glu: Glu) -> Result<ShaderVariant, GpuError> {
    let bindings = [MATMUL_BINDINGS_GLU, MATMUL_BINDINGS_XU_GLU];
    with_epilogue(v, "GLU", glu.define(), bindings)
}

/// Rows of each gate and each up block of a paired gate/up weight (`GLU_PAIRED`): half the rows
/// of a workgroup with 8 rows per invocation.
pub const GLU_PAIR_ROWS: u32 = 4 * ROWS_WG;

/// `v` (a `matmul_rows.wgsl` variant) over a paired gate/up weight with the GLU `glu`: 8 rows
/// per invocation whatever the tile, no gate binding.
pub fn with_glu_paired(v: ShaderVariant, glu: Glu) -> Result<ShaderVariant, GpuError> {
    let bindings = [MATMUL_BINDINGS, MATMUL_BINDINGS_XU];
    let mut v = with_epilogue(v, "paired GLU", glu.define(), bindings)?;
    v.defines.push(("GLU_PAIRED", String::new()));
    if !v.defines.iter().any(|(d, _)| *d == "R8") {
        v.defines.push(("R8", String::new()));
    }
    Ok(v)
}

/// `v` (a `matmul_rows.wgsl` variant) with the split output (`SPLIT3`).
pub fn with_split3(v: ShaderVariant) -> Result<ShaderVariant, GpuError> {
    let bindings = [MATMUL_BINDINGS_SPLIT3, MATMUL_BINDINGS_XU_SPLIT3];
    with_epilogue(v, "split-output", "SPLIT3", bindings)
}

/// `v` (a `matmul_rows.wgsl` variant) with the split output writing q rotated and k and v into
/// f16 caches (`SPLIT3` and `ROPE`, `common/matmul_rope.wgsl`).
pub fn with_split3_rope(v: ShaderVariant) -> Result<ShaderVariant, GpuError> {
    let bindings = [MATMUL_BINDINGS_SPLIT3_ROPE, MATMUL_BINDINGS_XU_SPLIT3_ROPE];
    let mut v = with_epilogue(v, "split-output RoPE", "SPLIT3", bindings)?;
    v.defines.push(("ROPE", String::new()));
    Ok(v)
}

/// `v` with an epilogue `define` and its extra bindings (`[X in storage, X uniform]`).
fn with_epilogue(
    mut v: ShaderVariant,
    what: &str,
    define: &'static str,
    [storage, uniform]: [&'static [BindingSpec]; 2],
) -> Result<ShaderVariant, GpuError> {
    if v.shader != "matmul_rows" {
        return Err(GpuError::BadInput {
            what: format!("{what} epilogue on {} [{}]", v.shader, v.key()),
            expected: "a matmul_rows variant".to_string(),
            actual: v.shader.to_string(),
        });
    }
    v.defines.push((define, String::new()));
    v.bindings = if v.bindings == MATMUL_BINDINGS_XU {
        uniform
    } else {
        storage
    };
    Ok(v)
}
