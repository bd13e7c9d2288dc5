//! `flint dspark init -m TARGET -o FILE`: write a random DSpark drafter for a target
//! ([`crate::model::drafter_init`]), in the `dflash` format or (`--legacy`) the PrismML `dspark`
//! format, then read it back and print what it holds. `--log-snr` adds log-SNR conditioning,
//! `--no-vocab` leaves the vocabulary out (`tokenizer.ggml.model = none`, the size only),
//! `--own-embd` writes the drafter's own `token_embd` / `output`, and `--fc-type`,
//! `--embd-type`, `--markov-type` pick those matrices' types (e.g. `--fc-type q2_0-g128`,
//! PrismML's legacy 128-element Q2_0, for widths that are multiples of 128).

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
    Bf16,
    #[value(name = "q4_1")]
    Q4_1,
    /// ggml's 64-element Q2_0.
    #[value(name = "q2_0")]
    Q2_0,
    /// PrismML's legacy 128-element Q2_0 (same type id 42).
    #[value(name = "q2_0-g128")]
    Q2_0G128,
}

impl MatrixType {
    pub fn ggml(self) -> GgmlType {
        match self {
            MatrixType::F16 => GgmlType::F16,
            MatrixType::F32 => GgmlType::F32,
            MatrixType::Bf16 => GgmlType::BF16,
            MatrixType::Q4_1 => GgmlType::Q4_1,
            MatrixType::Q2_0 => GgmlType::Q2_0,
            MatrixType::Q2_0G128 => GgmlType::Q2_0_G128,
        }
    }
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
    /// `fc`'s type (default: --type).
    #[arg(long = "fc-type", value_enum)]
    pub fc_type: Option<MatrixType>,
    /// `token_embd` / `output` type, with --own-embd (default: --type).
    #[arg(long = "embd-type", value_enum)]
    pub embd_type: Option<MatrixType>,
    /// The Markov head's type (default: --type).
    #[arg(long = "markov-type", value_enum)]
    pub markov_type: Option<MatrixType>,
    /// Write the drafter's own `token_embd` and `output` (else it borrows the target's).
    #[arg(long = "own-embd")]
    pub own_embd: bool,
    /// Log-SNR conditioning (PrismML GIDD drafters; range −9..9).
    #[arg(long = "log-snr")]
    pub log_snr: bool,
    /// No vocabulary: `tokenizer.ggml.model = none` and the vocabulary size only.
    #[arg(long = "no-vocab")]
    pub no_vocab: bool,
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
        ty: a.ty.ggml(),
        fc_ty: a.fc_type.map(MatrixType::ggml),
        embd_ty: a.embd_type.map(MatrixType::ggml),
        markov_ty: a.markov_type.map(MatrixType::ggml),
        own_embd: a.own_embd,
        log_snr: a.log_snr,
        no_vocab: a.no_vocab,
    };
    let w = random_drafter(&target, &opts)?;
    w.write_file(&a.output)?;
    let file = GgufFile::open(&a.output)?;
    let meta = DrafterMeta::from_gguf(&file).map_err(Error::from)?;
    println!(
        "{}: {} bytes, {} tensors, {} format ({}), {} layers of d {}, block {}, Markov rank {}, \
         confidence head {}, taps {:?} (layer-input convention), mask token {}, log-SNR {}, \
         vocabulary {} ({}), seed {}",
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
        meta.log_snr
            .map_or_else(|| "no".to_string(), |r| format!("{}..{}", r.min, r.max)),
        meta.hp.n_vocab,
        if a.no_vocab {
            "tokenizer none"
        } else {
            "the target's tokenizer"
        },
        a.seed,
    );
    Ok(())
}
