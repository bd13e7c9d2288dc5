//! The drafter options of a session and the drafter's share of the run parameters, which
//! `flint plan` and a run derive with the same function.

use std::path::PathBuf;

use crate::gguf::GgmlType;
use crate::memory::DraftParams;
use crate::model::DrafterMeta;
use crate::{Error, Result};

/// The drafter of a session (llama.cpp's flag names in comments).
#[derive(Debug, Clone)]
pub struct DraftOptions {
    /// `-md` / `--spec-draft-model`.
    pub model: PathBuf,
    /// `--spec-draft-n-max`: drafts verified per cycle (0 = the drafter's block).
    pub n_max: u32,
    /// `--spec-draft-p-min`: per-slot confidence threshold (0 = off).
    pub p_min: f32,
    /// `--spec-draft-ubatch`: `U`, rows per injection chunk.
    pub inject_chunk: u32,
    /// `-ctkd`, `-ctvd`.
    pub type_k: GgmlType,
    pub type_v: GgmlType,
    /// `--spec-schedule`: the paper's Algorithm 1 over an SPS(B) profile measured at load.
    pub schedule: bool,
    /// `-cd`: drafter context rows (default: its trained context when the window is on).
    pub ctx: Option<u32>,
    /// Keep drafter positions inside a window (`--spec-no-window` turns it off).
    pub window: bool,
    /// Decode plainly while drafting does not pay (`--spec-no-bypass` turns it off).
    pub bypass: bool,
    /// `--spec-type draft-mtp`: draft with the target's own MTP (`nextn`) layer; `model` is
    /// then the target file (`speculative::mtp`).
    pub mtp: bool,
}

impl DraftOptions {
    pub fn new(model: PathBuf) -> DraftOptions {
        DraftOptions {
            model,
            n_max: 0,
            p_min: 0.0,
            inject_chunk: 512,
            type_k: GgmlType::F16,
            type_v: GgmlType::F16,
            schedule: false,
            ctx: None,
            window: true,
            bypass: true,
            mtp: false,
        }
    }

    /// Drafting with the MTP layer of the target `model`, `n_max` drafts per cycle.
    pub fn mtp(model: PathBuf, n_max: u32) -> DraftOptions {
        DraftOptions {
            n_max,
            bypass: false,
            mtp: true,
            ..DraftOptions::new(model)
        }
    }
}

/// The drafter's share of the run parameters (what `flint plan` and a run both use): `n_max`
/// clamped to what a block gives, `U` above one verify batch, and the position window — the
/// drafter's trained context (or `-cd`) when below `-c`.
pub fn draft_params(d: &DraftOptions, meta: &DrafterMeta, n_ctx: u32) -> Result<DraftParams> {
    let max = meta.max_drafts();
    if max == 0 {
        return Err(Error::Usage(format!(
            "{} gives no drafts (block size {})",
            d.model.display(),
            meta.block_size
        )));
    }
    let n_draft = if d.n_max == 0 { max } else { d.n_max.min(max) };
    if d.inject_chunk <= n_draft {
        return Err(Error::Usage(format!(
            "--spec-draft-ubatch {} must exceed the drafts per cycle ({n_draft})",
            d.inject_chunk
        )));
    }
    // The position window: the drafter's trained context (or -cd) when below the target's.
    let rows = match (d.ctx, d.window) {
        (Some(cd), _) => cd,
        (None, true) => meta.hp.n_ctx_train,
        (None, false) => n_ctx,
    };
    let window = if rows >= n_ctx {
        None
    } else if !d.window {
        return Err(Error::Usage(format!(
            "-cd {rows} is below -c {n_ctx} but --spec-no-window keeps every row: raise -cd"
        )));
    } else if rows <= d.inject_chunk {
        return Err(Error::Usage(format!(
            "a drafter window of {rows} rows must exceed --spec-draft-ubatch {}",
            d.inject_chunk
        )));
    } else {
        Some(rows)
    };
    Ok(DraftParams {
        n_draft,
        inject_chunk: d.inject_chunk,
        type_k: d.type_k,
        type_v: d.type_v,
        window,
    })
}
