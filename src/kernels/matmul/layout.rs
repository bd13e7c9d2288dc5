//! Device layout of weights: load-time repacking into word-aligned "planes" and row splits that
//! fit one storage binding. Pure CPU code (no device), so the memory planner can size weights
//! exactly ([`device_bytes`]) before anything is created.
//!
//! A GGUF weight `[ne0 = K, ne1 = N]` is N rows of `K / block` blocks. WGSL reads storage only as
//! whole u32 words, and Q8_0 (34-byte), Q4_0 (18), Q5_0 (22), Q4_1/Q5_1 (20/24, scales and quants
//! interleaved), Q2_K (84), Q3_K (110) and Q6_K (210) blocks do not start on useful word
//! boundaries. So each block's bytes are split into up to three planes, every plane an array of
//! fixed-size entries (one per block, in row-major block order), each plane starting on a 16-byte
//! boundary of the split buffer, the whole split a multiple of 32 bytes. No byte is added per
//! block: the device size is the GGUF size plus at most 15 bytes of alignment per plane and 31
//! at the end.
//!
//! | type | plane 0 (bytes/block)            | plane 1                | plane 2        |
//! |------|----------------------------------|------------------------|----------------|
//! | F32, F16, BF16 | the row data as is      | -                      | -              |
//! | Q8_0 | qs (32)                          | d (f16, 2)             | -              |
//! | Q4_0 | qs (16)                          | d (2)                  | -              |
//! | Q4_1 | qs (16)                          | d, m (4)               | -              |
//! | Q5_0 | qs (16)                          | qh (4)                 | d (2)          |
//! | Q5_1 | qs (16)                          | qh (4)                 | d, m (4)       |
//! | Q2_K | scales, qs (80)                  | d, dmin (4)            | -              |
//! | Q3_K | hmask, qs, scales (108)          | d (2)                  | -              |
//! | Q4_K | the block (144)                  | -                      | -              |
//! | Q5_K | the block (176)                  | -                      | -              |
//! | Q6_K | ql, qh, scales (208)             | d (2)                  | -              |
//! | Q1_0, Q2_0 | qs (16)                    | d (2)                  | -              |
//! | Q2_0_G128, PQ2_0 | qs (32)              | d (2)                  | -              |
//! | TQ1_0 | qs, qh (52)                     | d (2)                  | -              |
//! | TQ2_0 | qs (64)                         | d (2)                  | -              |
//! | IQ4_NL | qs (16)                        | d (2)                  | -              |
//! | IQ4_XS | scales_l, qs (132)             | d, scales_h (4)        | -              |
//! | MXFP4 | qs (16)                         | e (E8M0, 1)            | -              |
//! | IQ2_XXS | qs (64)                       | d (2)                  | grid table     |
//! | IQ2_XS | qs, scales (72)                | d (2)                  | grid table     |
//! | IQ2_S | qs, signs, qh, scales (80)      | d (2)                  | grid table     |
//! | IQ3_XXS | qs, scales_and_signs (96)     | d (2)                  | grid table     |
//! | IQ3_S | qs, qh, signs, scales (108)     | d (2)                  | grid table     |
//! | IQ1_S | qs, qh (48)                     | d (2)                  | grid table     |
//! | IQ1_M | the block (56)                  | -                      | grid table     |
//!
//! The lattice i-quants also carry their grid (`quant::grid_bytes`: 1 KiB for IQ3_XXS to 16 KiB
//! for IQ1_S / IQ1_M) once per split, after the planes at the plane-2 offset, so every kernel
//! that reads the weight finds it at `params.plane2` with no binding of its own.
//!
//! A weight larger than the binding limit (`min(max_storage_buffer_binding_size,
//! max_buffer_size)`) is split by rows: every split but the last holds the most rows that fit.

use crate::gguf::GgmlType;
use crate::gpu::GpuError;

/// One plane: the byte ranges of a GGUF block that make up its entry, concatenated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneSpec {
    /// Bytes of one entry (one per block).
    pub entry_bytes: u64,
    /// `(start, end)` byte ranges of the GGUF block, in order.
    pub src: &'static [(usize, usize)],
}

/// How a type is laid out on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeLayout {
    pub ty: GgmlType,
    /// Elements per block (1 for the float types).
    pub block_elems: u64,
    /// GGUF bytes per block.
    pub block_bytes: u64,
    pub planes: &'static [PlaneSpec],
    /// Elements per kernel unit (`UNIT` in the WGSL decoders); K must be a multiple of it.
    pub unit: u64,
}

const fn plane(entry_bytes: u64, src: &'static [(usize, usize)]) -> PlaneSpec {
    PlaneSpec { entry_bytes, src }
}

const fn tl(ty: GgmlType, be: u64, bb: u64, planes: &'static [PlaneSpec], unit: u64) -> TypeLayout {
    TypeLayout {
        ty,
        block_elems: be,
        block_bytes: bb,
        planes,
        unit,
    }
}

/// Every weight type the matmul and embedding kernels handle.
pub const SUPPORTED_TYPES: [GgmlType; 29] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q1_0,
    GgmlType::Q2_0,
    GgmlType::Q2_0_G128,
    GgmlType::PQ2_0,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

const LAYOUTS: [TypeLayout; 29] = [
    tl(GgmlType::F32, 1, 4, &[plane(4, &[(0, 4)])], 4),
    tl(GgmlType::F16, 1, 2, &[plane(2, &[(0, 2)])], 4),
    tl(GgmlType::BF16, 1, 2, &[plane(2, &[(0, 2)])], 4),
    tl(
        GgmlType::Q4_0,
        32,
        18,
        &[plane(16, &[(2, 18)]), plane(2, &[(0, 2)])],
        32,
    ),
    tl(
        GgmlType::Q4_1,
        32,
        20,
        &[plane(16, &[(4, 20)]), plane(4, &[(0, 4)])],
        32,
    ),
    tl(
        GgmlType::Q5_0,
        32,
        22,
        &[
            plane(16, &[(6, 22)]),
            plane(4, &[(2, 6)]),
            plane(2, &[(0, 2)]),
        ],
        32,
    ),
    tl(
        GgmlType::Q5_1,
        32,
        24,
        &[
            plane(16, &[(8, 24)]),
            plane(4, &[(4, 8)]),
            plane(4, &[(0, 4)]),
        ],
        32,
    ),
    tl(
        GgmlType::Q8_0,
        32,
        34,
        &[plane(32, &[(2, 34)]), plane(2, &[(0, 2)])],
        32,
    ),
    tl(
        GgmlType::Q2_K,
        256,
        84,
        &[plane(80, &[(0, 80)]), plane(4, &[(80, 84)])],
        64,
    ),
    tl(
        GgmlType::Q3_K,
        256,
        110,
        &[plane(108, &[(0, 108)]), plane(2, &[(108, 110)])],
        64,
    ),
    tl(GgmlType::Q4_K, 256, 144, &[plane(144, &[(0, 144)])], 64),
    tl(GgmlType::Q5_K, 256, 176, &[plane(176, &[(0, 176)])], 64),
    tl(
        GgmlType::Q6_K,
        256,
        210,
        &[plane(208, &[(0, 208)]), plane(2, &[(208, 210)])],
        64,
    ),
    // The 1-bit and ternary formats (shaders/common/quant_ternary.wgsl): a unit is a block
    // (TQ2_0: half a block, one 32-byte half of its qs).
    tl(
        GgmlType::Q1_0,
        128,
        18,
        &[plane(16, &[(2, 18)]), plane(2, &[(0, 2)])],
        128,
    ),
    tl(
        GgmlType::Q2_0,
        64,
        18,
        &[plane(16, &[(2, 18)]), plane(2, &[(0, 2)])],
        64,
    ),
    tl(
        GgmlType::Q2_0_G128,
        128,
        34,
        &[plane(32, &[(2, 34)]), plane(2, &[(0, 2)])],
        128,
    ),
    tl(
        GgmlType::PQ2_0,
        128,
        34,
        &[plane(32, &[(2, 34)]), plane(2, &[(0, 2)])],
        128,
    ),
    tl(
        GgmlType::TQ1_0,
        256,
        54,
        &[plane(52, &[(0, 52)]), plane(2, &[(52, 54)])],
        256,
    ),
    tl(
        GgmlType::TQ2_0,
        256,
        66,
        &[plane(64, &[(0, 64)]), plane(2, &[(64, 66)])],
        128,
    ),
    // The 4-bit codebook formats (shaders/common/quant_iq4.wgsl): a unit is 32 elements (an
    // IQ4_NL / MXFP4 block, an IQ4_XS sub-block).
    tl(
        GgmlType::IQ4_NL,
        32,
        18,
        &[plane(16, &[(2, 18)]), plane(2, &[(0, 2)])],
        32,
    ),
    tl(
        GgmlType::IQ4_XS,
        256,
        136,
        &[plane(132, &[(4, 136)]), plane(4, &[(0, 4)])],
        32,
    ),
    tl(
        GgmlType::MXFP4,
        32,
        17,
        &[plane(16, &[(1, 17)]), plane(1, &[(0, 1)])],
        32,
    ),
    // The lattice i-quants (shaders/common/quant_iq_grid.wgsl): a unit is a 32-element
    // sub-block; the f16 d moves to plane 1 and the grid follows the planes.
    tl(
        GgmlType::IQ2_XXS,
        256,
        66,
        &[plane(64, &[(2, 66)]), D16],
        32,
    ),
    tl(GgmlType::IQ2_XS, 256, 74, &[plane(72, &[(2, 74)]), D16], 32),
    tl(GgmlType::IQ2_S, 256, 82, &[plane(80, &[(2, 82)]), D16], 32),
    tl(
        GgmlType::IQ3_XXS,
        256,
        98,
        &[plane(96, &[(2, 98)]), D16],
        32,
    ),
    tl(
        GgmlType::IQ3_S,
        256,
        110,
        &[plane(108, &[(2, 110)]), D16],
        32,
    ),
    tl(GgmlType::IQ1_S, 256, 50, &[plane(48, &[(2, 50)]), D16], 32),
    tl(GgmlType::IQ1_M, 256, 56, &[plane(56, &[(0, 56)])], 32),
];

/// A leading f16 scale as its own plane.
const D16: PlaneSpec = plane(2, &[(0, 2)]);

/// The layout of `ty`, or [`GpuError::UnsupportedType`].
pub fn layout(ty: GgmlType) -> Result<&'static TypeLayout, GpuError> {
    LAYOUTS
        .iter()
        .find(|l| l.ty == ty)
        .ok_or_else(|| GpuError::UnsupportedType {
            op: "GPU matmul / embedding".to_string(),
            ty,
        })
}

fn bad_shape(ty: GgmlType, shape: [u64; 2], expected: String) -> GpuError {
    GpuError::BadInput {
        what: format!("{ty} weight shape"),
        expected,
        actual: format!("[{}, {}]", shape[0], shape[1]),
    }
}

/// Checks `shape = [K, N]` for `ty` and returns (layout, blocks per row).
pub fn check_shape(ty: GgmlType, shape: [u64; 2]) -> Result<(&'static TypeLayout, u64), GpuError> {
    let l = layout(ty)?;
    let [k, n] = shape;
    if k == 0 || n == 0 || k % l.unit != 0 || k % l.block_elems != 0 {
        return Err(bad_shape(
            ty,
            shape,
            format!("K a non-zero multiple of {}", l.unit),
        ));
    }
    if k > u64::from(u32::MAX) / 4 || n > u64::from(u32::MAX) {
        return Err(bad_shape(ty, shape, "K < 2^30 and N < 2^32".to_string()));
    }
    Ok((l, k / l.block_elems))
}

/// One split of a weight: rows `[row0, row0 + n_rows)` in one buffer of `bytes` bytes, plane p
/// starting at byte `plane_offsets[p]` (16-aligned; unused planes repeat the last offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitPlan {
    pub row0: u64,
    pub n_rows: u64,
    pub plane_offsets: [u64; 3],
    pub bytes: u64,
}

fn align16(v: u64) -> u64 {
    v.div_ceil(16) * 16
}

/// Plane offsets and total bytes of a split of `rows` rows of `nb` blocks.
fn split_size(l: &TypeLayout, nb: u64, rows: u64) -> ([u64; 3], u64) {
    let mut offsets = [0u64; 3];
    let mut end = 0u64;
    for (p, spec) in l.planes.iter().enumerate() {
        let start = align16(end);
        offsets[p] = start;
        end = start.saturating_add(rows.saturating_mul(nb).saturating_mul(spec.entry_bytes));
    }
    for p in l.planes.len()..3 {
        offsets[p] = offsets[l.planes.len() - 1];
    }
    let table = crate::quant::grid_len(l.ty) as u64;
    if table > 0 {
        // The lattice grid after the planes (at most two planes for these types).
        offsets[2] = align16(end);
        end = offsets[2] + table;
    }
    // A multiple of 32 bytes: CPU drivers read splits as vec4<u64> (matmul_rows.wgsl, INT64).
    (offsets, end.div_ceil(32).max(1) * 32)
}

/// The row splits of a `[K, N]` weight of `ty` whose buffers may be at most `limit` bytes.
pub fn split_plan(ty: GgmlType, shape: [u64; 2], limit: u64) -> Result<Vec<SplitPlan>, GpuError> {
    split_plan_grouped(ty, shape, limit, 1)
}

/// [`split_plan`] with every split holding whole groups of `group` rows (a 3-D expert tensor:
/// one expert's rows), so a split never cuts an expert.
pub fn split_plan_grouped(
    ty: GgmlType,
    shape: [u64; 2],
    limit: u64,
    group: u64,
) -> Result<Vec<SplitPlan>, GpuError> {
    let (l, nb) = check_shape(ty, shape)?;
    let n = shape[1];
    let group = group.max(1);
    let row_bytes = nb * l.block_bytes;
    let mut max_rows = (limit / row_bytes.max(1)).min(n);
    max_rows -= max_rows % group;
    while max_rows > 0 && split_size(l, nb, max_rows).1 > limit {
        max_rows -= group;
    }
    if max_rows == 0 {
        return Err(GpuError::BufferTooLarge {
            what: format!(
                "{group} row(s) (one expert or row) of a {ty} weight of shape [{}, {n}]",
                shape[0]
            ),
            bytes: split_size(l, nb, group).1,
            limit,
        });
    }
    let mut out = Vec::new();
    let mut row0 = 0;
    while row0 < n {
        let n_rows = max_rows.min(n - row0);
        let (plane_offsets, bytes) = split_size(l, nb, n_rows);
        out.push(SplitPlan {
            row0,
            n_rows,
            plane_offsets,
            bytes,
        });
        row0 += n_rows;
    }
    Ok(out)
}

/// The largest buffer a weight split may use on a device with `limits`.
pub fn binding_limit(limits: &wgpu::Limits) -> u64 {
    limits
        .max_storage_buffer_binding_size
        .min(limits.max_buffer_size)
        & !15
}

/// Exact device bytes of a `[K, N]` weight of `ty` (the sum of its split buffers), for the
/// memory planner.
pub fn device_bytes(ty: GgmlType, shape: [u64; 2], limits: &wgpu::Limits) -> Result<u64, GpuError> {
    device_bytes_grouped(ty, shape, limits, 1)
}

/// [`device_bytes`] of a weight split by whole groups of `group` rows ([`split_plan_grouped`]).
pub fn device_bytes_grouped(
    ty: GgmlType,
    shape: [u64; 2],
    limits: &wgpu::Limits,
    group: u64,
) -> Result<u64, GpuError> {
    let plan = split_plan_grouped(ty, shape, binding_limit(limits), group)?;
    Ok(plan.iter().map(|s| s.bytes).sum())
}

/// The buffer contents of `split` from the GGUF bytes of the whole weight (`N * row_bytes`).
pub fn repack_split(
    ty: GgmlType,
    shape: [u64; 2],
    split: &SplitPlan,
    gguf: &[u8],
) -> Result<Vec<u8>, GpuError> {
    let (l, nb) = check_shape(ty, shape)?;
    let row_bytes = nb * l.block_bytes;
    let expected = row_bytes.checked_mul(shape[1]);
    if expected != Some(gguf.len() as u64) {
        return Err(GpuError::BadInput {
            what: format!("{ty} weight data of shape [{}, {}]", shape[0], shape[1]),
            expected: format!("{expected:?} bytes"),
            actual: format!("{} bytes", gguf.len()),
        });
    }
    let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let start = to_usize(split.row0 * row_bytes);
    let end = to_usize((split.row0 + split.n_rows) * row_bytes);
    let rows = gguf.get(start..end).ok_or_else(|| GpuError::BadInput {
        what: "weight split rows".to_string(),
        expected: format!("rows within {} bytes", gguf.len()),
        actual: format!("bytes {start}..{end}"),
    })?;
    let mut out = vec![0u8; to_usize(split.bytes)];
    if let Some(grid) = crate::quant::grid_bytes(ty) {
        let at = to_usize(split.plane_offsets[2]);
        out[at..at + grid.len()].copy_from_slice(&grid);
    }
    if l.planes.len() == 1 && l.planes[0].entry_bytes == l.block_bytes {
        // Already aligned: a straight copy.
        out[..rows.len()].copy_from_slice(rows);
        return Ok(out);
    }
    for (p, spec) in l.planes.iter().enumerate() {
        let base = to_usize(split.plane_offsets[p]);
        let entry = to_usize(spec.entry_bytes);
        let dst = &mut out[base..base + rows.len() / to_usize(l.block_bytes) * entry];
        for (block, e) in rows
            .chunks_exact(to_usize(l.block_bytes))
            .zip(dst.chunks_exact_mut(entry))
        {
            let mut at = 0;
            for &(s, t) in spec.src {
                e[at..at + t - s].copy_from_slice(&block[s..t]);
                at += t - s;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_cover_each_block_exactly_once() {
        for l in &LAYOUTS {
            let mut covered = vec![0u32; l.block_bytes as usize];
            for p in l.planes {
                let len: usize = p.src.iter().map(|(s, t)| t - s).sum();
                assert_eq!(len as u64, p.entry_bytes, "{}", l.ty);
                assert!(
                    p.entry_bytes % 4 == 0 || matches!(p.entry_bytes, 1 | 2),
                    "{}",
                    l.ty
                );
                for &(s, t) in p.src {
                    covered[s..t].iter_mut().for_each(|c| *c += 1);
                }
            }
            assert!(covered.iter().all(|&c| c == 1), "{}", l.ty);
            assert_eq!(
                l.ty.block_layout(),
                (l.block_elems as usize, l.block_bytes as usize)
            );
        }
    }

    #[test]
    fn lattice_grids_follow_the_planes_in_every_split() {
        // IQ1_S [512, 7]: 2 blocks a row; plane 0 48 bytes a block, plane 1 2, then 16 KiB of
        // grid at plane 2.
        let plan = split_plan(GgmlType::IQ1_S, [512, 7], 1 << 20).unwrap();
        assert_eq!(plan[0].plane_offsets, [0, 672, 704]);
        assert_eq!(plan[0].bytes, 704 + 16384);
        // IQ4_NL [288, 3] (162-byte rows): 27 entries of 16, then 27 of 2, no table.
        let plan = split_plan(GgmlType::IQ4_NL, [288, 3], 1 << 20).unwrap();
        assert_eq!(plan[0].plane_offsets, [0, 432, 432]);
        assert_eq!(plan[0].bytes, 512);
        // Every split carries the grid: split sizes add up to rows plus one grid each.
        let plan = split_plan(GgmlType::IQ3_S, [256, 100], 4096).unwrap();
        assert!(plan.len() > 1 && plan.iter().all(|s| s.bytes <= 4096));
        let gguf = vec![0x5Au8; 100 * 110];
        for s in &plan {
            let out = repack_split(GgmlType::IQ3_S, [256, 100], s, &gguf).unwrap();
            let at = s.plane_offsets[2] as usize;
            assert_eq!(
                &out[at..at + 2048],
                &crate::quant::grid_bytes(GgmlType::IQ3_S).unwrap()[..]
            );
        }
    }

    #[test]
    fn splits_fit_the_limit_and_cover_every_row() {
        let shape = [4096, 1000];
        let one = split_plan(GgmlType::Q8_0, shape, 1 << 30).unwrap();
        assert_eq!(one.len(), 1);
        // 4096 / 32 * 34 = 4352 bytes per row: 128 blocks * 32 qs, then 128 * 2 of d.
        assert_eq!(one[0].plane_offsets[1], 1000 * 128 * 32);
        assert_eq!(one[0].bytes, 1000 * 4352);
        let limit = 100_000;
        let plan = split_plan(GgmlType::Q8_0, shape, limit).unwrap();
        assert!(plan.iter().all(|s| s.bytes <= limit));
        assert_eq!(plan.iter().map(|s| s.n_rows).sum::<u64>(), 1000);
        assert_eq!(plan[1].row0, plan[0].n_rows);
        assert!(matches!(
            split_plan(GgmlType::Q8_0, shape, 4000),
            Err(GpuError::BufferTooLarge { .. })
        ));
        assert!(matches!(
            split_plan(GgmlType::Q4_K, [576, 10], 1 << 20),
            Err(GpuError::BadInput { .. })
        ));
        assert!(matches!(
            split_plan(GgmlType::NVFP4, [256, 10], 1 << 20),
            Err(GpuError::UnsupportedType { .. })
        ));
    }
}
