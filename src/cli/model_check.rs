//! What the run commands (`generate`, `chat`, `serve`, `bench`) do before loading a model: check
//! that `-m` names a model they can run (not a directory, a DSpark drafter, a shape-only file or
//! a file without a vocabulary), each refused with its own error, and print the device line.

use std::path::Path;

use crate::gguf::GgufFile;
use crate::model::Arch;
use crate::{Error, Result};

/// Checks the `-m` model (the default one is resolved before, `cli::run`), then prints
/// the adapter, backend and driver the run will use on stderr.
pub fn prepare(model: &Path, device: Option<usize>) -> Result<()> {
    check_model(model)?;
    announce_device(device);
    Ok(())
}

/// Refuses a `-m` path that is not a model flint can run, naming what it is instead.
pub fn check_model(path: &Path) -> Result<()> {
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
    Ok(())
}

/// Prints the device line (and, on GL, what that costs and what to install) on stderr. Errors
/// are left to the device creation that follows, which reports them.
pub fn announce_device(device: Option<usize>) {
    if let Ok(Some(adapter)) = crate::gpu::adapters::selected_adapter(device) {
        eprintln!("{}", crate::gpu::adapters::device_line(&adapter));
        if let Some(note) = crate::gpu::adapters::gl_note(&adapter) {
            eprintln!("{note}");
        }
    }
}
