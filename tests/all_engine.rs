//! Tests of the engine: batched steps, speculative decoding, rollback, sampling, grammars.
//!
//! One binary per area: every test binary links the whole crate, so a binary per file made
//! the test build ten times larger (and slower to link) than one per area.

mod common;

mod batch_fault;
mod batch_forward;
mod batch_hybrid;
mod batch_spec;
mod default_drafter;
mod gbnf;
mod profile_batched;
mod recurrent_log;
mod sampling;
mod spec_accept;
mod spec_deferred;
mod spec_dspark;
mod spec_equivalence;
mod spec_logsnr;
mod spec_mtp;
mod spec_qwen35;
mod spec_rollback;
