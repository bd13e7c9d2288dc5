//! Tests of model forwards, architectures, weight types and the CPU reference against llama.cpp and gguf-py.
//!
//! One binary per area: every test binary links the whole crate, so a binary per file made
//! the test build ten times larger (and slower to link) than one per area.

mod common;

mod gemma3_llamacpp;
mod gemma4_llamacpp;
mod gguf_preset_random;
mod gguf_roundtrip;
mod model_arch;
mod model_forward;
mod model_ggml_quantized;
mod model_iquant;
mod model_iquant_llama;
mod model_qwen35;
mod model_qwen35_llamacpp;
mod model_shapes;
mod model_store;
mod model_ternary;
mod model_yarn;
mod moe_batch;
mod moe_forward;
mod moe_hparams;
mod moe_kernels;
mod moe_placement;
mod moe_plan;
mod moe_reference;
mod moe_spec;
mod presets_bonsai;
mod reference_dspark;
mod reference_forward;
mod reference_independent;
mod reference_meta;
mod reference_qwen35;
mod seed_scenario;
