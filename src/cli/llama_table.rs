//! The table of llama.cpp's command-line spellings (the flags its `common/arg.cpp` defines, for
//! llama-cli, llama-completion, llama-server and its other tools) and what each one does on
//! flint: mapped to flint's long flag, accepted with a note because it means nothing here,
//! refused with the reason flint cannot honour it, or asked of the wrong subcommand. `values`
//! is how many words follow the flag on llama.cpp's command line, which tells a flag's value
//! from the next flag. `tests/cli_llama_flags.rs` holds this table to the spellings listed in
//! `tests/data/llama_cpp/llama_cpp_flags.tsv` (extracted from llama.cpp's own source).

/// What a llama.cpp spelling does on flint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Rewritten to this flint long flag (its values follow unchanged).
    Map(&'static str),
    /// Rewritten to this flint long flag with this value (`--stdin` → `--file -`).
    MapWith(&'static str, &'static str),
    /// Accepted, with its values, and a one-line note on stderr: it means nothing on flint.
    Note(&'static str),
    /// Refused, with the reason.
    Refuse(&'static str),
    /// Asks for (`true`) or against (`false`) conversation mode: a note in the subcommand
    /// that already is that (`flint chat` / the others), a refusal pointing to it elsewhere.
    Conversation(bool),
}

/// One llama.cpp flag: its spellings, how many values follow it, what flint does with it.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub spellings: &'static [&'static str],
    pub values: u8,
    pub action: Action,
}

const fn e(spellings: &'static [&'static str], values: u8, action: Action) -> Entry {
    Entry {
        spellings,
        values,
        action,
    }
}

use Action::{Map, MapWith, Note, Refuse};

// Notes: the flag asks for something flint always does, or for a knob it does not have.
const GPU_ALL: &str = "flint runs every layer on the GPU";
const CPU: &str = "flint computes on the GPU; CPU threads and their scheduling do not apply";
const FA: &str = "flint's attention kernels are always fused (flash attention)";
const JINJA: &str = "flint always renders chat templates with Jinja";
const LOAD: &str =
    "flint reads the weights once into GPU memory; mmap, mlock and lazy loading do not apply";
const CB: &str = "flint serve always batches its slots continuously";
const LOG: &str = "flint logs to stderr; -v or RUST_LOG sets the level";
const UI: &str = "a llama-cli terminal setting; flint prints the text as generated";
const CACHE: &str = "flint serve keeps each slot's KV prefix for the next request; not tunable";
const OFFLOAD: &str = "flint keeps weights, KV cache and compute on the GPU";
const FIT: &str = "flint fits the context to the device's memory itself (see flint plan)";
const WARM: &str = "flint builds its GPU pipelines at load";
const PERF: &str = "flint prints its speed line after every generation";
const SLOTS: &str = "flint serve's /slots, /props and /metrics are fixed";
const KVU: &str = "flint's slots each have their own KV cache";
const NOOP: &str = "already flint's behaviour";
const TIMING: &str = "flint prints the timings on stderr";

// Refusals: the flag asks for something flint cannot do.
const PLACE: &str =
    "flint places only the target's tensors (-ot), in GPU memory or host memory the GPU reads";
const MOE: &str = "flint puts only the target's routed experts in host memory (--cpu-moe, --n-cpu-moe, -ot); the drafter and dense FFNs stay on the GPU";
const SPLIT: &str = "flint runs on one adapter; choose it with -dev NAME|INDEX (see flint devices)";
const LORA: &str = "flint does not apply LoRA adapters or control vectors";
const MM: &str = "flint runs text models only (no multimodal projector, images, audio or video)";
const SCHEMA_FILE: &str = "flint reads a schema file with --json-schema @FILE";
const SAMPLER: &str =
    "flint's samplers are temp, top-k, top-p, min-p and the repeat/presence/frequency penalties";
const ORDER: &str = "flint's sampler order is fixed: penalties, top-k, top-p, min-p, temperature";
const ROPE: &str = "flint takes RoPE and YaRN scaling from the model's GGUF metadata";
const SPEC: &str =
    "flint speculates with a DSpark drafter (-md) or the model's MTP block (--spec-type draft-mtp)";
const DRAFT_DEV: &str = "flint runs the drafter on the target's adapter";
const DRAFT_HF: &str = "-hf fetches the target model; pull the drafter and pass it with -md";
const PRESET: &str = "a llama.cpp preset that downloads a fixed model; use -hf USER/REPO[:QUANT]";
const SHIFT: &str =
    "flint does not shift the context: a generation stops at the end of the context";
const KV_HOST: &str = "flint keeps the KV cache in GPU memory";
const LOG_FILE: &str =
    "flint does not write prompts to a folder; serve logs each request (RUST_LOG, --log-file)";
const PROMPT_CACHE: &str = "flint does not save prompt caches or slots to disk";
const ROUTER: &str = "flint serve serves the one model of -m; it has no model router";
const TLS: &str = "flint serve speaks plain HTTP; put a TLS-terminating proxy in front";
const WEBUI: &str = "flint serve's chat page takes no configuration";
const WEBUI_ON: &str = "flint serve serves its chat page at / unless --no-webui";
const TOOLS: &str = "flint runs no tools, agents or MCP servers";
const REASON: &str =
    "flint serve splits reasoning per --reasoning-format; thinking is set by the chat template";
const INTERACTIVE: &str =
    "flint chat reads whole lines; prefixes, suffixes and antiprompt editing are llama-cli's";
const PERPLEXITY: &str = "a flag of llama-perplexity; flint has no perplexity tool";
const IMATRIX: &str = "a flag of llama-imatrix; flint has no importance-matrix tool";
const FINETUNE: &str = "a flag of llama-finetune; flint does not train";
const BATCHED: &str = "a flag of llama-batched-bench; use flint bench -npl/-npp/-ntg";
const RETRIEVAL: &str = "a flag of llama-retrieval; flint has no retrieval tool";
const CVECTOR: &str = "a flag of llama-cvector-generator; flint has no control-vector tool";
const TTS: &str = "a flag of llama-tts; flint runs text models only";
const DIFFUSION: &str = "a flag of llama-diffusion; flint runs autoregressive models only";
const EMBEDDING: &str =
    "a flag of llama-embedding; flint serve's /v1/embeddings pools by mean and normalises";
const TOKENIZE: &str = "a flag of llama-tokenize; flint tokenize takes a JSONL prompt file";
const LOOKUP: &str = "a flag of llama-lookup; flint has no n-gram lookup decoding";
const MODEL_URL: &str = "flint takes -m FILE, a store name, or -hf USER/REPO[:QUANT]";
const DEBUG: &str = "a debugging flag of llama.cpp's tools; flint has no equivalent";
const TENSOR_FILTER: &str =
    "a flag of llama.cpp's tensor tools; flint info prints the tensor table";
const CLI_ONLY: &str = "a flag of llama-cli's own client; flint chat runs the model itself";

/// Every llama.cpp spelling, and a few of its older ones (`--mlock`, `--no-mmap`, `-cd`).
#[rustfmt::skip]
pub const TABLE: &[Entry] = &[
    // Model and files.
    e(&["-m", "--model"], 1, Map("--model")),
    e(&["-hf", "-hfr", "--hf-repo"], 1, Map("--hf-repo")),
    e(&["-hff", "--hf-file"], 1, Map("--hf-file")),
    e(&["-hft", "--hf-token"], 1, Map("--hf-token")),
    e(&["-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf"], 1, Refuse(DRAFT_HF)),
    e(&["-mu", "--model-url", "-dr", "--docker-repo"], 1, Refuse(MODEL_URL)),
    e(&["--offline"], 0, Note("flint uses the network only to fetch a model that is not in the store")),
    e(&["-cl", "--cache-list"], 0, Refuse("use flint models")),
    e(&["--list-devices"], 0, Refuse("use flint devices")),
    e(&["-h", "--help", "--usage"], 0, Map("--help")),
    e(&["--version"], 0, Map("--version")),
    e(&["--completion-bash"], 0, Refuse("flint prints no completion script")),
    // Context, batches, KV cache.
    e(&["-c", "--ctx-size"], 1, Map("--ctx-size")),
    e(&["-b", "--batch-size"], 1, Map("--batch-size")),
    e(&["-ub", "--ubatch-size"], 1, Map("--ubatch-size")),
    e(&["-ctk", "--cache-type-k"], 1, Map("--cache-type-k")),
    e(&["-ctv", "--cache-type-v"], 1, Map("--cache-type-v")),
    e(&["-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"], 1, Map("--cache-type-k-draft")),
    e(&["-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"], 1, Map("--cache-type-v-draft")),
    e(&["-cd", "--ctx-size-draft"], 1, Map("--ctx-size-draft")),
    e(&["-kvo", "--kv-offload"], 0, Note(OFFLOAD)),
    e(&["-nkvo", "--no-kv-offload"], 0, Refuse(KV_HOST)),
    e(&["-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"], 0, Note(KVU)),
    e(&["--kv-unified-per-slot"], 1, Note(KVU)),
    e(&["-dt", "--defrag-thold"], 1, Note("flint's KV cache needs no defragmentation")),
    e(&["--swa-full"], 0, Note("flint sizes sliding-window caches itself")),
    e(&["-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"], 1, Note(CACHE)),
    e(&["-cms", "--checkpoint-min-step"], 1, Note(CACHE)),
    e(&["--context-shift"], 0, Refuse(SHIFT)),
    e(&["--no-context-shift"], 0, Note(NOOP)),
    e(&["--keep"], 1, Refuse(SHIFT)),
    e(&["-fit", "--fit", "-fitc", "--fit-ctx", "-fitt", "--fit-target"], 1, Note(FIT)),
    e(&["-fitp", "--fit-print"], 1, Refuse("use flint plan")),
    // Devices and placement.
    e(&["-dev", "--device"], 1, Map("--device")),
    e(&["-devd", "--device-draft", "--spec-draft-device"], 1, Refuse(DRAFT_DEV)),
    e(&["-ngl", "--gpu-layers", "--n-gpu-layers"], 1, Note(GPU_ALL)),
    e(&["-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl"], 1, Note(GPU_ALL)),
    e(&["-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu"], 1, Refuse(SPLIT)),
    e(&["-ot", "--override-tensor"], 1, Map("--override-tensor")),
    e(&["-otd", "--override-tensor-draft"], 1, Refuse(PLACE)),
    e(&["--spec-draft-override-tensor", "--rpc"], 1, Refuse(PLACE)),
    e(&["-cmoe", "--cpu-moe"], 0, Map("--cpu-moe")),
    e(&["-cmoed", "--cpu-moe-draft", "--spec-draft-cpu-moe"], 0, Refuse(MOE)),
    e(&["-ncmoe", "--n-cpu-moe"], 1, Map("--n-cpu-moe")),
    e(&["-ncmoed", "--n-cpu-moe-draft"], 1, Refuse(MOE)),
    e(&["--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "-ncffn", "--n-cpu-ffn"], 1, Refuse(MOE)),
    e(&["--op-offload", "--no-op-offload", "--repack", "-nr", "--no-repack"], 0, Note(OFFLOAD)),
    e(&["--numa"], 1, Note(CPU)),
    e(&["-t", "--threads", "-tb", "--threads-batch", "-td", "--threads-draft"], 1, Note(CPU)),
    e(&["-tbd", "--threads-batch-draft", "--spec-draft-threads"], 1, Note(CPU)),
    e(&["--spec-draft-threads-batch", "--threads-http"], 1, Note(CPU)),
    e(&["-C", "--cpu-mask", "-Cb", "--cpu-mask-batch", "-Cd", "--cpu-mask-draft"], 1, Note(CPU)),
    e(&["-Cbd", "--cpu-mask-batch-draft", "-Cr", "--cpu-range", "-Crb", "--cpu-range-batch"], 1, Note(CPU)),
    e(&["-Crd", "--cpu-range-draft", "-Crbd", "--cpu-range-batch-draft"], 1, Note(CPU)),
    e(&["--cpu-strict", "--cpu-strict-batch", "--cpu-strict-draft", "--cpu-strict-batch-draft"], 1, Note(CPU)),
    e(&["--prio", "--prio-batch", "--prio-draft", "--prio-batch-draft"], 1, Note(CPU)),
    e(&["--poll", "--poll-batch", "--poll-draft", "--poll-batch-draft"], 1, Note(CPU)),
    e(&["--spec-draft-cpu-mask", "--spec-draft-cpu-mask-batch", "--spec-draft-cpu-range"], 1, Note(CPU)),
    e(&["--spec-draft-cpu-range-batch", "--spec-draft-cpu-strict"], 1, Note(CPU)),
    e(&["--spec-draft-cpu-strict-batch", "--spec-draft-prio", "--spec-draft-prio-batch"], 1, Note(CPU)),
    e(&["--spec-draft-poll", "--spec-draft-poll-batch"], 1, Note(CPU)),
    e(&["-fa", "--flash-attn"], 1, Note(FA)),
    e(&["-lm", "--load-mode", "-lzm", "--lazy-mode"], 1, Note(LOAD)),
    e(&["--mlock", "--no-mmap", "--mmap", "--direct-io", "--no-direct-io"], 0, Note(LOAD)),
    e(&["--check-tensors"], 0, Note("flint checks every tensor's type and size at load")),
    e(&["--warmup", "--no-warmup"], 0, Note(WARM)),
    e(&["--override-kv"], 1, Refuse("flint does not override GGUF metadata; edit the file")),
    // Rope and attention.
    e(&["--rope-scaling", "--rope-scale", "--rope-freq-base", "--rope-freq-scale"], 1, Refuse(ROPE)),
    e(&["--yarn-orig-ctx", "--yarn-ext-factor", "--yarn-attn-factor"], 1, Refuse(ROPE)),
    e(&["--yarn-beta-slow", "--yarn-beta-fast"], 1, Refuse(ROPE)),
    e(&["-gan", "--grp-attn-n", "-gaw", "--grp-attn-w"], 1, Refuse("flint has no self-extend (group attention)")),
    e(&["--attention"], 1, Refuse(EMBEDDING)),
    // Prompt and generation.
    e(&["-p", "--prompt"], 1, Map("--prompt")),
    e(&["-f", "--file"], 1, Map("--file")),
    e(&["--stdin"], 0, MapWith("--file", "-")),
    e(&["-bf", "--binary-file"], 1, Refuse("flint takes the prompt as text (-p, -f)")),
    e(&["-n", "--n-predict", "--predict"], 1, Map("--n-predict")),
    e(&["-sys", "--system-prompt"], 1, Map("--system-prompt")),
    e(&["-sysf", "--system-prompt-file"], 1, Map("--system-prompt-file")),
    e(&["-r", "--reverse-prompt"], 1, Map("--reverse-prompt")),
    e(&["--ignore-eos"], 0, Map("--ignore-eos")),
    e(&["-e", "--escape", "--no-escape"], 0, Note("flint passes the prompt as typed, without escape processing")),
    e(&["-sp", "--special"], 0, Refuse("flint prints the text without special tokens")),
    e(&["--no-bos"], 0, Refuse(TOKENIZE)),
    e(&["-cnv", "--conversation", "-i", "--interactive"], 0, Action::Conversation(true)),
    e(&["-if", "--interactive-first"], 0, Action::Conversation(true)),
    e(&["-no-cnv", "--no-conversation", "-st", "--single-turn"], 0, Action::Conversation(false)),
    e(&["--in-prefix", "--in-suffix"], 1, Refuse(INTERACTIVE)),
    e(&["--in-prefix-bos"], 0, Refuse(INTERACTIVE)),
    e(&["--spm-infill"], 0, Refuse("flint serve lays /infill out prefix-suffix-middle only")),
    e(&["-mli", "--multiline-input", "--simple-io"], 0, Note(UI)),
    e(&["--display-prompt", "--no-display-prompt", "--verbose-prompt"], 0, Note(UI)),
    e(&["-co", "--color"], 1, Note(UI)),
    e(&["--show-timings", "--no-show-timings"], 0, Note(TIMING)),
    e(&["--perf", "--no-perf"], 0, Note(PERF)),
    e(&["-ptc", "--print-token-count"], 1, Note(PERF)),
    e(&["--server-base"], 1, Refuse(CLI_ONLY)),
    // Chat templates and reasoning.
    e(&["--jinja", "--no-jinja"], 0, Note(JINJA)),
    e(&["--chat-template"], 1, Map("--chat-template")),
    e(&["--chat-template-file"], 1, Map("--chat-template-file")),
    e(&["--chat-template-kwargs"], 1, Map("--chat-template-kwargs")),
    e(&["--prefill-assistant", "--no-prefill-assistant"], 0, Note(NOOP)),
    e(&["--skip-chat-parsing", "--no-skip-chat-parsing"], 0, Note(REASON)),
    e(&["-rea", "--reasoning"], 1, Refuse(REASON)),
    e(&["--reasoning-format"], 1, Map("--reasoning-format")),
    e(&["--reasoning-budget"], 1, Map("--reasoning-budget")),
    e(&["--reasoning-budget-message", "--reasoning-effort"], 1, Refuse(REASON)),
    e(&["--reasoning-preserve", "--no-reasoning-preserve"], 0, Note(REASON)),
    e(&["--tools", "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json"], 1, Refuse(TOOLS)),
    e(&["-ag", "--agent"], 0, Refuse(TOOLS)),
    e(&["-no-ag", "--no-agent"], 0, Note(NOOP)),
    // Sampling.
    e(&["-s", "--seed"], 1, Map("--seed")),
    e(&["--temp", "--temperature"], 1, Map("--temp")),
    e(&["--top-k"], 1, Map("--top-k")),
    e(&["--top-p"], 1, Map("--top-p")),
    e(&["--min-p"], 1, Map("--min-p")),
    e(&["--repeat-penalty"], 1, Map("--repeat-penalty")),
    e(&["--repeat-last-n"], 1, Map("--repeat-last-n")),
    e(&["--presence-penalty"], 1, Map("--presence-penalty")),
    e(&["--frequency-penalty"], 1, Map("--frequency-penalty")),
    e(&["--samplers", "--sampling-seq", "--sampler-seq"], 1, Refuse(ORDER)),
    e(&["--typical", "--typical-p", "--top-nsigma", "--top-n-sigma"], 1, Refuse(SAMPLER)),
    e(&["--xtc-probability", "--xtc-threshold", "--mirostat", "--mirostat-lr"], 1, Refuse(SAMPLER)),
    e(&["--mirostat-ent", "--dynatemp-range", "--dynatemp-exp"], 1, Refuse(SAMPLER)),
    e(&["--dry-multiplier", "--dry-base", "--dry-allowed-length"], 1, Refuse(SAMPLER)),
    e(&["--dry-penalty-last-n", "--dry-sequence-breaker"], 1, Refuse(SAMPLER)),
    e(&["--adaptive-target", "--adaptive-decay"], 1, Refuse(SAMPLER)),
    e(&["-l", "--logit-bias"], 1, Refuse("flint takes logit_bias per request in flint serve, not on the command line")),
    e(&["-bs", "--backend-sampling"], 0, Note("flint samples greedy decoding on the GPU and the rest on the CPU")),
    // flint's `--grammar` takes a file (GBNF or Lark), llama.cpp's a GBNF text.
    e(&["--grammar"], 1, Map("--grammar")),
    e(&["-j", "--json-schema"], 1, Map("--json-schema")),
    e(&["--grammar-file"], 1, Map("--grammar-file")),
    e(&["-jf", "--json-schema-file"], 1, Refuse(SCHEMA_FILE)),
    // Speculative decoding.
    e(&["-md", "--model-draft", "--spec-draft-model"], 1, Map("--model-draft")),
    e(&["--spec-type"], 1, Map("--spec-type")),
    e(&["--spec-draft-n-max", "--draft", "--draft-n", "--draft-max"], 1, Map("--spec-draft-n-max")),
    e(&["--spec-draft-p-min", "--draft-p-min"], 1, Map("--spec-draft-p-min")),
    e(&["--spec-draft-n-min", "--draft-min", "--draft-n-min"], 1, Refuse(SPEC)),
    e(&["--spec-draft-p-split", "--draft-p-split"], 1, Refuse(SPEC)),
    e(&["--spec-draft-backend-sampling", "--no-spec-draft-backend-sampling"], 0, Note(NOOP)),
    e(&["--dflash"], 0, Note("flint's drafter is the -md file (dflash or dspark format); nothing is downloaded")),
    e(&["--eagle3", "--mtp", "--spec-default"], 0, Refuse(SPEC)),
    e(&["--spec-ngram-size-n", "--spec-ngram-size-m", "--spec-ngram-min-hits"], 1, Refuse(SPEC)),
    e(&["--spec-ngram-mod-n-match", "--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max"], 1, Refuse(SPEC)),
    e(&["--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m"], 1, Refuse(SPEC)),
    e(&["--spec-ngram-simple-min-hits", "--spec-ngram-map-k-size-n"], 1, Refuse(SPEC)),
    e(&["--spec-ngram-map-k-size-m", "--spec-ngram-map-k-min-hits"], 1, Refuse(SPEC)),
    e(&["--spec-ngram-map-k4v-size-n", "--spec-ngram-map-k4v-size-m"], 1, Refuse(SPEC)),
    e(&["--spec-ngram-map-k4v-min-hits", "--spec-synth-len", "--spec-synth-rates"], 1, Refuse(SPEC)),
    e(&["-lcs", "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic"], 1, Refuse(LOOKUP)),
    // Server.
    e(&["--host"], 1, Map("--host")),
    e(&["--port"], 1, Map("--port")),
    e(&["-np", "--parallel"], 1, Map("--parallel")),
    e(&["-a", "--alias"], 1, Map("--alias")),
    e(&["--api-key"], 1, Map("--api-key")),
    e(&["--api-key-file"], 1, Map("--api-key-file")),
    e(&["-to", "--timeout"], 1, Map("--timeout")),
    e(&["--cors-origins"], 1, Map("--cors-origin")),
    e(&["--cors-methods", "--cors-headers"], 1, Note("flint serve answers CORS preflights with the methods and headers it serves")),
    e(&["--cors-credentials", "--no-cors-credentials"], 0, Note("flint serve allows no CORS credentials")),
    e(&["--tags"], 1, Note("informational in llama.cpp too")),
    e(&["--no-host"], 0, Refuse("flint serve listens on --host (loopback by default)")),
    e(&["--reuse-port"], 0, Refuse("flint serve binds its port alone")),
    e(&["--api-prefix", "--path"], 1, Refuse("flint serve serves its routes at the root and no static files")),
    e(&["--ssl-key-file", "--ssl-cert-file"], 1, Refuse(TLS)),
    e(&["-cb", "--cont-batching"], 0, Note(CB)),
    e(&["-nocb", "--no-cont-batching"], 0, Refuse(CB)),
    e(&["--metrics"], 0, Note("flint serve always serves /metrics")),
    e(&["--slots", "--no-slots", "--props"], 0, Note(SLOTS)),
    e(&["--embedding", "--embeddings"], 0, Note("flint serve always serves /v1/embeddings")),
    e(&["--pooling"], 1, Refuse(EMBEDDING)),
    e(&["--rerank", "--reranking"], 0, Refuse("flint serve has no reranking endpoint")),
    e(&["--cache-prompt", "--no-cache-prompt", "--cache-idle-slots", "--no-cache-idle-slots"], 0, Note(CACHE)),
    e(&["--cache-reuse", "-cram", "--cache-ram", "-sps", "--slot-prompt-similarity"], 1, Note(CACHE)),
    e(&["--slot-save-path", "--prompt-cache"], 1, Refuse(PROMPT_CACHE)),
    e(&["--prompt-cache-all", "--prompt-cache-ro"], 0, Refuse(PROMPT_CACHE)),
    e(&["--sse-ping-interval"], 1, Note("flint serve sends SSE keep-alive comments at its own interval")),
    e(&["--sleep-idle-seconds"], 1, Note("flint serve keeps the model loaded")),
    e(&["--models-dir", "--models-max", "--models-preset"], 1, Refuse(ROUTER)),
    e(&["--models-autoload", "--no-models-autoload"], 0, Refuse(ROUTER)),
    e(&["--webui", "--ui"], 0, Note(WEBUI_ON)),
    e(&["--no-webui", "--no-ui"], 0, Map("--no-webui")),
    e(&["--webui-mcp-proxy", "--ui-mcp-proxy"], 0, Refuse(TOOLS)),
    e(&["--no-webui-mcp-proxy", "--no-ui-mcp-proxy"], 0, Note(NOOP)),
    e(&["--webui-config", "--webui-config-file", "--ui-config", "--ui-config-file"], 1, Refuse(WEBUI)),
    e(&["--fim-qwen-1.5b-default", "--fim-qwen-3b-default", "--fim-qwen-7b-default"], 0, Refuse(PRESET)),
    e(&["--fim-qwen-7b-spec", "--fim-qwen-14b-spec", "--fim-qwen-30b-default"], 0, Refuse(PRESET)),
    e(&["--gpt-oss-20b-default", "--gpt-oss-120b-default", "--embd-gemma-default"], 0, Refuse(PRESET)),
    e(&["--vision-gemma-4b-default", "--vision-gemma-12b-default"], 0, Refuse(PRESET)),
    // Logging.
    e(&["-v", "--verbose", "--log-verbose"], 0, Map("--verbose")),
    e(&["-lv", "--verbosity", "--log-verbosity"], 1, Note(LOG)),
    e(&["--log-disable"], 0, Map("--quiet")),
    e(&["--log-file"], 1, Map("--log-file")),
    e(&["--log-colors"], 1, Note(LOG)),
    e(&["--log-prefix", "--no-log-prefix", "--log-timestamps", "--no-log-timestamps"], 0, Note(LOG)),
    e(&["--log-jsonl"], 0, MapWith("--log-format", "json")),
    e(&["--no-log-jsonl"], 0, Note(NOOP)),
    e(&["--log-prompts-dir"], 1, Refuse(LOG_FILE)),
    // Adapters and multimodal.
    e(&["--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled"], 1, Refuse(LORA)),
    e(&["--control-vector-layer-range"], 2, Refuse(LORA)),
    e(&["--lora-init-without-apply"], 0, Refuse(LORA)),
    e(&["-mm", "--mmproj", "-mmu", "--mmproj-url", "--image", "--audio", "--video"], 1, Refuse(MM)),
    e(&["--image-min-tokens", "--image-max-tokens", "--media-path"], 1, Refuse(MM)),
    e(&["--video-fps", "--video-timestamp-interval", "--video-ffmpeg-dir"], 1, Refuse(MM)),
    e(&["--mtmd-batch-max-tokens"], 1, Refuse(MM)),
    e(&["--mmproj-auto", "--mmproj-offload"], 0, Refuse(MM)),
    e(&["--no-mmproj", "--no-mmproj-auto", "--no-mmproj-offload"], 0, Note(NOOP)),
    // Other llama.cpp tools.
    e(&["--ppl", "--no-ppl", "--kl-divergence", "--hellaswag", "--winogrande"], 0, Refuse(PERPLEXITY)),
    e(&["--multiple-choice"], 0, Refuse(PERPLEXITY)),
    e(&["--ppl-stride", "--ppl-output-type", "--kl-divergence-base", "--hellaswag-tasks"], 1, Refuse(PERPLEXITY)),
    e(&["--winogrande-tasks", "--multiple-choice-tasks", "--chunks"], 1, Refuse(PERPLEXITY)),
    e(&["-o", "--output", "--output-file", "-ofreq", "--output-frequency"], 1, Refuse(IMATRIX)),
    e(&["--save-frequency", "--in-file", "--chunk", "--from-chunk", "--output-format"], 1, Refuse(IMATRIX)),
    e(&["--process-output", "--show-statistics"], 0, Refuse(IMATRIX)),
    e(&["--parse-special", "--no-parse-special"], 0, Refuse(IMATRIX)),
    e(&["-lr", "--learning-rate", "-lr-min", "--learning-rate-min"], 1, Refuse(FINETUNE)),
    e(&["-decay-epochs", "--learning-rate-decay-epochs", "-wd", "--weight-decay"], 1, Refuse(FINETUNE)),
    e(&["-val-split", "--val-split", "-epochs", "--epochs", "-opt", "--optimizer"], 1, Refuse(FINETUNE)),
    e(&["-npp", "-ntg", "-npl"], 1, Refuse(BATCHED)),
    e(&["-pps", "-tgs"], 0, Refuse(BATCHED)),
    e(&["-ns", "--sequences"], 1, Refuse(BATCHED)),
    e(&["--context-file", "--chunk-size", "--chunk-separator"], 1, Refuse(RETRIEVAL)),
    e(&["--positive-file", "--negative-file", "--pca-batch", "--pca-iter", "--method"], 1, Refuse(CVECTOR)),
    e(&["--junk", "--pos"], 1, Refuse("a flag of llama-passkey; flint has no passkey test")),
    e(&["--tts-speaker-file", "--tts-lang"], 1, Refuse(TTS)),
    e(&["--diffusion-steps", "--diffusion-eps", "--diffusion-algorithm"], 1, Refuse(DIFFUSION)),
    e(&["--diffusion-alg-temp", "--diffusion-block-length", "--diffusion-cfg-scale"], 1, Refuse(DIFFUSION)),
    e(&["--diffusion-add-gumbel-noise"], 1, Refuse(DIFFUSION)),
    e(&["--diffusion-visual"], 0, Refuse(DIFFUSION)),
    e(&["--embd-normalize", "--embd-output-format", "--embd-separator", "--cls-separator"], 1, Refuse(EMBEDDING)),
    e(&["--ids", "--show-count"], 0, Refuse(TOKENIZE)),
    e(&["--check", "--save-logits"], 0, Refuse(DEBUG)),
    e(&["--save-all-logits", "--logits-output-dir"], 1, Refuse(DEBUG)),
    e(&["--tensor-filter"], 1, Refuse(TENSOR_FILTER)),
];

/// llama-bench's spellings where they differ from the table's (`flint bench` follows
/// llama-bench): `-p`/`-n` are lengths, `-r` repetitions, `-o` the output format.
#[rustfmt::skip]
pub const BENCH: &[Entry] = &[
    e(&["-p", "--n-prompt"], 1, Map("--n-prompt")),
    e(&["-n", "--n-gen"], 1, Map("--n-gen")),
    e(&["-pg"], 1, Map("--pg")),
    e(&["-d", "--n-depth"], 1, Map("--n-depth")),
    e(&["-r", "--repetitions"], 1, Map("--repetitions")),
    e(&["-o", "--output"], 1, Map("--output")),
    e(&["-ngl", "--n-gpu-layers"], 1, Map("--n-gpu-layers")),
    e(&["-npp"], 1, Map("--npp")),
    e(&["-ntg"], 1, Map("--ntg")),
    e(&["-npl"], 1, Map("--npl")),
    e(&["-fa", "--flash-attn"], 1, Note(FA)),
    e(&["-mmp", "--mmap", "-dio", "--direct-io"], 1, Note(LOAD)),
    e(&["-nopo", "--no-op-offload"], 1, Note(OFFLOAD)),
    e(&["-embd", "--embeddings"], 1, Refuse(EMBEDDING)),
    e(&["-oe", "--output-err"], 1, Refuse("flint bench writes one output format, to stdout")),
    e(&["--progress"], 0, Note("flint bench shows a progress bar on a terminal")),
    e(&["--delay"], 1, Note("flint bench runs one untimed warm-up per test")),
    e(&["--no-warmup"], 0, Map("--no-warmup")),
];
