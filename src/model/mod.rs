//! Models: hyperparameters from GGUF metadata, the drafter's own metadata, and (to come) weights
//! upload and one forward file per architecture.

pub mod byte_vocab;
pub mod drafter_init;
pub mod drafter_meta;
pub mod forward;
pub mod gemma3;
pub mod gemma4;
mod gemma4_shapes;
pub mod hparams;
pub mod hybrid;
pub mod mixer;
pub mod moe;
pub mod presets;
pub mod random_weights;
pub mod shapes;
pub mod weights;

pub use drafter_meta::{tensor_name as drafter_tensor_name, DrafterMeta, DRAFTER_TENSORS};
pub use hparams::{Arch, Hparams, HparamsError};
