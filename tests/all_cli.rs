//! Tests of the command line, memory plans, benches, chat templates and tokenizers.
//!
//! One binary per area: every test binary links the whole crate, so a binary per file made
//! the test build ten times larger (and slower to link) than one per area.

mod common;
#[path = "common/vocab_gguf.rs"]
mod vocab_gguf;

mod architecture;
mod bench;
mod bench_spec;
mod chat_template;
mod chat_template_names;
mod cli_compile_stats;
mod cli_first_run;
mod cli_info;
mod cli_llama_flags;
mod memory_budget;
mod memory_plan;
mod memory_plan_gemma4;
mod memory_plan_hybrid;
mod memory_plan_seed_drafter;
mod plan_placement;
mod plan_slots;
mod tokenizer;
mod tokenizer_bpe;
mod tokenizer_eog;
mod tokenizer_gemma3;
mod tokenizer_qwen35;
mod tokenizer_spm;
mod tokenizer_stream;
