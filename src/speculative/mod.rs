//! Speculative decoding (docs/DSPARK.md, docs/MTP.md): the DSpark drafter on the device
//! ([`dspark`]), the MTP drafter of a file's own `nextn` block ([`mtp`]), what
//! the scheduler asks of any drafter ([`drafter`]), verification and acceptance ([`accept`]),
//! the verify-length schedules ([`schedule`]) and policies ([`policy`]), the bypass to plain
//! decoding ([`bypass`]) and the counters ([`stats`]). The generation loops that drive a
//! drafter belong to the engine (`engine::speculate`, `engine::batch_run`): this module
//! imports nothing to its right.

pub mod accept;
pub mod adversarial;
pub mod bypass;
pub mod drafter;
pub mod dspark;
pub mod mtp;
pub mod policy;
pub mod profile;
pub mod schedule;
pub mod stats;

pub use drafter::Drafter;
pub use policy::{SpecOptions, VerifyPolicy};
pub use stats::SpecStats;
