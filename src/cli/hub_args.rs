//! `-hf USER/REPO[:QUANT]` (`--hf-repo`), `--hf-file FILE`, `--hf-token TOKEN` on every run
//! command, as llama.cpp spells them: the model comes from the Hugging Face Hub into the model
//! store (docs/MODELS.md), and `-m` is set to it.

use std::path::PathBuf;

use crate::store::{hub, HfRef, HubOptions};
use crate::Result;

/// The Hub flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct HubArgs {
    /// A model on the Hugging Face Hub: USER/REPO[:QUANT] (default quant: Q4_K_M, else Q8_0,
    /// else the first GGUF) or hf://USER/REPO/FILE; fetched into the model store, verified, and
    /// run from there (offline once fetched). `HF_ENDPOINT` names another Hub.
    #[arg(long = "hf-repo", value_name = "USER/REPO[:QUANT]")]
    pub hf_repo: Option<String>,
    /// The file in the repository, instead of a quant (llama.cpp's `-hff`).
    #[arg(long = "hf-file", value_name = "FILE", requires = "hf_repo")]
    pub hf_file: Option<String>,
    /// Access token for gated or private repositories (default: `HF_TOKEN`).
    #[arg(long = "hf-token", value_name = "TOKEN")]
    pub hf_token: Option<String>,
}

impl HubArgs {
    /// The model file `-hf` names, fetched when missing; `None` without `-hf`.
    pub fn resolve(&self) -> Result<Option<PathBuf>> {
        let Some(spec) = &self.hf_repo else {
            return Ok(None);
        };
        let r = HfRef::parse(spec, self.hf_file.as_deref())?;
        let opts = HubOptions {
            token: self.hf_token.clone(),
            progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            recheck: false,
        };
        let (path, _) = hub::fetch(&r, &opts)?;
        Ok(Some(path))
    }
}
