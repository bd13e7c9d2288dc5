//! `flint gguf strip IN.gguf OUT.gguf`: write a shape-only copy of a model (metadata and tensor
//! infos, no tensor data), small enough to share, which `flint plan` and `flint info` accept.

use std::io::Write;
use std::path::PathBuf;

use crate::gguf::GgufFile;
use crate::{Error, Result};

/// Arguments of `flint gguf`.
#[derive(Debug, clap::Args)]
pub struct GgufArgs {
    #[command(subcommand)]
    pub command: GgufCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum GgufCommand {
    /// Keep metadata and shapes, drop the tensor data (the file ends at the data offset).
    Strip { input: PathBuf, output: PathBuf },
    /// Write a shape-only GGUF from published dimensions (see `flint gguf preset --list`).
    Preset {
        /// qwen3-8b-q4_k_m, qwen3-8b-dspark-q8_0, bonsai-27b-dspark-q4_1.
        name: String,
        output: PathBuf,
    },
}

pub fn run(args: &GgufArgs) -> Result<()> {
    match &args.command {
        GgufCommand::Strip { input, output } => strip(input, output),
        GgufCommand::Preset { name, output } => {
            let bytes = crate::model::presets::preset(name).ok_or_else(|| {
                Error::Usage(format!(
                    "unknown preset {name:?}; known: {}",
                    crate::model::presets::PRESETS.join(", ")
                ))
            })??;
            std::fs::write(output, &bytes).map_err(|source| Error::Io {
                context: format!("writing {}", output.display()),
                source,
            })
        }
    }
}

fn strip(input: &std::path::Path, output: &std::path::Path) -> Result<()> {
    let file = GgufFile::open(input)?;
    let end = usize::try_from(file.data_offset).unwrap_or(usize::MAX);
    let header = file.bytes().get(..end).ok_or_else(|| {
        Error::Usage(format!(
            "{}: data offset past the end of the file",
            input.display()
        ))
    })?;
    let io = |source| Error::Io {
        context: format!("writing {}", output.display()),
        source,
    };
    let mut out = std::fs::File::create(output).map_err(io)?;
    out.write_all(header).map_err(io)?;
    eprintln!(
        "{}: {} tensors, {} bytes of metadata and shapes (was {} bytes)",
        output.display(),
        file.tensors.len(),
        header.len(),
        file.file_len()
    );
    Ok(())
}
