//! The grouped projections of a layer, as dispatches for `m` rows: q, k and v (three matmuls,
//! or one over a stacked weight with a split output) and the FFN's gate and up (two matmuls, the
//! up one applying the GLU where the family can, or one over a paired weight).

use crate::gpu::GpuContext;
use crate::kernels::launch::Dispatch;
use crate::kernels::matmul::{matmul_dispatches, Family, GpuWeight, MatmulIo, SplitOut, SplitRope};
use crate::kernels::ops::glu::Glu;
use crate::model::weights::{GateUp, Qkv};
use crate::Result;

use super::Buffers;

/// The q, k and v projections of `m` rows from `b.xn` into `b.q`, `b.k`, `b.v`: three matmuls,
/// or one over the stacked weight with a split output, which with `rope` (stacked weights
/// only) rotates q in `b.q` and stores k and v in the caches itself.
pub(super) fn qkv_dispatches(
    ctx: &GpuContext,
    family: Family,
    qkv: &Qkv,
    b: &Buffers,
    m: u32,
    rope: Option<SplitRope<'_>>,
) -> Result<[Vec<Dispatch>; 3]> {
    let mm = |w: &GpuWeight, y: &wgpu::Buffer| {
        matmul_dispatches(ctx, family, w, &MatmulIo::dense(w, &b.xn, y, m))
    };
    Ok(match qkv {
        Qkv::Separate { wq, wk, wv } => [mm(wq, &b.q)?, mm(wk, &b.k)?, mm(wv, &b.v)?],
        Qkv::Stacked { w, q_rows, k_rows } => {
            let io = MatmulIo {
                split: Some(SplitOut {
                    y2: &b.k,
                    y3: &b.v,
                    split1: *q_rows,
                    split2: q_rows + k_rows,
                    rope,
                }),
                ..MatmulIo::dense(w, &b.xn, &b.q, m)
            };
            [
                matmul_dispatches(ctx, family, w, &io)?,
                Vec::new(),
                Vec::new(),
            ]
        }
    })
}

/// The gate and up projections of `m` rows from `b.xn`: into `b.gate` and `b.up` (a GLU op
/// follows), into `b.gate` and, applying the GLU, `b.glu` (`fused`: the layer has no GLU op), or
/// one paired matmul into `b.glu`. Returns `[gate, up]` (gate empty when paired).
pub(super) fn gate_up_dispatches(
    ctx: &GpuContext,
    family: Family,
    ffn: &GateUp,
    (fused, glu): (bool, Glu),
    b: &Buffers,
    m: u32,
) -> Result<[Vec<Dispatch>; 2]> {
    let mm = |w: &GpuWeight, y: &wgpu::Buffer| {
        matmul_dispatches(ctx, family, w, &MatmulIo::dense(w, &b.xn, y, m))
    };
    Ok(match ffn {
        GateUp::Separate { gate, up } if fused => {
            let io = MatmulIo {
                gate: Some((glu, &b.gate)),
                ..MatmulIo::dense(up, &b.xn, &b.glu, m)
            };
            [mm(gate, &b.gate)?, matmul_dispatches(ctx, family, up, &io)?]
        }
        GateUp::Separate { gate, up } => [mm(gate, &b.gate)?, mm(up, &b.up)?],
        GateUp::Paired(w) => {
            let io = MatmulIo {
                paired: Some(glu),
                y_stride: w.n / 2,
                ..MatmulIo::dense(w, &b.xn, &b.glu, m)
            };
            [Vec::new(), matmul_dispatches(ctx, family, w, &io)?]
        }
        // The MoE block (`MatmulSet::moe`) replaces gate, up, GLU and down.
        GateUp::Moe(_) => [Vec::new(), Vec::new()],
    })
}
