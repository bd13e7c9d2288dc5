//! One layer's mixture-of-experts FFN on the device: its weights ([`MoeGpuWeights`]), the
//! scratch it runs in ([`MoeScratch`], planned as `act.moe.*`) and the ordered dispatches
//! ([`MoeBlock`]): router matmul, router, gate and up expert mat-vecs, GLU, down expert
//! mat-vec, the shared expert's matmuls and GLU, and the weighted sum (`super::moe`'s kernels).

use crate::gpu::buffers::create_storage;
use crate::gpu::{GpuContext, GpuError};
use crate::kernels::launch::Dispatch;
use crate::kernels::matmul::{matmul_dispatches, Family, GpuWeight, MatmulIo};

use super::bad_input;
use super::glu::{Glu, GluOp};
use super::moe::{combine_dispatch, matvec_id_dispatches, router_dispatch, IdIo, MoeParams};

/// One layer's MoE weights on the device (expert tensors as `[K, N · n_expert]` weights).
#[derive(Debug, Clone)]
pub struct MoeGpuWeights {
    /// `ffn_gate_inp` `[d, n_expert]`.
    pub router: GpuWeight,
    pub gate_exps: GpuWeight,
    pub up_exps: GpuWeight,
    pub down_exps: GpuWeight,
    /// qwen35moe: `ffn_{gate,up,down}_shexp` and `ffn_gate_inp_shexp` `[d, 1]`.
    pub shared: Option<[GpuWeight; 4]>,
    pub n_expert: u32,
    pub n_used: u32,
}

/// Scratch of a [`MoeBlock`] for `m` rows.
#[derive(Debug)]
pub struct MoeScratch {
    pub logits: wgpu::Buffer,
    pub ids: wgpu::Buffer,
    pub weights: wgpu::Buffer,
    /// `[m · n_used, f]` each, then `[m · n_used, d]`.
    pub gate: wgpu::Buffer,
    pub up: wgpu::Buffer,
    pub h: wgpu::Buffer,
    pub y: wgpu::Buffer,
    /// Shared expert `[m, f_sh]` ×3, `[m, d]`, gate logits `[m]`.
    pub shared: Option<[wgpu::Buffer; 5]>,
}

impl MoeScratch {
    /// Every buffer with its short name (`logits`, `ids`, …), for the allocation records.
    pub fn named(&self) -> Vec<(&'static str, &wgpu::Buffer)> {
        let mut v = vec![
            ("logits", &self.logits),
            ("ids", &self.ids),
            ("weights", &self.weights),
            ("gate", &self.gate),
            ("up", &self.up),
            ("h", &self.h),
            ("y", &self.y),
        ];
        if let Some(s) = &self.shared {
            let names = [
                "shexp_gate",
                "shexp_up",
                "shexp_h",
                "shexp_out",
                "shexp_logit",
            ];
            v.extend(names.into_iter().zip(s.iter()));
        }
        v
    }

    /// Buffers for `m` rows of `w` with hidden size `d`.
    pub fn new(ctx: &GpuContext, w: &MoeGpuWeights, d: u32, m: u32) -> Result<Self, GpuError> {
        let slots = u64::from(m) * u64::from(w.n_used);
        let f = u64::from(w.gate_exps.n / w.n_expert.max(1));
        let buf = |what: &str, n: u64| create_storage(ctx, what, 4 * n.max(1));
        let shared = match &w.shared {
            Some([g, ..]) => {
                let sf = u64::from(m) * u64::from(g.n);
                Some([
                    buf("moe shexp gate", sf)?,
                    buf("moe shexp up", sf)?,
                    buf("moe shexp h", sf)?,
                    buf("moe shexp out", u64::from(m) * u64::from(d))?,
                    buf("moe shexp gate logit", u64::from(m))?,
                ])
            }
            None => None,
        };
        Ok(MoeScratch {
            logits: buf("moe router logits", u64::from(m) * u64::from(w.n_expert))?,
            ids: buf("moe ids", slots)?,
            weights: buf("moe weights", slots)?,
            gate: buf("moe gate", slots * f)?,
            up: buf("moe up", slots * f)?,
            h: buf("moe h", slots * f)?,
            y: buf("moe y", slots * u64::from(d))?,
            shared,
        })
    }
}

/// One layer's MoE FFN for `m` rows: `out [m, d] = moe(x [m, d])`; [`Self::dispatches`] in
/// order.
#[derive(Debug)]
pub struct MoeBlock {
    /// Router matmul, router, gate and up expert mat-vecs.
    head: Vec<Dispatch>,
    glu: GluOp,
    /// Down expert mat-vec.
    down: Vec<Dispatch>,
    /// Shared expert: gate and up matmuls, its GLU, down and gate-logit matmuls.
    shared: Option<(Vec<Dispatch>, GluOp, Vec<Dispatch>)>,
    combine: Dispatch,
}

impl MoeBlock {
    /// Builds the block reading `x` and writing `out` through `s` (made for at least `m` rows).
    pub fn new(
        ctx: &GpuContext,
        family: Family,
        w: &MoeGpuWeights,
        s: &MoeScratch,
        x: &wgpu::Buffer,
        out: &wgpu::Buffer,
        m: u32,
    ) -> Result<MoeBlock, GpuError> {
        let d = w.router.k;
        let f = w.gate_exps.n / w.n_expert.max(1);
        let k = w.n_used;
        let dense =
            |w: &GpuWeight, x, y| matmul_dispatches(ctx, family, w, &MatmulIo::dense(w, x, y, m));
        let mut head = dense(&w.router, x, &s.logits)?;
        let p = MoeParams {
            m,
            n: w.n_expert,
            n_used: k,
            _pad: 0,
        };
        head.push(router_dispatch(ctx, &s.logits, &s.ids, &s.weights, p)?);
        let id = |x, per_slot, y| IdIo {
            x,
            per_slot,
            y,
            ids: &s.ids,
            m,
            n_used: k,
        };
        let n_e = w.n_expert;
        head.extend(matvec_id_dispatches(
            ctx,
            family,
            &w.gate_exps,
            n_e,
            &id(x, false, &s.gate),
        )?);
        head.extend(matvec_id_dispatches(
            ctx,
            family,
            &w.up_exps,
            n_e,
            &id(x, false, &s.up),
        )?);
        let glu = GluOp::new(ctx, Glu::Swiglu, &s.gate, &s.up, &s.h, m * k * f)?;
        let down = matvec_id_dispatches(ctx, family, &w.down_exps, n_e, &id(&s.h, true, &s.y))?;
        let (shared, shared_out) = match (&w.shared, &s.shared) {
            (Some([g, u, dn, gi]), Some([sg, su, sh, so, sl])) => {
                let mut gu = dense(g, x, sg)?;
                gu.extend(dense(u, x, su)?);
                let glu = GluOp::new(ctx, Glu::Swiglu, sg, su, sh, m * g.n)?;
                let mut tail = dense(dn, sh, so)?;
                tail.extend(dense(gi, x, sl)?);
                (Some((gu, glu, tail)), Some((so, sl)))
            }
            (None, _) => (None, None),
            (Some(_), None) => {
                return Err(bad_input("MoE scratch", "shared expert buffers", "none"));
            }
        };
        let p = MoeParams {
            m,
            n: d,
            n_used: k,
            _pad: 0,
        };
        let combine = combine_dispatch(ctx, &s.y, &s.weights, out, shared_out, p)?;
        Ok(MoeBlock {
            head,
            glu,
            down,
            shared,
            combine,
        })
    }

    /// Every dispatch of the block, in order.
    pub fn dispatches(&self) -> Vec<&Dispatch> {
        let mut list: Vec<&Dispatch> = self.head.iter().collect();
        list.push(&self.glu.dispatch);
        list.extend(&self.down);
        if let Some((gu, glu, tail)) = &self.shared {
            list.extend(gu);
            list.push(&glu.dispatch);
            list.extend(tail);
        }
        list.push(&self.combine);
        list
    }
}
