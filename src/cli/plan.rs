//! `flint plan -m TARGET [-md DRAFT] [-c N] [-ctk T -ctv T] [-ub N] [-np N]
//! [--spec-draft-n-max G] [--gpu-mem SIZE] [--json]`: `-c` is the total context over the `-np`
//! slots, as in `flint serve`; every buffer a run would create, grouped by
//! owner and kind, whether it fits, and alternatives computed by the same planner when it does
//! not. Works on shape-only GGUF files (`flint gguf strip`), so a model can be planned before it
//! is downloaded.

use std::path::PathBuf;

use serde_json::json;

use crate::gguf::{GgmlType, GgufFile};
use crate::gpu::{DeviceOptions, GpuContext};
use crate::memory::budget::BudgetSource;
use crate::memory::context::{default_ctx, CtxChoice, CtxSource};
use crate::memory::suggest::suggestions;
use crate::memory::swa::swa_split;
use crate::memory::{
    fmt_bytes, parse_bytes, plan, Budget, DeviceLimits, DrafterShape, Kind, Owner, RunParams,
    TargetShape,
};
use crate::model::{DrafterMeta, Hparams};
use crate::{Error, Result};

/// Arguments of `flint plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Target model (a full or shape-only GGUF, or a store name); `-m` or `-hf` is required.
    #[arg(
        short = 'm',
        long = "model",
        default_value = "",
        hide_default_value = true,
        value_parser = clap::builder::TypedValueParser::map(
            clap::builder::OsStringValueParser::new(),
            PathBuf::from
        )
    )]
    pub model: PathBuf,
    #[command(flatten)]
    pub hub: super::hub_args::HubArgs,
    /// DSpark drafter (`-md`).
    #[arg(long = "model-draft")]
    pub model_draft: Option<PathBuf>,
    /// Context length over all sequences, split evenly between the `-np` slots as `flint serve`
    /// and llama-server do (default: the model's trained context, or the largest that fits the
    /// budget, at least 4096, per slot).
    #[arg(short = 'c', long = "ctx-size")]
    pub n_ctx: Option<u32>,
    /// Target K cache type (`-ctk`): f16, q8_0, q4_0.
    #[arg(long = "cache-type-k", default_value = "f16")]
    pub type_k: String,
    /// Target V cache type (`-ctv`).
    #[arg(long = "cache-type-v", default_value = "f16")]
    pub type_v: String,
    /// Drafter K cache type (`-ctkd`).
    #[arg(long = "cache-type-k-draft", default_value = "f16")]
    pub type_k_draft: String,
    /// Drafter V cache type (`-ctvd`).
    #[arg(long = "cache-type-v-draft", default_value = "f16")]
    pub type_v_draft: String,
    /// Prefill ubatch rows (`-ub`).
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub n_ubatch: u32,
    /// Sequences / server slots (`-np`).
    #[arg(long = "parallel", default_value_t = 1)]
    pub n_seq: u32,
    /// Drafts verified per step (default: the drafter's block size).
    #[arg(long = "spec-draft-n-max")]
    pub n_draft: Option<u32>,
    /// Context rows injected into the drafter per chunk (`U`); the target's ubatch is capped
    /// to it.
    #[arg(
        long = "spec-draft-ubatch",
        visible_alias = "inject-chunk",
        default_value_t = 512
    )]
    pub inject_chunk: u32,
    /// Drafter context (`-cd`; default: its trained context): below `-c`, the drafter's K/V
    /// is a position window of this many rows.
    #[arg(long = "ctx-size-draft", visible_alias = "draft-window")]
    pub draft_window: Option<u32>,
    /// Plan the drafter's K/V for the whole context, with no position window.
    #[arg(long = "spec-no-window")]
    pub no_window: bool,
    /// Device memory budget (`16GiB`, `8000MiB`, bytes); planning then uses generic GPU limits.
    #[arg(long = "gpu-mem")]
    pub gpu_mem: Option<String>,
    /// Memory kept free (default 5 % of the budget, at least 256 MiB).
    #[arg(long = "headroom")]
    pub headroom: Option<String>,
    /// Adapter (`-dev`): its index in `flint devices`, or a part of its name (case-insensitive).
    #[arg(long = "device", value_parser = super::devices::parse_device)]
    pub device: Option<usize>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub place: super::place_args::PlaceArgs,
}

fn kv_type(flag: &str, value: &str) -> Result<GgmlType> {
    match GgmlType::from_name(value) {
        Some(t) if crate::memory::layout::KV_TYPES.contains(&t) => Ok(t),
        _ => Err(Error::Usage(format!(
            "{flag} {value}: KV cache types are f16, q8_0, q4_0"
        ))),
    }
}

fn size(flag: &str, value: &str) -> Result<u64> {
    parse_bytes(value)
        .ok_or_else(|| Error::Usage(format!("{flag} {value:?}: not a size (e.g. 16GiB)")))
}

/// The parsed target/drafter of `args`.
struct Inputs {
    target: GgufFile,
    hp: Hparams,
    drafter: Option<(GgufFile, DrafterMeta)>,
}

fn inputs(args: &PlanArgs) -> Result<Inputs> {
    if args.n_ctx == Some(0) || args.n_ubatch == 0 || args.n_seq == 0 {
        return Err(Error::Usage("-c, -ub and -np must be at least 1".into()));
    }
    let target = GgufFile::open(&args.model)?;
    let hp = Hparams::from_gguf(&target).map_err(Error::from)?;
    let drafter = match &args.model_draft {
        Some(path) => {
            let f = GgufFile::open(path)?;
            let meta = DrafterMeta::from_gguf(&f).map_err(Error::from)?;
            Some((f, meta))
        }
        None => None,
    };
    Ok(Inputs {
        target,
        hp,
        drafter,
    })
}

/// The run parameters of `args` at a context of `n_ctx` rows per sequence.
fn params(args: &PlanArgs, inp: &Inputs, n_ctx: u32) -> Result<RunParams> {
    let draft = match &inp.drafter {
        Some((_, meta)) => {
            let max = meta.max_drafts();
            if let Some(n) = args.n_draft.filter(|&n| n == 0 || n > max) {
                return Err(Error::Usage(format!(
                    "--spec-draft-n-max {n}: this drafter proposes 1 to {max} tokens"
                )));
            }
            let d = crate::engine::DraftOptions {
                n_max: args.n_draft.unwrap_or(0),
                inject_chunk: args.inject_chunk,
                type_k: kv_type("-ctkd", &args.type_k_draft)?,
                type_v: kv_type("-ctvd", &args.type_v_draft)?,
                ctx: args.draft_window,
                window: !args.no_window,
                ..crate::engine::DraftOptions::new(args.model_draft.clone().unwrap_or_default())
            };
            Some(crate::engine::draft_params(&d, meta, n_ctx)?)
        }
        None => None,
    };
    Ok(RunParams {
        n_ctx,
        n_seq: args.n_seq,
        type_k: kv_type("-ctk", &args.type_k)?,
        type_v: kv_type("-ctv", &args.type_v)?,
        // As a run does: each target step's tap rows must fit the injection staging.
        n_ubatch: draft
            .as_ref()
            .map_or(args.n_ubatch, |d| args.n_ubatch.min(d.inject_chunk)),
        draft,
        verify_rows: 1,
        placement: args.place.rules()?,
    })
}

pub fn run(args: &PlanArgs) -> Result<()> {
    let inp = inputs(args)?;
    // `-c` is the total over the slots, as in `flint serve`.
    let per_slot = args.n_ctx.map(|c| c / args.n_seq);
    if let (Some(c), Some(0)) = (args.n_ctx, per_slot) {
        return Err(Error::Usage(format!(
            "-c {c} over -np {} slots leaves no row per slot (-c is the total, as in flint serve)",
            args.n_seq
        )));
    }
    // The options are checked once at the smallest context, whatever -c turns out to be.
    params(args, &inp, per_slot.unwrap_or(1))?;
    let flag = args
        .gpu_mem
        .as_deref()
        .map(|v| size("--gpu-mem", v))
        .transpose()?;
    // With --gpu-mem the plan is for another machine: generic limits, no device opened.
    let ctx = if flag.is_none() {
        GpuContext::new(&DeviceOptions {
            index: args.device,
            ..DeviceOptions::default()
        })
        .ok()
    } else {
        None
    };
    let mut budget = Budget::resolve(flag, ctx.as_ref());
    if let Some(h) = &args.headroom {
        budget = budget.with_headroom(size("--headroom", h)?);
    }
    let limits = ctx
        .as_ref()
        .map_or(DeviceLimits::GENERIC, DeviceLimits::from_context);
    let target = TargetShape {
        hp: &inp.hp,
        tensors: &inp.target.tensors,
    };
    let drafter = inp.drafter.as_ref().map(|(f, meta)| DrafterShape {
        meta,
        tensors: &f.tensors,
    });
    let choice = match per_slot {
        Some(n) => CtxChoice {
            per_slot: n,
            n_slots: args.n_seq,
            source: CtxSource::Flag,
            trained: inp.hp.n_ctx_train,
        },
        None => default_ctx(inp.hp.n_ctx_train, args.n_seq, |n| {
            // The context that fits with every weight on the device; automatic placement
            // then fits the weights at the floor context when none does.
            params(args, &inp, n).is_ok_and(|mut q| {
                q.placement.auto = false;
                plan(target, drafter, &q, budget, limits).fits()
            })
        }),
    };
    if let Some(line) = choice.line(&budget) {
        eprintln!("flint: {line}");
    }
    let params = params(args, &inp, choice.per_slot)?;
    let p = plan(target, drafter, &params, budget, limits);
    if let Some(line) = crate::memory::placement::auto_line(&p, &params.placement) {
        eprintln!("flint: {line}");
    }
    let alts = suggestions(target, drafter, &params, &p);
    let text = if args.json {
        let buffers: Vec<_> = p
            .buffers
            .iter()
            .map(|b| json!({"owner": b.owner.name(), "kind": b.kind.name(), "name": b.name, "bytes": b.bytes, "placement": b.placement.name()}))
            .collect();
        let v = json!({
            "fits": p.fits(),
            "budget": {
                "source": p.budget.source.name(),
                "bytes": p.budget.bytes,
                "headroom_bytes": p.budget.headroom,
                "usable_bytes": p.budget.usable(),
            },
            "n_ctx": params.n_ctx,
            "n_ctx_total": choice.total(),
            "ctx_source": choice.source.name(),
            "n_ctx_train": inp.hp.n_ctx_train,
            "n_slots": params.n_seq,
            "type_k": params.type_k.name().to_lowercase(),
            "type_v": params.type_v.name().to_lowercase(),
            "n_ubatch": params.n_ubatch,
            "draft": params.draft.as_ref().map(|d| json!({
                "n_draft": d.n_draft,
                "inject_chunk": d.inject_chunk,
                "type_k": d.type_k.name().to_lowercase(),
                "type_v": d.type_v.name().to_lowercase(),
                "window": d.window,
            })),
            "budget_bytes": p.budget.usable(),
            "total_bytes": p.total(),
            "device_bytes": p.total(),
            "host_bytes": p.host_total(),
            "host_expert_layers": crate::memory::placement::host_expert_layers(&p.buffers),
            "kv_sliding_window": swa_split(&p, &inp.hp, &params).map(|s| json!({
                "sliding_layers": s.sliding_layers,
                "sliding_rows": s.sliding_rows,
                "sliding_bytes": s.sliding_bytes,
                "global_layers": s.global_layers,
                "global_bytes": s.global_bytes,
                "shared_layers": s.shared_layers,
                "full_cache_bytes": s.full_bytes,
            })),
            "buffers": buffers,
            "suggestions": alts,
        });
        serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
    } else {
        render(&inp, &params, &p, &alts, ctx.is_some())
    };
    super::info::write_stdout(&text)?;
    if p.fits() {
        Ok(())
    } else {
        Err(Error::OutOfMemory {
            requested: p.total(),
            limit: p.budget.usable(),
            reasons: p.misfit_summary(),
        })
    }
}

/// The all / device / host totals, and which layers' experts are on the host.
fn placement_lines(p: &crate::memory::Plan) -> Vec<String> {
    let host = p.host_total();
    let row = |who: &str, n: String, bytes: u64| {
        format!("  {who:<8} {:<8} {n:>8} {:>12}", "total", fmt_bytes(bytes))
    };
    let mut out = vec![
        row("all", p.buffers.len().to_string(), p.total() + host),
        row("device", String::new(), p.total()),
        row("host", String::new(), host),
    ];
    let layers = crate::memory::placement::host_expert_layers(&p.buffers);
    if !layers.is_empty() {
        out.push(format!(
            "  host: the routed experts of {} layers ({}), read by the GPU over the bus",
            layers.len(),
            layer_ranges(&layers)
        ));
    }
    out
}

/// `0-3, 7, 9-11`.
fn layer_ranges(layers: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < layers.len() {
        let mut j = i;
        while j + 1 < layers.len() && layers[j + 1] == layers[j] + 1 {
            j += 1;
        }
        parts.push(match i == j {
            true => layers[i].to_string(),
            false => format!("{}-{}", layers[i], layers[j]),
        });
        i = j + 1;
    }
    parts.join(", ")
}

fn render(
    inp: &Inputs,
    r: &RunParams,
    p: &crate::memory::Plan,
    alts: &[String],
    on_device: bool,
) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    if p.budget.source == BudgetSource::Default {
        line(format!(
            "note: {}",
            super::generate::default_budget_note(&p.budget)
        ));
    }
    line(format!(
        "plan: {} ({}{}), -c {} (the total: -np {} slots of {}) -ctk {} -ctv {} -ub {}",
        inp.target.path.display(),
        inp.hp.arch.name(),
        if inp.target.shape_only {
            ", shape only"
        } else {
            ""
        },
        r.n_ctx.saturating_mul(r.n_seq),
        r.n_seq,
        r.n_ctx,
        r.type_k.name().to_lowercase(),
        r.type_v.name().to_lowercase(),
        r.n_ubatch
    ));
    if let (Some((f, meta)), Some(d)) = (&inp.drafter, &r.draft) {
        line(format!(
            "drafter: {} ({} layers, block {}, {} taps, rank {}), drafts {} , inject chunk {}, KV {}/{}{}",
            f.path.display(),
            meta.hp.n_layer,
            meta.block_size,
            meta.target_layers.len(),
            meta.markov_rank,
            d.n_draft,
            d.inject_chunk,
            d.type_k.name().to_lowercase(),
            d.type_v.name().to_lowercase(),
            d.window.map(|w| format!(", window {w}")).unwrap_or_default()
        ));
    }
    line(format!(
        "budget: {} ({}), headroom {}, usable {}; limits: buffer {}, binding {}{}",
        fmt_bytes(p.budget.bytes),
        p.budget.source.name(),
        fmt_bytes(p.budget.headroom),
        fmt_bytes(p.budget.usable()),
        fmt_bytes(p.limits.max_buffer_size),
        fmt_bytes(p.limits.max_storage_binding),
        if on_device || p.budget.source == BudgetSource::Flag {
            ""
        } else {
            " (generic)"
        }
    ));
    line(String::new());
    line(format!(
        "  {:<8} {:<8} {:>8} {:>12}",
        "owner", "kind", "buffers", "bytes"
    ));
    for owner in [Owner::Target, Owner::Drafter, Owner::Runtime] {
        for kind in [
            Kind::Weights,
            Kind::Kv,
            Kind::Recurrent,
            Kind::Rollback,
            Kind::Compute,
            Kind::Staging,
            Kind::Io,
        ] {
            let n = p
                .buffers
                .iter()
                .filter(|b| b.owner == owner && b.kind == kind)
                .count();
            if n > 0 {
                let bytes = p.sum(Some(owner), Some(kind));
                line(format!(
                    "  {:<8} {:<8} {n:>8} {:>12}",
                    owner.name(),
                    kind.name(),
                    fmt_bytes(bytes)
                ));
            }
        }
        let total = p.sum(Some(owner), None);
        if total > 0 {
            line(format!(
                "  {:<8} {:<8} {:>8} {:>12}",
                owner.name(),
                "total",
                "",
                fmt_bytes(total)
            ));
        }
    }
    for l in placement_lines(p) {
        line(l);
    }
    if let Some(s) = swa_split(p, &inp.hp, r) {
        line(format!(
            "  kv: sliding {} layers × {} rows{} {} + global {} layers × {} rows {}{} = {}; \
             a full cache in every layer: {}",
            s.sliding_layers,
            s.sliding_rows,
            if s.sliding_rows < u64::from(r.n_ctx) {
                " (ring)"
            } else {
                ""
            },
            fmt_bytes(s.sliding_bytes),
            s.global_layers,
            r.n_ctx,
            fmt_bytes(s.global_bytes),
            match s.shared_layers {
                0 => String::new(),
                n => format!(" + shared-KV {n} layers 0 B"),
            },
            fmt_bytes(s.sliding_bytes + s.global_bytes),
            fmt_bytes(s.full_bytes)
        ));
    }
    line(String::new());
    if p.fits() {
        line(format!(
            "fits: {} of {} ({} to spare)",
            fmt_bytes(p.total()),
            fmt_bytes(p.budget.usable()),
            fmt_bytes(p.budget.usable() - p.total())
        ));
    } else {
        line("does not fit:".to_string());
        for m in p.misfit_summary() {
            line(format!("  - {m}"));
        }
        line("alternatives:".to_string());
        for a in alts {
            line(format!("  - {a}"));
        }
    }
    out
}
