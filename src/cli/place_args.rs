//! Weight placement flags of the run commands (llama.cpp's spellings; `memory::placement`):
//! `-ot/--override-tensor PATTERN=CPU|GPU,…`, `--cpu-moe`, `--n-cpu-moe N`. `CPU` puts a tensor
//! in host memory that the GPU reads directly; flint computes nothing on the CPU.

use crate::memory::placement::{rules, PlacementRules};
use crate::{Error, Result};

/// Where weights live (`flint plan`, `generate`, `chat`, `serve`, `bench`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PlaceArgs {
    /// Tensors whose name matches a regex go to host memory (`CPU`) or stay on the device
    /// (any other buffer type), e.g. `exps=CPU` (`-ot`; comma-separated, repeatable; the
    /// first match wins). The GPU reads host tensors over the bus; nothing runs on the CPU.
    #[arg(long = "override-tensor", value_name = "PATTERN=TYPE,...")]
    pub override_tensor: Vec<String>,
    /// Every layer's routed experts in host memory (`-cmoe`).
    #[arg(long = "cpu-moe")]
    pub cpu_moe: bool,
    /// The routed experts of the first N layers in host memory (`-ncmoe`).
    #[arg(long = "n-cpu-moe", value_name = "N")]
    pub n_cpu_moe: Option<u32>,
}

impl PlaceArgs {
    /// The rules; none of the flags: automatic (experts move to the host, last layer first,
    /// only when the weights do not fit).
    pub fn rules(&self) -> Result<PlacementRules> {
        rules(&self.override_tensor, self.cpu_moe, self.n_cpu_moe)
            .map_err(|e| Error::Usage(e.to_string()))
    }
}
