//! What a load starts from, made once per run ([`open`]): the `-m` file checked as a model
//! flint can run, parsed and shape-checked; the drafter file with its metadata; the device
//! chosen and created; the memory budget and limits every plan of the run is checked against.
//! Fitting the context ([`super::fit`]) and the load ([`super::Engine::from_opened`]) read the
//! same [`Opened`], so the plan that picks the context is the plan that is allocated.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::gguf::GgufFile;
use crate::gpu::{DeviceOptions, GpuContext};
use crate::memory::{Budget, DeviceLimits, DrafterShape, TargetShape};
use crate::model::{shapes, Arch, DrafterMeta, Hparams};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

use super::{resolve_model, EngineOptions};

/// The device, the model file with its hyperparameters and tokenizer, the drafter file with
/// its metadata, and the budget and limits the run plans against.
pub struct Opened {
    pub ctx: Arc<GpuContext>,
    /// The resolved `-m` path (the store's copy for the default model).
    pub model_path: PathBuf,
    pub file: GgufFile,
    pub hp: Hparams,
    pub tok: Tokenizer,
    pub drafter: Option<(GgufFile, DrafterMeta)>,
    /// `--gpu-mem`, else what the device reports, resolved once for the run.
    pub budget: Budget,
    pub limits: DeviceLimits,
    /// `--device`, to make the device again with host storage ([`Opened::for_plan`]).
    pub device: Option<usize>,
}

/// Opens `opts.model` (and `opts.draft`'s file) and the device: the model is checked before
/// the device is made, so a wrong `-m` is named whatever the device.
pub fn open(opts: &EngineOptions) -> Result<Opened> {
    let model_path = resolve_model(&opts.model)?;
    let file = open_model(&model_path)?;
    let hp = Hparams::from_gguf(&file)?;
    // Every weight held to the hyperparameters before a plan reads its bytes.
    shapes::check_shapes(&file, &hp)?;
    let tok = Tokenizer::from_gguf(&file)?;
    if opts.draft.as_ref().is_some_and(|d| d.mtp) {
        // Refused before the device is made: a file without an MTP block, or a malformed one.
        crate::speculative::mtp::mtp_layer(&hp, &file)?;
    }
    let drafter = match &opts.draft {
        // The MTP block is in the model file itself (`super::mtp`).
        Some(d) if !d.mtp => {
            let f = GgufFile::open(&d.model)?;
            let meta = DrafterMeta::from_gguf(&f)?;
            shapes::check_drafter_shapes(&f, &meta)?;
            Some((f, meta))
        }
        _ => None,
    };
    let ctx = Arc::new(GpuContext::new(&DeviceOptions {
        index: opts.device,
        ..DeviceOptions::default()
    })?);
    let budget = Budget::resolve(opts.gpu_mem, Some(&ctx));
    let limits = DeviceLimits::from_context(&ctx);
    Ok(Opened {
        ctx,
        model_path,
        file,
        hp,
        tok,
        drafter,
        budget,
        limits,
        device: opts.device,
    })
}

/// Opens `path` as a model flint can run: not a directory, a DSpark drafter, a shape-only file
/// or a file without a vocabulary, each refused with its own error.
pub fn open_model(path: &Path) -> Result<GgufFile> {
    let shown = path.display().to_string();
    if path.is_dir() {
        return Err(Error::ModelIsDirectory { path: shown });
    }
    let file = GgufFile::open(path)?;
    if let Ok(arch) = file.metadata.architecture() {
        if Arch::from_name(arch).is_some_and(Arch::is_drafter) {
            return Err(Error::ModelIsDrafter {
                path: shown,
                arch: arch.to_string(),
            });
        }
    }
    if file.shape_only {
        return Err(Error::ModelHasNoWeights { path: shown });
    }
    if let Ok(tokenizer) = file.metadata.str("tokenizer.ggml.model") {
        if tokenizer == "none" {
            return Err(Error::ModelHasNoVocab {
                path: shown,
                tokenizer: tokenizer.to_string(),
            });
        }
    }
    Ok(file)
}

impl Opened {
    pub fn target(&self) -> TargetShape<'_> {
        TargetShape {
            hp: &self.hp,
            tensors: &self.file.tensors,
        }
    }

    pub fn drafter_shape(&self) -> Option<DrafterShape<'_>> {
        self.drafter.as_ref().map(|(f, meta)| DrafterShape {
            meta,
            tensors: &f.tensors,
        })
    }

    pub fn drafter_meta(&self) -> Option<&DrafterMeta> {
        self.drafter.as_ref().map(|(_, m)| m)
    }

    /// The device `plan` runs on: when the plan puts weights in host memory and the device was
    /// made without host storage buffers, the same adapter again with
    /// `MAPPABLE_PRIMARY_BUFFERS` (requested only then; a typed error if it lacks it).
    pub fn for_plan(mut self, plan: &crate::memory::Plan) -> Result<Opened> {
        let host = plan.host_total() > 0;
        if host && !crate::gpu::host_buffers::supported(&self.ctx) {
            let opts = DeviceOptions {
                index: Some(self.ctx.info().index),
                ..DeviceOptions::default()
            };
            self.ctx = Arc::new(GpuContext::with_features(
                &opts,
                crate::gpu::host_buffers::FEATURE,
            )?);
        }
        Ok(self)
    }

    /// The run without its drafter (`generate` leaves out one that cannot pay).
    pub fn without_drafter(mut self) -> Opened {
        self.drafter = None;
        self
    }
}
