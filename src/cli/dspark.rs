//! `flint dspark init -m TARGET -o FILE`: write a random DSpark drafter for a target
//! ([`crate::model::drafter_init`]), in the `dflash` format or (`--legacy`) the PrismML `dspark`
//! format, then read it back and print what it holds.

use std::path::PathBuf;

use crate::gguf::{GgmlType, GgufFile};
use crate::model::drafter_init::{random_drafter, InitOptions};
use crate::model::DrafterMeta;
use crate::{Error, Result};

/// Arguments of `flint dspark`.
#[derive(Debug, clap::Args)]
pub struct DsparkArgs {
    #[command(subcommand)]
    pub command: DsparkCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum DsparkCommand {
    /// Write a random drafter (seeded weights) at the target's dimensions.
    Init(InitArgs),
}

/// Matrix types `init` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MatrixType {
    F16,
    F32,
}

#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The target model (its dimensions, vocabulary and layer count).
    #[arg(short = 'm', long = "model")]
    pub model: PathBuf,
    /// The drafter file to write.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Drafter layers.
    #[arg(long, default_value_t = 1)]
    pub layers: u32,
    /// γ: draft slots per block.
    #[arg(long, default_value_t = 4)]
    pub block: u32,
    /// Markov head rank (0: no Markov head).
    #[arg(long, default_value_t = 64)]
    pub rank: u32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Tapped target layers, layer-input convention, ascending (default: 4 spread evenly).
    #[arg(long, value_delimiter = ',')]
    pub taps: Option<Vec<u32>>,
    /// Write the legacy PrismML `dspark` format instead of `dflash`.
    #[arg(long)]
    pub legacy: bool,
    /// Matrix type (norms are always F32).
    #[arg(long = "type", value_enum, default_value_t = MatrixType::F16)]
    pub ty: MatrixType,
    /// Leave out the confidence head.
    #[arg(long = "no-confidence")]
    pub no_confidence: bool,
}

pub fn run(args: &DsparkArgs) -> Result<()> {
    match &args.command {
        DsparkCommand::Init(a) => init(a),
    }
}

fn init(a: &InitArgs) -> Result<()> {
    let target = GgufFile::open(&a.model)?;
    let opts = InitOptions {
        layers: a.layers,
        block: a.block,
        rank: a.rank,
        seed: a.seed,
        confidence: !a.no_confidence,
        taps: a.taps.clone(),
        legacy: a.legacy,
        ty: match a.ty {
            MatrixType::F16 => GgmlType::F16,
            MatrixType::F32 => GgmlType::F32,
        },
    };
    let w = random_drafter(&target, &opts)?;
    w.write_file(&a.output)?;
    let file = GgufFile::open(&a.output)?;
    let meta = DrafterMeta::from_gguf(&file).map_err(Error::from)?;
    println!(
        "{}: {} bytes, {} tensors, {} format ({}), {} layers of d {}, block {}, Markov rank {}, \
         confidence head {}, taps {:?} (layer-input convention), mask token {}, seed {}",
        a.output.display(),
        file.file_len(),
        file.tensors.len(),
        meta.hp.arch.name(),
        if a.legacy {
            "legacy PrismML"
        } else {
            "llama.cpp"
        },
        meta.hp.n_layer,
        meta.hp.n_embd,
        meta.block_size,
        meta.markov_rank,
        if meta.has_confidence { "yes" } else { "no" },
        meta.target_layers,
        meta.mask_token_id
            .map_or_else(|| "none".to_string(), |m| m.to_string()),
        a.seed,
    );
    Ok(())
}
