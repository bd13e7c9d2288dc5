//! Concrete alternatives for a plan that does not fit, each computed by replanning with the same
//! planner: smaller KV types, the largest context that fits, a drafter KV window, a smaller
//! ubatch.

use crate::gguf::GgmlType;

use super::layout::KV_TYPES;
use super::{fmt_bytes, plan, DrafterShape, Plan, RunParams, TargetShape};

fn spare(p: &Plan) -> String {
    fmt_bytes(p.budget.usable().saturating_sub(p.total()))
}

fn replan(t: TargetShape<'_>, d: Option<DrafterShape<'_>>, base: &Plan, p: &RunParams) -> Plan {
    plan(t, d, p, base.budget, base.limits)
}

/// The largest context (a multiple of 256, at least 256, at most `upper`) for which `fits`
/// holds, assuming fitting is monotone in the context.
pub(crate) fn largest_ctx(upper: u32, fits: impl Fn(u32) -> bool) -> Option<u32> {
    let mut hi = upper / 256;
    if hi == 0 || !fits(256) {
        return None;
    }
    // Invariant: fits(lo * 256); the answer is in [lo, hi].
    let mut lo = 1;
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid * 256) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo * 256)
}

/// Alternatives for `base` (empty when it fits).
pub fn suggestions(
    t: TargetShape<'_>,
    d: Option<DrafterShape<'_>>,
    p: &RunParams,
    base: &Plan,
) -> Vec<String> {
    if base.fits() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let bytes_of = |ty: GgmlType| ty.type_size() as f64 / ty.block_size() as f64;
    // Smaller target KV types.
    for ty in KV_TYPES {
        if bytes_of(ty) >= bytes_of(p.type_k) && bytes_of(ty) >= bytes_of(p.type_v) {
            continue;
        }
        let q = RunParams {
            type_k: ty,
            type_v: ty,
            ..p.clone()
        };
        let alt = replan(t, d, base, &q);
        if alt.fits() {
            out.push(format!(
                "-ctk {0} -ctv {0} fits with {1} to spare",
                ty.name().to_lowercase(),
                spare(&alt)
            ));
            break;
        }
    }
    // The largest context with the current KV types.
    let fits_at = |n_ctx: u32| {
        let q = RunParams { n_ctx, ..p.clone() };
        replan(t, d, base, &q).fits()
    };
    match largest_ctx(p.n_ctx, fits_at) {
        Some(n) if n < p.n_ctx => out.push(format!(
            "largest -c with {} KV: {n}",
            p.type_k.name().to_lowercase()
        )),
        _ => {}
    }
    // Drafter: a quantized KV cache, or a position window.
    if let (Some(_), Some(dp)) = (d, p.draft.as_ref()) {
        if dp.type_k != GgmlType::Q4_0 {
            let mut q = p.clone();
            if let Some(x) = q.draft.as_mut() {
                x.type_k = GgmlType::Q4_0;
                x.type_v = GgmlType::Q4_0;
            }
            let alt = replan(t, d, base, &q);
            if alt.fits() {
                out.push(format!(
                    "drafter KV -ctkd q4_0 -ctvd q4_0 fits with {} to spare",
                    spare(&alt)
                ));
            }
        }
        if dp.window.is_none() && p.n_ctx > 4096 {
            let mut q = p.clone();
            if let Some(x) = q.draft.as_mut() {
                x.window = Some(4096);
            }
            let alt = replan(t, d, base, &q);
            if alt.fits() {
                out.push(format!(
                    "a 4096-row drafter window (--draft-window 4096) fits with {} to spare",
                    spare(&alt)
                ));
            }
        }
        let mut q = p.clone();
        q.draft = None;
        let alt = replan(t, None, base, &q);
        if alt.fits() {
            out.push(format!(
                "without the drafter it fits with {} to spare",
                spare(&alt)
            ));
        }
    }
    if out.is_empty() {
        let weights = base.sum(None, Some(super::Kind::Weights));
        out.push(format!(
            "the weights alone need {} of a {} budget: use a smaller quantization or a larger GPU",
            fmt_bytes(weights),
            fmt_bytes(base.budget.usable())
        ));
    }
    out
}
