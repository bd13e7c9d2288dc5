//! `flint pull [NAME]`: fetch a model into the model store and verify its sha256 (docs/MODELS.md):
//! a known model (models/manifest.tsv), or one from the Hugging Face Hub by
//! `USER/REPO[:QUANT]` or `hf://USER/REPO/FILE`. A file already there with the right hash is
//! kept.

use crate::engine::DEFAULT_MODEL_NAME;
use crate::store::{self, hub, HfRef, HubOptions, Pulled};
use crate::Result;

#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// A known model's name (`flint models --known` lists them), USER/REPO[:QUANT] or
    /// hf://USER/REPO/FILE (the Hugging Face Hub, or `HF_ENDPOINT`).
    #[arg(default_value = DEFAULT_MODEL_NAME)]
    pub name: String,
    /// The file in the Hub repository, instead of a quant.
    #[arg(long = "hf-file", value_name = "FILE")]
    pub hf_file: Option<String>,
    /// Access token for gated or private repositories (default: `HF_TOKEN`).
    #[arg(long = "hf-token", value_name = "TOKEN")]
    pub hf_token: Option<String>,
}

pub fn run(args: &PullArgs) -> Result<()> {
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let from_hub = args.name.contains('/') || args.hf_file.is_some();
    let (path, how) = if from_hub {
        let r = HfRef::parse(&args.name, args.hf_file.as_deref())?;
        let opts = HubOptions {
            token: args.hf_token.clone(),
            progress,
            recheck: true,
        };
        hub::fetch(&r, &opts)?
    } else {
        store::pull(&args.name, progress)?
    };
    let how = match how {
        Pulled::Present => "present",
        Pulled::Fetched => "fetched",
    };
    println!("{}: {how}, sha256 ok", path.display());
    Ok(())
}
