//! Speculative-decoding flags shared by `generate` and `chat` (llama.cpp's names): the drafter
//! model, the speculation type, drafts per cycle, the confidence threshold, the drafter's
//! context and injection chunk, its KV types, and `--no-spec`.

use std::path::{Path, PathBuf};

use crate::engine::{DraftOptions, DEFAULT_DRAFTER, DEFAULT_MODEL};
use crate::{Error, Result};

#[derive(Debug, Clone, clap::Args)]
pub struct SpecArgs {
    /// DSpark drafter GGUF (`-md`; `dflash` or legacy `dspark` format). Default with the default
    /// model in `generate` and `chat`: its shipped drafter (models/, train/dspark/).
    #[arg(long = "spec-draft-model", visible_alias = "model-draft")]
    pub draft_model: Option<PathBuf>,
    /// Speculation type: `draft-dspark` (a DSpark drafter, `-md`) or `draft-mtp` (the MTP
    /// layer a qwen35 / qwen35moe file carries).
    #[arg(long = "spec-type", default_value = "draft-dspark")]
    pub spec_type: String,
    /// Drafts verified per cycle at most (0 = the drafter's block size; 3 with draft-mtp).
    #[arg(long = "spec-draft-n-max", default_value_t = 0)]
    pub n_max: u32,
    /// Stop a block at the first draft whose confidence is below this (0 = off; needs a
    /// confidence head).
    #[arg(long = "spec-draft-p-min", default_value_t = 0.0)]
    pub p_min: f32,
    /// Choose the verify length with the paper's Algorithm 1 over SPS(B) measured at start-up.
    #[arg(long = "spec-schedule")]
    pub schedule: bool,
    /// Drafter context (`-cd`; default: its trained context, or `-c` when smaller): below `-c`
    /// the drafter's positions are kept inside a window of this many rows.
    #[arg(long = "ctx-size-draft")]
    pub ctx_draft: Option<u32>,
    /// Rows per drafter injection chunk (`U`); the target's prefill ubatch is capped to it.
    #[arg(long = "spec-draft-ubatch", default_value_t = 512)]
    pub inject_chunk: u32,
    /// Drafter K cache type (`-ctkd`).
    #[arg(long = "cache-type-k-draft", default_value = "f16")]
    pub draft_type_k: String,
    /// Drafter V cache type (`-ctvd`).
    #[arg(long = "cache-type-v-draft", default_value = "f16")]
    pub draft_type_v: String,
    /// Let drafter positions run past its trained context instead of rebasing them into a
    /// window.
    #[arg(long = "spec-no-window")]
    pub no_window: bool,
    /// Always draft, even while drafting does not pay.
    #[arg(long = "spec-no-bypass")]
    pub no_bypass: bool,
    /// Decode without a drafter, the default model's shipped one included.
    #[arg(long = "no-spec")]
    pub no_spec: bool,
}

impl SpecArgs {
    /// The drafter `-md` names; else, when `default_drafter` and the target is the default
    /// model, the shipped drafter ([`DEFAULT_DRAFTER`], when present).
    fn drafter_path(&self, target: &Path, default_drafter: bool) -> Option<PathBuf> {
        if let Some(m) = &self.draft_model {
            return Some(m.clone());
        }
        if !default_drafter || target != Path::new(DEFAULT_MODEL) {
            return None;
        }
        let path = PathBuf::from(DEFAULT_DRAFTER);
        if path.exists() {
            Some(path)
        } else {
            eprintln!("note: {DEFAULT_DRAFTER} is missing; decoding without speculation");
            None
        }
    }

    /// The drafter options, or `None` without a drafter or with `--no-spec`. `target` is the
    /// `-m` path; `default_drafter` lets the default model bring its shipped drafter.
    pub fn draft_options(
        &self,
        kv: impl Fn(&str, &str) -> Result<crate::gguf::GgmlType>,
        target: &Path,
        default_drafter: bool,
    ) -> Result<Option<DraftOptions>> {
        // A type flint cannot honour is refused by name, with or without a drafter: never a
        // plain decode that looks like speculation.
        let mtp = match self.spec_type.as_str() {
            "draft-dspark" => false,
            "draft-mtp" => true,
            other => {
                return Err(Error::Usage(format!(
                    "--spec-type {other}: not supported by flint (it speculates with \
                     draft-dspark or draft-mtp)"
                )))
            }
        };
        if self.no_spec {
            return Ok(None);
        }
        if mtp {
            if let Some(md) = &self.draft_model {
                return Err(Error::Usage(format!(
                    "--spec-type draft-mtp drafts with the MTP layer of -m itself; a separate \
                     MTP file (-md {}) is not supported",
                    md.display()
                )));
            }
            // llama.cpp's default for --spec-draft-n-max.
            let n_max = if self.n_max == 0 { 3 } else { self.n_max };
            return Ok(Some(DraftOptions::mtp(target.to_path_buf(), n_max)));
        }
        let Some(model) = self.drafter_path(target, default_drafter) else {
            return Ok(None);
        };
        if !(0.0..1.0).contains(&self.p_min) {
            return Err(Error::Usage(format!(
                "--spec-draft-p-min {}: must be in [0, 1)",
                self.p_min
            )));
        }
        if self.ctx_draft == Some(0) {
            return Err(Error::Usage("-cd 0: the drafter needs context rows".into()));
        }
        Ok(Some(DraftOptions {
            model,
            n_max: self.n_max,
            p_min: self.p_min,
            inject_chunk: self.inject_chunk,
            type_k: kv("-ctkd", &self.draft_type_k)?,
            type_v: kv("-ctvd", &self.draft_type_v)?,
            schedule: self.schedule,
            ctx: self.ctx_draft,
            window: !self.no_window,
            bypass: !self.no_bypass,
            mtp: false,
        }))
    }
}
