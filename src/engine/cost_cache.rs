//! Load-time measurements kept between runs: the verify step times the SPS(B) schedule reads
//! and a speculative cycle's costs the bypass reads. Measuring them costs seconds per start on a
//! CPU driver (about 3 s of a 20 s `flint generate` on lavapipe); a run that finds them for the
//! same adapter (name, backend, driver), the same model and drafter files (path, size,
//! modification time), the same draft length and the same flint version uses them instead.
//!
//! One JSON file per key in the model directory's `profiles/` (`FLINT_MODELS`), written
//! atomically; an entry that does not parse or does not match its key is measured again and
//! overwritten, and storing an entry drops those whose model or drafter file is gone (a test's
//! temporary drafter, a deleted model). `FLINT_REMEASURE=1` reads no entry: the load measures
//! again and replaces it (a figure measured on a busy machine is not kept for good). Nothing
//! here is required: any failure to read or write only means measuring.
//!
//! Before a load, [`unpaying_drafter`] reads the stored costs: where the bypass would rule
//! drafting out after its first probe even if every draft were accepted, `generate` and `chat`
//! do not load the drafter at all (on lavapipe its load was most of the 3 % that the default
//! drafter cost a short `flint generate`).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::gguf::GgufFile;
use crate::gpu::{AdapterSummary, GpuContext};
use crate::model::DrafterMeta;
use crate::speculative::bypass::{
    drafting_can_pay, drafting_pays, estimate_tau, BypassConfig, CycleCosts,
};

use super::{draft_params, EngineOptions};

/// Ignore stored measurements: measure at this load and replace them.
pub const REMEASURE_ENV: &str = "FLINT_REMEASURE";

/// What was measured for one key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    /// Seconds of a verify step of B = 1, 2, … rows (the SPS(B) profile).
    pub step_secs: Option<Vec<f64>>,
    /// A speculative cycle's costs.
    pub costs: Option<CycleCosts>,
    /// What the drafter achieved in earlier generations: (drafting cycles, tokens committed by
    /// them, the bonus token included), at most [`OBSERVED_CAP`] cycles' worth.
    pub observed: Option<(u64, u64)>,
}

/// Cycles of observed acceptance kept at most: older ones are scaled down, so the figure
/// follows the drafter's recent use.
pub const OBSERVED_CAP: u64 = 256;

/// Cycles observed before the acceptance they show decides whether a drafter is loaded.
pub const OBSERVED_MIN: u64 = 8;

/// Where one (device, model, drafter, draft length) keeps its measurements.
#[derive(Debug, Clone)]
pub struct CostCache {
    descriptor: String,
    path: PathBuf,
    /// The model and drafter files the entry is for (absolute: `prune` runs in any directory).
    files: [PathBuf; 2],
    /// `FLINT_REMEASURE`: [`CostCache::load`] finds nothing.
    remeasure: bool,
}

fn file_id(path: &Path) -> Option<String> {
    let m = std::fs::metadata(path).ok()?;
    let modified = m
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(format!(
        "{}|{}|{}",
        path.display(),
        m.len(),
        modified.as_nanos()
    ))
}

impl CostCache {
    /// The cache of this run, or `None` where it cannot have one (no model directory, files
    /// without metadata).
    pub fn new(ctx: &GpuContext, model: &Path, drafter: &Path, n_draft: u32) -> Option<Self> {
        Self::for_adapter(ctx.info(), model, drafter, n_draft)
    }

    /// [`CostCache::new`] for the adapter a device would be made on (before making it).
    pub fn for_adapter(
        a: &AdapterSummary,
        model: &Path,
        drafter: &Path,
        n_draft: u32,
    ) -> Option<Self> {
        let remeasure = std::env::var_os(REMEASURE_ENV).is_some_and(|v| !v.is_empty() && v != "0");
        let descriptor = format!(
            "flint {} | {} | {} | {} {} | model {} | drafter {} | n_draft {n_draft}",
            env!("CARGO_PKG_VERSION"),
            a.name,
            a.backend,
            a.driver,
            a.driver_info,
            file_id(model)?,
            file_id(drafter)?,
        );
        let hash = Sha256::digest(descriptor.as_bytes());
        let hex: String = hash.iter().take(16).map(|b| format!("{b:02x}")).collect();
        let dir = crate::store::models_dir().ok()?.join("profiles");
        Some(CostCache {
            descriptor,
            path: dir.join(format!("{hex}.json")),
            files: [model, drafter].map(|p| std::fs::canonicalize(p).unwrap_or(p.to_path_buf())),
            remeasure,
        })
    }

    /// What an earlier run stored under this key (empty when nothing usable is there, or with
    /// `FLINT_REMEASURE`).
    pub fn load(&self) -> Measured {
        if self.remeasure {
            return Measured::default();
        }
        self.read()
    }

    /// Adds a generation's drafting cycles and the tokens they committed to the stored
    /// acceptance (nothing without stored costs: acceptance is judged against them).
    pub fn record_acceptance(&self, cycles: u64, committed: u64) {
        let mut m = self.read();
        if m.costs.is_none() || cycles == 0 {
            return;
        }
        let (mut c, mut t) = m.observed.unwrap_or((0, 0));
        c += cycles;
        t += committed;
        if c > OBSERVED_CAP {
            t = t * OBSERVED_CAP / c;
            c = OBSERVED_CAP;
        }
        m.observed = Some((c, t));
        self.store(&m);
    }

    /// The stored entry, whatever `FLINT_REMEASURE` says.
    fn read(&self) -> Measured {
        let Some(v) = std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        else {
            return Measured::default();
        };
        if v["descriptor"].as_str() != Some(self.descriptor.as_str()) {
            return Measured::default();
        }
        let finite = |x: &Value| x.as_f64().filter(|f| f.is_finite() && *f > 0.0);
        let step_secs = v["step_secs"].as_array().and_then(|a| {
            let s: Option<Vec<f64>> = a.iter().map(finite).collect();
            s.filter(|s| !s.is_empty())
        });
        let c = &v["costs"];
        let costs = (|| {
            Some(CycleCosts {
                step: finite(&c["step"])?,
                draft: finite(&c["draft"])?,
                inject: finite(&c["inject"])?,
                verify: finite(&c["verify"])?,
                verify_rows: u32::try_from(c["verify_rows"].as_u64()?).ok()?,
            })
        })();
        let o = &v["observed"];
        let observed = o["cycles"].as_u64().zip(o["committed"].as_u64());
        Measured {
            step_secs,
            costs,
            observed,
        }
    }

    /// Stores `m` under this key (best effort: a failure leaves the next run measuring).
    pub fn store(&self, m: &Measured) {
        let costs = m.costs.map(|c| {
            json!({"step": c.step, "draft": c.draft, "inject": c.inject,
                   "verify": c.verify, "verify_rows": c.verify_rows})
        });
        let v = json!({
            "descriptor": self.descriptor,
            "files": [self.files[0].to_string_lossy(), self.files[1].to_string_lossy()],
            "step_secs": m.step_secs,
            "costs": costs,
            "observed": m.observed.map(|(c, t)| json!({"cycles": c, "committed": t})),
        });
        let Some(dir) = self.path.parent() else {
            return;
        };
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        let tmp = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        let text = serde_json::to_string_pretty(&v).unwrap_or_default();
        if std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, &self.path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        prune(dir);
    }
}

/// Why a run leaves its drafter out: the cached costs it was judged on and, where it was that
/// which ruled it out, the acceptance it showed in earlier runs (cycles, tokens committed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnpayingDrafter {
    pub costs: CycleCosts,
    pub observed: Option<(u64, u64)>,
}

impl std::fmt::Display for UnpayingDrafter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.costs;
        let ms = |s: f64| s * 1e3;
        write!(
            f,
            "drafting cannot pay on this device (measured: a decode step {:.1} ms, a cycle \
             {:.1} ms = draft {:.1} + inject {:.1} + verify of {} rows {:.1}; ",
            ms(c.step),
            ms(c.cycle()),
            ms(c.draft),
            ms(c.inject),
            c.verify_rows,
            ms(c.verify)
        )?;
        match self.observed {
            Some((cycles, committed)) => write!(
                f,
                "earlier runs committed {committed} tokens in {cycles} cycles, {:.2} a cycle, \
                 where {:.2} would break even)",
                committed as f64 / cycles.max(1) as f64,
                c.cycle() / c.step
            ),
            None => write!(
                f,
                "even accepting every draft, the bypass would stop after one probe cycle)"
            ),
        }
    }
}

/// Whether `opts`' drafter cannot pay on adapter `a`, from the costs an earlier run measured
/// for this device, model, drafter and draft length ([`drafting_can_pay`], the bypass's own
/// rule in its best case): then loading it (its weights, caches and pipelines) only costs
/// start-up time, since the bypass would decode plainly after one probe cycle anyway. `None`
/// (load it) without a drafter, with the bypass off (`--spec-no-bypass`), or without stored
/// costs (the load measures them; `FLINT_REMEASURE` too). Reads the drafter's header only.
pub fn unpaying_drafter(opts: &EngineOptions, a: &AdapterSummary) -> Option<UnpayingDrafter> {
    let d = opts.draft.as_ref().filter(|d| d.bypass)?;
    let model = super::resolve_model(&opts.model).ok()?;
    let file = GgufFile::open(&d.model).ok()?;
    let meta = DrafterMeta::from_gguf(&file).ok()?;
    let n_draft = draft_params(d, &meta, opts.n_ctx).ok()?.n_draft;
    let cache = CostCache::for_adapter(a, &model, &d.model, n_draft)?;
    let costs = cache
        .load()
        .costs
        .filter(|c| c.verify_rows == n_draft + 1 && c.is_valid())?;
    let config = BypassConfig {
        costs: Some(costs),
        ..BypassConfig::default()
    };
    if let Ok(false) = drafting_can_pay(config) {
        return Some(UnpayingDrafter {
            costs,
            observed: None,
        });
    }
    // The acceptance earlier runs saw, with the bypass's prior, at the bypass's margin.
    let (cycles, committed) = cache.read().observed?;
    let tau = estimate_tau(config.prior, cycles, committed);
    (cycles >= OBSERVED_MIN && !drafting_pays(&costs, tau, config.margin)).then_some(
        UnpayingDrafter {
            costs,
            observed: Some((cycles, committed)),
        },
    )
}

/// Removes the entries in `dir` whose model or drafter file no longer exists.
fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let Some(v) = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        else {
            continue;
        };
        let gone = v["files"].as_array().is_some_and(|files| {
            files
                .iter()
                .any(|f| f.as_str().is_some_and(|f| !Path::new(f).exists()))
        });
        if gone {
            let _ = std::fs::remove_file(&path);
        }
    }
}
