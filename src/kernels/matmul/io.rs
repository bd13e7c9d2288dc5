//! Where a matmul reads X and writes Y ([`MatmulIo`], with the extra buffers of the
//! `matmul_rows.wgsl` epilogues: the GLU gate and the split output [`SplitOut`]) and the checks
//! every dispatch builder runs on them, with typed errors naming the values.

use crate::gpu::GpuError;
use crate::kernels::attention::RopeKvParams;
use crate::kernels::ops::glu::Glu;
use crate::kernels::ops::rope::RopeMode;

use super::epilogue::{glu_epilogue, GLU_PAIR_ROWS};
use super::variants::Family;
use super::weights::{GpuWeight, WeightSplit};
use super::MatmulParams;

/// Where X `[m, x_stride]` and Y `[m, y_stride]` (f32) live for `Y = X . W^T`.
#[derive(Debug, Clone, Copy)]
pub struct MatmulIo<'a> {
    pub x: &'a wgpu::Buffer,
    /// First element of X (a multiple of 4).
    pub x_off: u32,
    /// Row stride of X in elements (a multiple of 4, at least K).
    pub x_stride: u32,
    pub y: &'a wgpu::Buffer,
    /// First element of Y.
    pub y_off: u32,
    /// Row stride of Y in elements (at least N).
    pub y_stride: u32,
    /// Columns (tokens).
    pub m: u32,
    /// A GLU epilogue: Y = act(gate) * (X . W^T), with the gate projection laid out as Y (only
    /// where [`glu_epilogue`] holds).
    pub gate: Option<(Glu, &'a wgpu::Buffer)>,
    /// A split output (only where [`glu_epilogue`] holds, without `gate`, Y at offset 0).
    pub split: Option<SplitOut<'a>>,
    /// The weight pairs gate and up rows in blocks of [`GLU_PAIR_ROWS`] (N = 2 × the FFN width,
    /// one split): Y `[m, N / 2]` = act(gate) * up (only where [`glu_epilogue`] holds).
    pub paired: Option<Glu>,
}

/// Where a split output goes: weight rows `[0, split1)` to Y as `[m, split1]`, rows
/// `[split1, split2)` to `y2` as `[m, split2 - split1]`, rows `[split2, N)` to `y3` as
/// `[m, N - split2]` (a stacked q | k | v projection writing q, k and v in one dispatch).
#[derive(Debug, Clone, Copy)]
pub struct SplitOut<'a> {
    pub y2: &'a wgpu::Buffer,
    pub y3: &'a wgpu::Buffer,
    pub split1: u32,
    pub split2: u32,
    /// RoPE and the KV store done by the matmul (`ROPE`): q rotated into Y, k and v into the
    /// caches, `y2` and `y3` left untouched.
    pub rope: Option<SplitRope<'a>>,
}

/// The RoPE + KV store epilogue of a split output (`common/matmul_rope.wgsl`): normal pairs,
/// f16 K and V caches, as [`crate::kernels::attention::RopeKv`] would do after the matmul.
#[derive(Debug, Clone, Copy)]
pub struct SplitRope<'a> {
    /// The shape (`n_tokens` unused), also in `uniform`.
    pub shape: RopeKvParams,
    /// The pairing: the epilogue rotates normal (adjacent) pairs only.
    pub mode: RopeMode,
    /// `RopeKvParams` as a uniform buffer.
    pub uniform: &'a wgpu::Buffer,
    /// u32 `[m]`: the cache row (and RoPE position) of each column.
    pub positions: &'a wgpu::Buffer,
    /// f32 `[n_rot / 2]`.
    pub freqs: &'a wgpu::Buffer,
    pub k_cache: &'a wgpu::Buffer,
    pub v_cache: &'a wgpu::Buffer,
}

impl<'a> MatmulIo<'a> {
    /// Dense X `[m, K]` and Y `[m, N]` at offset 0.
    pub fn dense(w: &GpuWeight, x: &'a wgpu::Buffer, y: &'a wgpu::Buffer, m: u32) -> Self {
        MatmulIo {
            x,
            x_off: 0,
            x_stride: w.k,
            y,
            y_off: 0,
            y_stride: w.n,
            m,
            gate: None,
            split: None,
            paired: None,
        }
    }

    /// The params of split `s` of `w` reading this X and writing this Y.
    pub(super) fn params(&self, w: &GpuWeight, s: &WeightSplit) -> Result<MatmulParams, GpuError> {
        Ok(MatmulParams {
            m: self.m,
            n_out: self.y_stride,
            x_stride: self.x_stride,
            x_off: self.x_off,
            y_off: self.y_off,
            split1: self.split.map_or(0, |o| o.split1),
            split2: self.split.map_or(0, |o| o.split2),
            ..w.params(s)?
        })
    }
}

pub(super) fn bad(what: &str, expected: String, actual: String) -> GpuError {
    GpuError::BadInput {
        what: what.to_string(),
        expected,
        actual,
    }
}

/// `off + (rows - 1) * stride + len` elements must fit `buf` (f32 / u32 elements).
pub(super) fn check_fits(
    what: &str,
    buf: &wgpu::Buffer,
    off: u32,
    rows: u32,
    stride: u32,
    len: u32,
) -> Result<(), GpuError> {
    let need =
        u64::from(off) + u64::from(rows.saturating_sub(1)) * u64::from(stride) + u64::from(len);
    if need * 4 > buf.size() {
        return Err(bad(
            what,
            format!("at most {} bytes", buf.size()),
            format!("{} bytes", need * 4),
        ));
    }
    Ok(())
}

pub(super) fn check_io(w: &GpuWeight, io: &MatmulIo<'_>) -> Result<(), GpuError> {
    if io.m == 0 {
        return Ok(());
    }
    if !io.x_off.is_multiple_of(4) || !io.x_stride.is_multiple_of(4) || io.x_stride < w.k {
        return Err(bad(
            "matmul X layout",
            format!("offset and stride multiples of 4, stride >= K = {}", w.k),
            format!("offset {}, stride {}", io.x_off, io.x_stride),
        ));
    }
    check_fits("matmul X", io.x, io.x_off, io.m, io.x_stride, w.k)?;
    // Elements per Y row: N, half of it for a paired GLU; a split output: check_split.
    let n = match (io.split, io.paired) {
        (Some(_), _) => return Ok(()),
        (None, Some(_)) => w.n / 2,
        (None, None) => w.n,
    };
    if io.y_stride < n {
        return Err(bad(
            "matmul Y stride",
            format!(">= the output row of {n}"),
            io.y_stride.to_string(),
        ));
    }
    check_fits("matmul Y", io.y, io.y_off, io.m, io.y_stride, n)
}

/// A split output needs the `matmul_rows.wgsl` epilogues, no GLU, Y at offset 0, ordered
/// bounds and room in the three outputs.
pub(super) fn check_split(
    family: Family,
    w: &GpuWeight,
    io: &MatmulIo<'_>,
    o: &SplitOut<'_>,
) -> Result<(), GpuError> {
    let what = format!("split output of matmul {}", w.name);
    if !glu_epilogue(family, w.ty) || io.gate.is_some() {
        return Err(bad(
            &what,
            "a block-format weight on a CPU-driver family, no GLU".to_string(),
            format!("{} on {family:?}, GLU {}", w.ty, io.gate.is_some()),
        ));
    }
    if io.y_off != 0 || o.split1 > o.split2 || o.split2 > w.n {
        return Err(bad(
            &what,
            format!("Y offset 0 and split1 <= split2 <= N = {}", w.n),
            format!("offset {}, splits {} and {}", io.y_off, o.split1, o.split2),
        ));
    }
    check_fits("matmul split Y", io.y, 0, io.m, o.split1, o.split1)?;
    let n2 = o.split2 - o.split1;
    let n3 = w.n - o.split2;
    if let Some(r) = &o.rope {
        return check_rope(w, io, o, r);
    }
    check_fits("matmul split Y2", o.y2, 0, io.m, n2, n2)?;
    check_fits("matmul split Y3", o.y3, 0, io.m, n3, n3)
}

/// The RoPE epilogue needs q | k | v parts of whole heads with even dims, even split rows (a
/// pair in one invocation), and positions, frequencies and caches that hold what it writes.
fn check_rope(
    w: &GpuWeight,
    io: &MatmulIo<'_>,
    o: &SplitOut<'_>,
    r: &SplitRope<'_>,
) -> Result<(), GpuError> {
    let p = &r.shape;
    let what = format!("RoPE epilogue of matmul {}", w.name);
    let parts = [o.split1, o.split2 - o.split1, w.n - o.split2].map(u64::from);
    let heads = |n: u32, d: u32| u64::from(n) * u64::from(d);
    let want = [
        heads(p.n_head, p.head_dim),
        heads(p.n_kv_heads, p.head_dim),
        heads(p.n_kv_heads, p.head_dim_v),
    ];
    let rows_even = w.splits.iter().all(|s| s.plan.row0 % 2 == 0);
    let dims_ok = p.head_dim.is_multiple_of(2) && p.head_dim_v.is_multiple_of(2);
    let rot_ok = p.n_rot.is_multiple_of(2) && p.n_rot <= p.head_dim;
    if parts != want || !rows_even || !dims_ok || !rot_ok || r.mode != RopeMode::Normal {
        return Err(bad(
            &what,
            format!(
                "q | k | v rows {want:?} (heads of even dims, n_rot even <= {}), splits at even \
                 rows, normal pairs",
                p.head_dim
            ),
            format!(
                "rows {parts:?}, n_rot {}, splits even {rows_even}, {:?} pairs",
                p.n_rot, r.mode
            ),
        ));
    }
    check_fits("RoPE positions", r.positions, 0, 1, 0, io.m)?;
    check_fits("RoPE frequency table", r.freqs, 0, 1, 0, p.n_rot / 2)?;
    for (cache, what, d) in [
        (r.k_cache, "RoPE K cache", p.head_dim),
        (r.v_cache, "RoPE V cache", p.head_dim_v),
    ] {
        let need = heads(p.n_ctx, p.n_kv_heads) * u64::from(d / 2) * 4;
        if need > cache.size() {
            return Err(bad(
                what,
                format!("at least {need} bytes"),
                format!("{} bytes", cache.size()),
            ));
        }
    }
    Ok(())
}

/// A paired gate/up weight needs the `matmul_rows.wgsl` epilogues, no other epilogue, one split
/// and whole blocks of [`GLU_PAIR_ROWS`] gate and up rows.
pub(super) fn check_paired(
    family: Family,
    w: &GpuWeight,
    io: &MatmulIo<'_>,
) -> Result<(), GpuError> {
    let what = format!("paired GLU of matmul {}", w.name);
    if !glu_epilogue(family, w.ty) || io.gate.is_some() || io.split.is_some() {
        return Err(bad(
            &what,
            "a block-format weight on a CPU-driver family, no other epilogue".to_string(),
            format!("{} on {family:?}", w.ty),
        ));
    }
    if w.splits.len() != 1 || !w.n.is_multiple_of(2 * GLU_PAIR_ROWS) {
        return Err(bad(
            &what,
            format!("one split, rows a multiple of {}", 2 * GLU_PAIR_ROWS),
            format!("{} splits, {} rows", w.splits.len(), w.n),
        ));
    }
    Ok(())
}
