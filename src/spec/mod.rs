//! DSpark speculative decoding (dspark-spec.md): verification and acceptance, the verify-length
//! policies and the host scheduler that drives a drafter and the target.

pub mod accept;
pub mod bypass;
pub mod schedule;
