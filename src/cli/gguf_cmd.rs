//! `flint gguf strip IN.gguf OUT.gguf`: write a shape-only copy of a model (metadata and tensor
//! infos, no tensor data), small enough to share, which `flint plan` and `flint info` accept.
//! `flint gguf preset NAME OUT [--weights random --seed S]`: a model from published dimensions,
//! shape-only or complete with random weights (streamed to the file).

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::gguf::GgufFile;
use crate::model::{byte_vocab, presets, random_weights};
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
    /// Write a GGUF from published dimensions: shape-only, or with random weights
    /// (`flint gguf preset --list` prints the preset names).
    Preset {
        /// The preset (`--list` prints them).
        #[arg(required_unless_present = "list")]
        name: Option<String>,
        /// Where to write the GGUF.
        #[arg(required_unless_present = "list")]
        output: Option<PathBuf>,
        /// `shape` (metadata and shapes only, for `plan` and `info`) or `random` (a complete
        /// model: random weights of realistic magnitude and a byte-level vocabulary).
        #[arg(long, value_enum, default_value = "shape")]
        weights: PresetWeights,
        /// Seed of the random weights (the same seed writes the same file).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Print the presets and exit.
        #[arg(long)]
        list: bool,
    },
}

/// What `flint gguf preset` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PresetWeights {
    Shape,
    Random,
}

pub fn run(args: &GgufArgs) -> Result<()> {
    match &args.command {
        GgufCommand::Strip { input, output } => strip(input, output),
        GgufCommand::Preset {
            name,
            output,
            weights,
            seed,
            list,
        } => {
            if *list {
                println!("{}", presets::PRESETS.join("\n"));
                return Ok(());
            }
            let (Some(name), Some(output)) = (name, output) else {
                return Err(Error::Usage(
                    "gguf preset needs NAME and OUT (`flint gguf preset --list` prints the names)"
                        .into(),
                ));
            };
            preset(name, output, *weights, *seed)
        }
    }
}

/// Writes preset `name` to `output`; with random weights through a temporary file renamed into
/// place, so an interrupted run leaves no partial model under the final name.
fn preset(name: &str, output: &Path, weights: PresetWeights, seed: u64) -> Result<()> {
    let mut w = presets::preset_writer(name).ok_or_else(|| {
        Error::Usage(format!(
            "unknown preset {name:?}; known: {}",
            presets::PRESETS.join(", ")
        ))
    })??;
    let io = |source| Error::Io {
        context: format!("writing {}", output.display()),
        source,
    };
    if weights == PresetWeights::Shape {
        return std::fs::write(output, w.to_bytes()?).map_err(io);
    }
    let arch = crate::gguf::Gguf::parse(&w.to_bytes()?)?;
    let is_drafter = arch
        .metadata
        .architecture()
        .is_ok_and(|a| crate::model::Arch::from_name(a).is_some_and(|a| a.is_drafter()));
    if !is_drafter {
        let n_vocab = crate::model::Hparams::from_gguf(&arch)?.n_vocab;
        byte_vocab::set_byte_tokenizer(&mut w, n_vocab);
        if let Some(t) = presets::chat_template(name) {
            w.set(
                "tokenizer.chat_template",
                crate::gguf::MetaValue::String(t.into()),
            );
        }
    }
    let header = w.to_bytes()?;
    let mut tmp = output.as_os_str().to_owned();
    tmp.push(".part");
    let tmp = PathBuf::from(tmp);
    let file = std::fs::File::create(&tmp).map_err(io)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let n = random_weights::write_random(&header, &mut out, seed)?;
    out.flush().map_err(io)?;
    drop(out);
    std::fs::rename(&tmp, output).map_err(io)?;
    eprintln!(
        "{}: preset {name}, random weights (seed {seed}), {n} bytes",
        output.display()
    );
    Ok(())
}

fn strip(input: &std::path::Path, output: &std::path::Path) -> Result<()> {
    let file = GgufFile::open(input)?;
    if file.is_split() {
        return Err(Error::Usage(format!(
            "{}: a split model ({} files); strip works on a single file",
            input.display(),
            file.paths().len()
        )));
    }
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
