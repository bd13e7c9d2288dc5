//! A load with `--spec-type draft-mtp`: the target file's MTP block uploaded beside the
//! target's weights (shared by every slot), one MTP drafter per sequence fed by its taps of
//! the target's last layer, and how to speculate with them (every cycle `n_max` drafts, the
//! fixed policy: llama.cpp's `draft-mtp` has no confidence, threshold or bypass).

use crate::gguf::GgufFile;
use crate::gpu::GpuContext;
use crate::memory::{Plan, RunParams};
use crate::model::forward::batch::BatchForward;
use crate::model::weights::ModelWeights;
use crate::model::Hparams;
use crate::speculative::mtp::{Mtp, MtpConfig, MtpWeights};
use crate::speculative::{Drafter, SpecOptions, VerifyPolicy};
use crate::Result;

use super::DraftOptions;

/// The MTP block's weights when `opts` drafts with it (before the target file is closed).
pub(super) fn load_weights(
    ctx: &GpuContext,
    d: Option<&DraftOptions>,
    file: &GgufFile,
    hp: &Hparams,
    target: &ModelWeights,
) -> Result<Option<MtpWeights>> {
    match d {
        Some(d) if d.mtp => Ok(Some(MtpWeights::load(ctx, file, hp, target)?)),
        _ => Ok(None),
    }
}

/// Rows per sequence whose logits a verify computes: the anchor and `n_max` drafts.
pub(super) fn verify_rows(d: &DraftOptions) -> u32 {
    d.n_max.max(1) + 1
}

/// One MTP drafter per sequence of `fwd` on `w`, each sequence's taps (its last layer's
/// output, `n_layer`) pointed at its drafter's staging; their buffers join `allocated` under
/// `slot{s}.`.
pub(super) fn drafters(
    ctx: &GpuContext,
    w: &MtpWeights,
    d: &DraftOptions,
    params: &RunParams,
    plan: &Plan,
    fwd: &mut BatchForward,
    allocated: &mut Vec<(String, u64)>,
) -> Result<(Vec<Box<dyn Drafter + Send>>, SpecOptions)> {
    let hp = fwd.hp().clone();
    let n_max = d.n_max.max(1);
    let cfg = MtpConfig {
        ctx_rows: params.n_ctx,
        rows: params.n_ubatch.max(verify_rows(d)),
        n_max,
        type_k: params.type_k,
        type_v: params.type_v,
    };
    allocated.extend(w.allocations.iter().cloned());
    let mut out: Vec<Box<dyn Drafter + Send>> = Vec::new();
    for seq in 0..fwd.n_seq() {
        let mtp = Mtp::new(ctx, &hp, w, &cfg, plan.budget, plan.limits)?;
        fwd.set_taps(ctx, seq, &[hp.n_layer], mtp.taps_buffer())?;
        let records = mtp.allocations.iter().cloned();
        allocated.extend(records.map(|(n, b)| (crate::memory::batch::slot_name(seq, &n), b)));
        out.push(Box::new(mtp));
    }
    let spec = SpecOptions {
        n_max,
        policy: VerifyPolicy::Fixed,
        bypass: None,
    };
    Ok((out, spec))
}
