//! DSpark speculative decoding (docs/DSPARK.md): the drafter on the device ([`dspark`]), what
//! the scheduler asks of any drafter ([`drafter`]), verification and acceptance ([`accept`]),
//! the verify-length policies ([`schedule`]), the bypass to plain decoding ([`bypass`]), the
//! generation loop ([`generate`]) and its counters ([`stats`]).

pub mod accept;
pub mod adversarial;
pub mod bypass;
pub mod drafter;
pub mod dspark;
pub mod generate;
pub mod profile;
pub mod schedule;
pub mod stats;

pub use drafter::Drafter;
pub use generate::{generate, SpecOptions, VerifyPolicy};
pub use stats::SpecStats;
