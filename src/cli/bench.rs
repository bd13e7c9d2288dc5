//! `flint bench`: llama-bench's tests and output formats on flint (see `src/bench` and
//! docs/BENCHMARKS.md); with `-md DRAFT` the speculative benchmark ([`super::bench_spec`]).
//! Results go to stdout, the progress bar to stderr.

use std::path::PathBuf;

use crate::bench::{self, compare, output, ModelDesc, RunConfig, SessionInfo};
use crate::engine::{DraftOptions, EngineOptions, DEFAULT_MODEL};
use crate::engine::{Engine, Opened};
use crate::gguf::GgmlType;
use crate::{Error, Result};

/// Arguments of `flint bench` (llama-bench's names).
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// GGUF model (default: the SmolLM2-135M-Instruct Q4_1 of models/).
    #[arg(short = 'm', long = "model", default_value = DEFAULT_MODEL)]
    pub model: PathBuf,
    #[command(flatten)]
    pub hub: super::hub_args::HubArgs,
    #[command(flatten)]
    pub place: super::place_args::PlaceArgs,
    /// Prompt lengths of the pp tests, comma-separated (0 disables pp).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub n_prompt: Vec<u32>,
    /// Generation lengths of the tg tests, comma-separated (0 disables tg; default 128). With
    /// `-md`: tokens generated per prompt and mode (default 64).
    #[arg(short = 'n', long = "n-gen", value_delimiter = ',')]
    pub n_gen: Option<Vec<u32>>,
    /// A prompt-then-generation test `PP,TG` (`-pg`); repeat the flag for more.
    #[arg(long = "pg")]
    pub pg: Vec<String>,
    /// KV depths to run every test at, comma-separated.
    #[arg(
        short = 'd',
        long = "n-depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub n_depth: Vec<u32>,
    /// Timed repetitions of each test (after one untimed warm-up run).
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub repetitions: u32,
    /// Skip each test's untimed warm-up run (llama-bench's `--no-warmup`): for runs so long
    /// that a second pass of each test does not fit (pipelines are built at load either way).
    #[arg(long = "no-warmup")]
    pub no_warmup: bool,
    /// Logical batch (`-b`): reported; prompts run in ubatches of `-ub` rows.
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    pub n_batch: u32,
    /// Prefill ubatch rows (`-ub`).
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub n_ubatch: u32,
    /// K cache type (`-ctk`): f16, q8_0, q4_0.
    #[arg(long = "cache-type-k", default_value = "f16")]
    pub type_k: String,
    /// V cache type (`-ctv`).
    #[arg(long = "cache-type-v", default_value = "f16")]
    pub type_v: String,
    /// Layers on the GPU (`-ngl`): accepted for llama-bench command lines; flint runs all.
    #[arg(long = "n-gpu-layers")]
    pub n_gpu_layers: Option<String>,
    /// Output format: md, csv, json, jsonl, sql.
    #[arg(short = 'o', long = "output", default_value = "md")]
    pub output: String,
    /// Adapter (`-dev`): its index in `flint devices`, or a part of its name (case-insensitive).
    #[arg(long = "device", value_parser = super::devices::parse_device)]
    pub device: Option<usize>,
    /// Device memory budget for the plan check (e.g. 8GiB).
    #[arg(long = "gpu-mem")]
    pub gpu_mem: Option<String>,
    /// Peak memory bandwidth of the device in GB/s: adds `bandwidth_pct` to tg rows.
    #[arg(long = "bandwidth")]
    pub bandwidth: Option<f64>,
    /// A llama-bench result (json or jsonl) to compare t/s with, test by test.
    #[arg(long = "compare")]
    pub compare: Option<PathBuf>,
    /// A DSpark drafter (`-md`): run the speculative benchmark, plain against DSpark decoding
    /// on the same prompts, instead of the pp/tg tests; with `-npl`, batched decoding with a
    /// drafter per sequence (`-r` counts only there).
    #[arg(
        long = "model-draft",
        visible_alias = "spec-draft-model",
        conflicts_with_all = ["n_prompt", "pg", "n_depth", "compare", "bandwidth"]
    )]
    pub model_draft: Option<PathBuf>,
    /// `draft-mtp`: the speculative benchmark with the MTP block of `-m` itself instead of a
    /// DSpark drafter (`draft-dspark`, the default, needs `-md`).
    #[arg(
        long = "spec-type",
        conflicts_with_all = ["n_prompt", "pg", "n_depth", "compare", "bandwidth", "model_draft"]
    )]
    pub spec_type: Option<String>,
    /// Prompts of the speculative benchmark: `builtin` (chat, code, math, prose, the
    /// default) or a JSONL file of `{"category": …, "prompt": …}` lines.
    #[arg(long = "spec-prompts")]
    pub spec_prompts: Option<String>,
    /// Drafts verified per cycle at most (default: the drafter's block).
    #[arg(long = "spec-draft-n-max")]
    pub spec_n_max: Option<u32>,
    /// Feed the prompts as they are instead of as a user turn of the model's chat template.
    #[arg(long = "spec-raw-prompts", conflicts_with_all = ["chat_template", "chat_template_file"])]
    pub spec_raw_prompts: bool,
    /// With `-md`: the chat template the prompts are a user turn of (default: the model's own).
    #[command(flatten)]
    pub template: super::prompt_args::TemplateArgs,
    /// Instead of the tests, profile a decode step and a prefill ubatch of the first `-p`
    /// rows (at the first `-d` depth): time per kernel, dispatches, submits and readbacks.
    /// With `--sps B`, a verify step of B rows (logits of every row) instead of the ubatch.
    /// With `-npl B,…`, a batched decode step of B sequences at the first `-d` depth each (the
    /// depth's rows assumed, not run).
    #[arg(long = "profile")]
    pub profile: bool,
    /// Instead of the tests, the SPS(B) curve: verify steps of B rows (logits and argmax of
    /// every row) for each comma-separated B, at the first `-d` depth, in `-r` interleaved
    /// rounds, with SPS(B) / SPS(1) (md or json).
    #[arg(long = "sps", value_delimiter = ',')]
    pub sps: Vec<u32>,
    /// Batched decoding (llama-batched-bench): prompt tokens per sequence, comma-separated.
    #[arg(long = "npp", value_delimiter = ',', requires = "npl")]
    pub npp: Vec<u32>,
    /// Batched decoding: tokens generated per sequence, comma-separated (default 128).
    #[arg(long = "ntg", value_delimiter = ',', requires = "npl")]
    pub ntg: Vec<u32>,
    /// Batched decoding: sequences decoded together, comma-separated (e.g. 1,2,4,8). Columns
    /// as llama-batched-bench's (PP, TG, B, N_KV, T_PP s, S_PP t/s, T_TG s, S_TG t/s, T s,
    /// S t/s) plus S_TG over B = 1's; `-npp` defaults to 128, `-r` to the median of that many.
    #[arg(long = "npl", value_delimiter = ',')]
    pub npl: Vec<u32>,
    /// With `-npl`: every sequence samples at this temperature (top-k 40, top-p 0.95, min-p
    /// 0.05, a seed of its own); 0 is greedy.
    #[arg(long = "temp", default_value_t = 0.0, requires = "npl")]
    pub temp: f32,
}

fn parse_pg(s: &str) -> Result<(u32, u32)> {
    let bad = || Error::Usage(format!("-pg {s}: expected PP,TG (e.g. 512,128)"));
    let (p, g) = s.split_once(',').ok_or_else(bad)?;
    Ok((
        p.trim().parse().map_err(|_| bad())?,
        g.trim().parse().map_err(|_| bad())?,
    ))
}

pub(super) fn kv(flag: &str, v: &str) -> Result<GgmlType> {
    match GgmlType::from_name(v) {
        Some(t) if crate::memory::layout::KV_TYPES.contains(&t) => Ok(t),
        _ => Err(Error::Usage(format!(
            "{flag} {v}: KV cache types are f16, q8_0, q4_0"
        ))),
    }
}

/// `--gpu-mem` in bytes.
pub(super) fn gpu_mem(args: &BenchArgs) -> Result<Option<u64>> {
    match &args.gpu_mem {
        Some(v) => Ok(Some(crate::memory::parse_bytes(v).ok_or_else(|| {
            Error::Usage(format!("--gpu-mem {v:?}: not a size"))
        })?)),
        None => Ok(None),
    }
}

/// The engine of a benchmark: the model, `n_ctx` rows, the ubatch, cache types, device and
/// memory budget of `args`; no drafter, no progress bar.
pub(super) fn engine_options(
    args: &BenchArgs,
    n_ctx: u32,
    gpu_mem: Option<u64>,
) -> Result<EngineOptions> {
    Ok(EngineOptions {
        model: args.model.clone(),
        n_ctx,
        n_ubatch: args.n_ubatch,
        type_k: kv("-ctk", &args.type_k)?,
        type_v: kv("-ctv", &args.type_v)?,
        device: args.device,
        gpu_mem,
        progress: false,
        draft: None,
        verify_rows: 1,
        placement: args.place.rules()?,
    })
}

/// Opens the model and the device ([`crate::engine::open`], which refuses a `-m` that is not a
/// model) and prints the device line.
pub(super) fn open(opts: &EngineOptions) -> Result<Opened> {
    let o = crate::engine::open(opts)?;
    super::announce::device(&o.ctx);
    Ok(o)
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let format = output::Format::parse(&args.output)?;
    if !args.npl.is_empty() {
        return batched(args, format);
    }
    match (&args.model_draft, args.spec_type.as_deref()) {
        (Some(draft), None | Some("draft-dspark")) => {
            let d = crate::engine::DraftOptions::new(draft.clone());
            return super::bench_spec::run(args, d, &draft.display().to_string());
        }
        (None, Some("draft-mtp")) => {
            let d = crate::engine::DraftOptions::mtp(args.model.clone(), 3);
            return super::bench_spec::run(args, d, "draft-mtp");
        }
        (None, None)
            if args.spec_n_max.is_some()
                || args.spec_raw_prompts
                || args.spec_prompts.is_some() =>
        {
            return Err(Error::Usage(
                "--spec-prompts, --spec-draft-n-max and --spec-raw-prompts belong to the \
                 speculative benchmark (-md DRAFT or --spec-type draft-mtp)"
                    .into(),
            ));
        }
        (_, Some(other)) if other != "draft-dspark" => {
            return Err(Error::Usage(format!(
                "--spec-type {other}: flint bench speculates with -md (draft-dspark) or \
                 --spec-type draft-mtp"
            )));
        }
        (None, Some(_)) => {
            return Err(Error::Usage(
                "--spec-type draft-dspark needs -md DRAFT".into(),
            ));
        }
        _ => {}
    }
    let pg = args
        .pg
        .iter()
        .map(|s| parse_pg(s))
        .collect::<Result<Vec<_>>>()?;
    let n_gen = args.n_gen.clone().unwrap_or_else(|| vec![128]);
    let tests = bench::expand_tests(&args.n_prompt, &n_gen, &pg, &args.n_depth);
    if tests.is_empty() {
        return Err(Error::Usage("no tests: every -p, -n and -pg is 0".into()));
    }
    if let Some(b) = args.bandwidth {
        if !(b > 0.0 && b.is_finite()) {
            return Err(Error::Usage(format!("--bandwidth {b}: must be > 0 GB/s")));
        }
    }
    let peers = match &args.compare {
        Some(path) => Some(compare::parse(&std::fs::read_to_string(path).map_err(
            |source| Error::Io {
                context: format!("reading {}", path.display()),
                source,
            },
        )?)?),
        None => None,
    };
    let gpu_mem = gpu_mem(args)?;
    let sps_rows = args.sps.iter().copied().max().unwrap_or(1).max(1);
    let sps_ctx = args.n_depth.first().copied().unwrap_or(0) + sps_rows;
    let n_ctx = tests
        .iter()
        .map(bench::TestSpec::ctx_needed)
        .max()
        .unwrap_or(1)
        .max(sps_ctx);
    let opts = EngineOptions {
        verify_rows: sps_rows,
        ..engine_options(args, n_ctx, gpu_mem)?
    };
    let opened = open(&opts)?;
    let (hp, gguf) = (&opened.hp, &opened.file.gguf);
    let desc = ModelDesc::from_gguf(gguf, hp.arch.name(), hp.tied_embeddings);
    let mut engine = Engine::from_opened(opened, &opts, 1)?;
    let config = RunConfig {
        model_filename: args.model.display().to_string(),
        n_batch: args.n_batch,
        n_ubatch: args.n_ubatch,
        type_k: args.type_k.clone(),
        type_v: args.type_v.clone(),
        repetitions: args.repetitions,
        bandwidth_gbps: args.bandwidth,
    };
    if args.profile {
        // With `--sps`, the verify step is profiled instead of the prefill ubatch.
        return profile(args, &mut engine);
    }
    if !args.sps.is_empty() {
        return sps(args, format, &mut engine);
    }
    let session = SessionInfo::from_engine(&engine, config, desc);

    let warmup = !args.no_warmup;
    let runs = tests.len() as u64 * (u64::from(args.repetitions) + u64::from(warmup));
    let bar = indicatif::ProgressBar::new(runs);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let results = bench::run_tests(&mut engine, &tests, args.repetitions, warmup, |spec| {
        bar.set_message(spec.name());
        bar.inc(1);
    });
    bar.finish_and_clear();
    let results = results?;

    let mut rows: Vec<_> = results.iter().map(|r| bench::record(&session, r)).collect();
    if let Some(peers) = &peers {
        compare::annotate(peers, &mut rows);
    }
    let mut text = output::render(format, &rows);
    if let Some(peers) = &peers {
        let cmp = compare::render(peers, &rows);
        if format == output::Format::Md {
            text.push('\n');
            text.push_str(&cmp);
        } else {
            // Keep stdout parseable: the comparison table goes to stderr.
            eprint!("{cmp}");
        }
    }
    super::info::write_stdout(&text)
}

/// `-npl`: batched decoding, as llama-batched-bench.
fn batched(args: &BenchArgs, format: output::Format) -> Result<()> {
    let npp = if args.npp.is_empty() {
        vec![128]
    } else {
        args.npp.clone()
    };
    let ntg = if args.ntg.is_empty() {
        vec![128]
    } else {
        args.ntg.clone()
    };
    let (seqs, mut n_ctx) = bench::batched::needs(&npp, &ntg, &args.npl)?;
    if args.profile {
        // A step at the first depth (its rows assumed).
        n_ctx = n_ctx.max(args.n_depth.first().copied().unwrap_or(0) + 1);
    }
    // The drafter verifies its drafts in the sequences' steps (the batch's fixed policy).
    let draft = args.model_draft.as_ref().map(|path| {
        let mut d = DraftOptions::new(path.clone());
        d.n_max = args.spec_n_max.unwrap_or(0);
        d
    });
    let opts = EngineOptions {
        draft,
        ..engine_options(args, n_ctx, gpu_mem(args)?)?
    };
    let mut eng = Engine::from_opened(open(&opts)?, &opts, seqs)?;
    if args.profile {
        return profile_batched(args, &mut eng);
    }
    if !(args.temp >= 0.0 && args.temp.is_finite()) {
        return Err(Error::Usage(format!("--temp {}: must be ≥ 0", args.temp)));
    }
    let tests = (&npp[..], &ntg[..], &args.npl[..]);
    let rows = bench::batched::measure(&mut eng, tests, args.repetitions, args.temp)?;
    let text = match format {
        output::Format::Md => bench::batched::render_md(&rows, &eng.ctx.info().name),
        f => output::render_as(f, &bench::batched::records(&rows), "batched"),
    };
    super::info::write_stdout(&text)
}

/// `--profile -npl B,…`: a batched decode step of each B sequences at the first `-d` depth,
/// kernel by kernel (the depth's rows assumed, not run).
fn profile_batched(args: &BenchArgs, eng: &mut Engine) -> Result<()> {
    let depth = args.n_depth.first().copied().unwrap_or(0);
    let mut text = format!("adapter: {}\n\n", eng.ctx.info().name);
    for &b in &args.npl {
        let p = bench::profile::profile_batched(eng, b, depth, args.repetitions)?;
        text.push_str(&format!("batched decode step, {b} sequence(s):\n"));
        text.push_str(&bench::profile::render(&p));
        text.push('\n');
    }
    super::info::write_stdout(&text)
}

/// `--sps`: the SPS(B) curve.
fn sps(args: &BenchArgs, format: output::Format, engine: &mut Engine) -> Result<()> {
    let depth = args.n_depth.first().copied().unwrap_or(0);
    let curve = bench::sps::measure(engine, &args.sps, depth, args.repetitions)?;
    let text = match format {
        output::Format::Md => bench::sps::render_md(&curve, &engine.ctx.info().name),
        output::Format::Json => format!("{:#}\n", bench::sps::to_json(&curve)),
        _ => {
            return Err(Error::Usage(
                "--sps writes md or json (-o md, -o json)".into(),
            ))
        }
    };
    super::info::write_stdout(&text)
}

/// `--profile`: a decode step and a prefill ubatch (with `--sps`: a verify step of the largest
/// B, every row's logits, the step SPS(B) times), kernel by kernel.
fn profile(args: &BenchArgs, engine: &mut Engine) -> Result<()> {
    let depth = args.n_depth.first().copied().unwrap_or(0);
    let max_rows = engine.max_rows();
    let (rows, logit_rows) = if args.sps.is_empty() {
        let prefill = args.n_prompt.iter().copied().find(|&p| p > 0);
        (prefill.unwrap_or(512).min(max_rows), 1)
    } else {
        // The same checks as `--sps` itself (no batch of 0 rows).
        let b = crate::bench::sps::batch_list(&args.sps)?
            .into_iter()
            .max()
            .unwrap_or(1);
        (
            b.min(max_rows),
            b.min(crate::memory::batch::logit_rows(engine.params())),
        )
    };
    let mut text = format!("adapter: {}\n\n", engine.ctx.info().name);
    for (rows, logit_rows) in [(1, 1), (rows, logit_rows)] {
        let p =
            crate::bench::profile::profile_step(engine, rows, logit_rows, depth, args.repetitions)?;
        text.push_str(&crate::bench::profile::render(&p));
        text.push('\n');
    }
    super::info::write_stdout(&text)
}
