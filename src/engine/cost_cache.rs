//! Load-time measurements kept between runs: the verify step times the SPS(B) schedule reads
//! and a speculative cycle's costs the bypass reads. Measuring them costs seconds per start on a
//! CPU driver (about 3 s of a 20 s `flint generate` on lavapipe); a run that finds them for the
//! same adapter (name, backend, driver), the same model and drafter files (path, size,
//! modification time), the same draft length, cache types (`-ctk/-ctv`, `-ctkd/-ctvd`),
//! ubatch and drafter ubatch, and the same flint version uses them instead.
//!
//! One JSON file per key in the model directory's `profiles/` (`FLINT_MODELS`), written
//! atomically; an entry that does not parse or does not match its key (an entry of an older
//! key format among them) is measured again and overwritten, and storing an entry drops those
//! whose model or drafter file is gone (a test's temporary drafter, a deleted model).
//! `FLINT_REMEASURE=1` reads no entry: the load measures again and replaces it, the observed
//! acceptance starting afresh (a figure measured on a busy machine is not kept for good).
//! Nothing here is required: any failure to read or write only means measuring.
//!
//! Before a load, [`unpaying_drafter`] reads the entry and applies [`super::verdict`]: where
//! the drafter cannot pay at the stored costs (in the best case, or at the acceptance earlier
//! runs showed), `generate` and `chat` do not load it at all (on lavapipe its load was most of
//! the 3 % that the default drafter cost a short `flint generate`), except every
//! [`PROBE_EVERY`]th such run, which probes it.
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::gpu::{AdapterSummary, GpuContext};
use crate::speculative::bypass::{BypassConfig, CycleCosts};

pub use super::verdict::PROBE_EVERY;
use super::verdict::{
    decide, record_run, DeepCosts, History, Observed, Profile, RunObserved, Unpaying, Verdict,
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
    /// A step and a full verify at a deeper position (measured with the costs).
    pub deep: Option<DeepCosts>,
    /// What the drafter achieved in earlier generations, and the probe schedule.
    pub history: History,
}

/// Where one (device, model, drafter, draft length) keeps its measurements.
#[derive(Debug, Clone)]
pub struct CostCache {
    descriptor: String,
    path: PathBuf,
    /// The model and drafter files the entry is for (absolute: `prune` runs in any directory).
    files: [PathBuf; 2],
    /// `FLINT_REMEASURE`: [`CostCache::load`] finds nothing.
    remeasure: bool,
    /// The drafter verifies its whole block every cycle (neither threshold nor schedule).
    fixed: bool,
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
    /// The cache of this run, or `None` where it cannot have one (no drafter, no model
    /// directory, files without metadata).
    pub fn new(ctx: &GpuContext, model: &Path, opts: &EngineOptions, n_draft: u32) -> Option<Self> {
        Self::for_adapter(ctx.info(), model, opts, n_draft)
    }

    /// [`CostCache::new`] for the adapter a device would be made on (before making it). The
    /// key holds everything that changes the costs: the adapter, the model and drafter files,
    /// the draft length, the target's and the drafter's cache types, the ubatch and the
    /// drafter's injection chunk, and the flint version.
    pub fn for_adapter(
        a: &AdapterSummary,
        model: &Path,
        opts: &EngineOptions,
        n_draft: u32,
    ) -> Option<Self> {
        let d = opts.draft.as_ref()?;
        let remeasure = std::env::var_os(REMEASURE_ENV).is_some_and(|v| !v.is_empty() && v != "0");
        let descriptor = format!(
            "flint {} | {} | {} | {} {} | model {} | drafter {} | n_draft {n_draft} | \
             ctk {} ctv {} ub {} | ctkd {} ctvd {} ubd {}",
            env!("CARGO_PKG_VERSION"),
            a.name,
            a.backend,
            a.driver,
            a.driver_info,
            file_id(model)?,
            file_id(&d.model)?,
            opts.type_k.name(),
            opts.type_v.name(),
            opts.n_ubatch.min(d.inject_chunk),
            d.type_k.name(),
            d.type_v.name(),
            d.inject_chunk,
        );
        let hash = Sha256::digest(descriptor.as_bytes());
        let hex: String = hash.iter().take(16).map(|b| format!("{b:02x}")).collect();
        let dir = crate::store::models_dir().ok()?.join("profiles");
        Some(CostCache {
            descriptor,
            path: dir.join(format!("{hex}.json")),
            files: [model, &d.model].map(|p| std::fs::canonicalize(p).unwrap_or(p.to_path_buf())),
            remeasure,
            fixed: !d.schedule && d.p_min <= 0.0,
        })
    }

    /// The entry's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What an earlier run stored under this key (empty when nothing usable is there, or with
    /// `FLINT_REMEASURE`).
    pub fn load(&self) -> Measured {
        if self.remeasure {
            return Measured::default();
        }
        self.read()
    }

    /// Adds a generation's drafting (its cycles, the tokens they committed, the bonus
    /// included, the rows they verified and their mean position) to the stored acceptance ([`record_run`]; nothing
    /// without stored costs: acceptance is judged against them).
    pub fn record_acceptance(&self, run: RunObserved) {
        let mut m = self.read();
        let Some(costs) = m.costs else {
            return;
        };
        let before = m.history.clone();
        let profile = Profile {
            costs,
            step_secs: m.step_secs.as_deref(),
            deep: m.deep,
            fixed: self.fixed,
        };
        record_run(&mut m.history, run, &profile, &BypassConfig::default());
        if m.history != before {
            self.store(&m);
        }
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
        let num = |x: &Value| x.as_f64().filter(|f| f.is_finite() && *f >= 0.0);
        let observed = (|| {
            Some(Observed {
                cycles: num(&o["cycles"])?,
                committed: num(&o["committed"])?,
                verify_rows: num(&o["verify_rows"])?,
                position: num(&o["position"]).unwrap_or(0.0),
                runs: u32::try_from(o["runs"].as_u64()?).ok()?,
            })
        })();
        let d = &v["deep"];
        let deep = (|| {
            Some(DeepCosts {
                pos: u32::try_from(d["pos"].as_u64()?).ok()?,
                step: finite(&d["step"])?,
                verify: finite(&d["verify"])?,
            })
        })();
        let history = History {
            observed,
            left_out: v["left_out"]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            probe: v["probe"].as_bool().unwrap_or(false),
        };
        Measured {
            step_secs,
            costs,
            deep,
            history,
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
            "observed": m.history.observed.map(|o| json!({"cycles": o.cycles,
                "committed": o.committed, "verify_rows": o.verify_rows,
                "position": o.position, "runs": o.runs})),
            "deep": m.deep.map(|d| json!({"pos": d.pos, "step": d.step, "verify": d.verify})),
            "left_out": m.history.left_out,
            "probe": m.history.probe,
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

/// Why a run leaves its drafter out: the costs it was charged and, where it was that which
/// ruled it out, the acceptance earlier runs showed.
pub type UnpayingDrafter = Unpaying;

impl std::fmt::Display for Unpaying {
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
            Some(o) => write!(
                f,
                "the last {} runs committed {:.2} tokens a cycle ({:.0} recent cycles), \
                 where {:.2} would break even)",
                o.runs,
                o.tau(),
                o.cycles,
                c.cycle() / c.step
            ),
            None => write!(
                f,
                "even accepting every draft, the bypass would stop after one probe cycle)"
            ),
        }
    }
}

/// Whether `opts`' drafter should be left out on the device `o` opened ([`decide`]: it cannot pay at the
/// costs an earlier run measured for this device, model, drafter and settings, in the best
/// case or at the acceptance earlier runs showed): then loading it (its weights, caches and
/// pipelines) only costs start-up time. Counts the runs it leaves out; every
/// [`super::verdict::PROBE_EVERY`]th it loads the drafter instead as a probe (its costs
/// measured again at the load, its acceptance deciding anew). `None` (load it) without a
/// drafter, with the bypass off (`--spec-no-bypass`), without stored costs (the load measures
/// them; `FLINT_REMEASURE` too, which also starts the history afresh) or on a probe.
pub fn unpaying_drafter(opts: &EngineOptions, o: &super::Opened) -> Option<UnpayingDrafter> {
    let d = opts.draft.as_ref().filter(|d| d.bypass)?;
    let meta = o.drafter_meta()?;
    let n_draft = draft_params(d, meta, opts.n_ctx).ok()?.n_draft;
    let cache = CostCache::new(&o.ctx, &o.model_path, opts, n_draft)?;
    let mut m = cache.load();
    let costs = m
        .costs
        .filter(|c| c.verify_rows == n_draft + 1 && c.is_valid())?;
    let config = BypassConfig::default();
    let profile = Profile {
        costs,
        step_secs: m.step_secs.as_deref(),
        deep: m.deep,
        fixed: cache.fixed,
    };
    match decide(&profile, &m.history, config) {
        Verdict::Load => None,
        Verdict::LeaveOut(why) => {
            m.history.left_out = m.history.left_out.saturating_add(1);
            cache.store(&m);
            Some(why)
        }
        Verdict::Probe(_) => {
            m.history.left_out = 0;
            m.history.probe = true;
            m.costs = None;
            m.deep = None;
            cache.store(&m);
            None
        }
    }
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
