//! `flint pull [NAME]`: fetch a known model (models/manifest.tsv) into the model store and verify
//! its sha256; a file already there with the right hash is kept (docs/MODELS.md).

use crate::engine::DEFAULT_MODEL_NAME;
use crate::store::{self, Pulled};
use crate::Result;

#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// The model's name in the manifest (`flint models --known` lists them).
    #[arg(default_value = DEFAULT_MODEL_NAME)]
    pub name: String,
}

pub fn run(args: &PullArgs) -> Result<()> {
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (path, how) = store::pull(&args.name, progress)?;
    let how = match how {
        Pulled::Present => "present",
        Pulled::Fetched => "fetched",
    };
    println!("{}: {how}, sha256 ok", path.display());
    Ok(())
}
