//! The memory planner: every device buffer flint will create for a run, with its exact bytes,
//! computed from GGUF metadata and run parameters before anything is allocated (design
//! principle 1). The runtime allocates by walking the plan, so what it creates is what was
//! planned; a plan that does not fit is refused here with the numbers and concrete alternatives.
//!
//! Only K/V caches scale with the context (principle 2): the drafter's context rows are K/V-only
//! rows injected in fixed chunks of `U` rows, and its draft pass has a fixed γ-row query buffer.
//! Formulas: docs/MEMORY.md.

pub mod alloc;
pub mod batch;
pub mod budget;
pub mod context;
pub mod drafter;
pub mod layout;
pub mod placement;
pub mod suggest;
pub mod swa;
pub mod target;

use std::fmt;

use crate::gguf::GgmlType;

pub use budget::{Budget, DeviceLimits};
pub use placement::{Placement, PlacementRules};

/// Who a buffer belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Owner {
    Target,
    Drafter,
    Runtime,
}

/// What a buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Weights,
    Kv,
    /// A hybrid model's recurrent state (conv windows, DeltaNet S matrices): fixed per sequence.
    Recurrent,
    /// The copy of the recurrent state a speculative rollback restores (one, whatever γ).
    Rollback,
    Compute,
    Staging,
    Io,
}

impl Owner {
    pub fn name(self) -> &'static str {
        match self {
            Owner::Target => "target",
            Owner::Drafter => "drafter",
            Owner::Runtime => "runtime",
        }
    }
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Weights => "weights",
            Kind::Kv => "kv",
            Kind::Recurrent => "recurrent",
            Kind::Rollback => "rollback",
            Kind::Compute => "compute",
            Kind::Staging => "staging",
            Kind::Io => "io",
        }
    }
}

/// One device buffer of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedBuffer {
    pub owner: Owner,
    pub kind: Kind,
    /// Unique within the plan: tensor names for weights, `kv.k.{layer}`, `act.q`, …
    pub name: String,
    /// Exact bytes after alignment (what the allocator requests).
    pub bytes: u64,
    /// The buffer is bound whole as one storage binding, so it must fit the binding limit.
    pub bound_whole: bool,
    /// Device memory, or host memory the GPU reads ([`placement`]).
    pub placement: Placement,
}

/// Run parameters that size the plan (llama.cpp's flag names in comments).
#[derive(Debug, Clone, PartialEq)]
pub struct RunParams {
    /// `-c`: context length per sequence.
    pub n_ctx: u32,
    /// `-np`: sequences (server slots).
    pub n_seq: u32,
    /// `-ctk`, `-ctv`.
    pub type_k: GgmlType,
    pub type_v: GgmlType,
    /// `-ub`: rows per prefill ubatch.
    pub n_ubatch: u32,
    pub draft: Option<DraftParams>,
    /// Rows per sequence whose logits one step computes at most when no drafter asks for more
    /// (1; `flint bench --sps` times verify-sized steps without a drafter).
    pub verify_rows: u32,
    /// Where weights go (`-ot`, `--cpu-moe`, `--n-cpu-moe`; automatic without them).
    pub placement: PlacementRules,
}

/// Speculative-decoding parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftParams {
    /// `--spec-draft-n-max`: drafts verified per step (≤ the drafter's block).
    pub n_draft: u32,
    /// `U`: context rows injected per chunk (defaults to the target's ubatch).
    pub inject_chunk: u32,
    /// Drafter KV types (`-ctkd`, `-ctvd`).
    pub type_k: GgmlType,
    pub type_v: GgmlType,
    /// Drafter KV capacity: `None` = the context, `Some(w)` = a position window of `w` rows.
    pub window: Option<u32>,
}

impl Default for RunParams {
    fn default() -> Self {
        RunParams {
            n_ctx: 4096,
            n_seq: 1,
            type_k: GgmlType::F16,
            type_v: GgmlType::F16,
            n_ubatch: 512,
            draft: None,
            verify_rows: 1,
            placement: PlacementRules::default(),
        }
    }
}

/// Every buffer of a run and whether it fits the budget and the device limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub buffers: Vec<PlannedBuffer>,
    pub budget: Budget,
    pub limits: DeviceLimits,
}

/// Why a plan does not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misfit {
    /// The total exceeds the budget.
    OverBudget { total: u64, budget: u64 },
    /// One buffer exceeds `max_buffer_size`.
    BufferTooLarge {
        name: String,
        bytes: u64,
        limit: u64,
    },
    /// One whole-bound buffer exceeds `max_storage_buffer_binding_size`.
    BindingTooLarge {
        name: String,
        bytes: u64,
        limit: u64,
    },
}

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misfit::OverBudget { total, budget } => write!(
                f,
                "needs {} but the budget is {} ({} over)",
                fmt_bytes(*total),
                fmt_bytes(*budget),
                fmt_bytes(total.saturating_sub(*budget))
            ),
            Misfit::BufferTooLarge { name, bytes, limit } => write!(
                f,
                "buffer {name} is {} but the device's max buffer size is {}",
                fmt_bytes(*bytes),
                fmt_bytes(*limit)
            ),
            Misfit::BindingTooLarge { name, bytes, limit } => write!(
                f,
                "buffer {name} is {} but the device's max storage binding is {}",
                fmt_bytes(*bytes),
                fmt_bytes(*limit)
            ),
        }
    }
}

impl Plan {
    /// Bytes in device memory: what the budget holds.
    pub fn total(&self) -> u64 {
        placement::device_bytes(&self.buffers)
    }

    /// Bytes in host memory the GPU reads ([`placement`]).
    pub fn host_total(&self) -> u64 {
        self.buffers
            .iter()
            .filter(|b| b.placement == Placement::Host)
            .map(|b| b.bytes)
            .sum()
    }

    /// Bytes of the buffers matching `owner` and `kind` (either may be `None` for all).
    pub fn sum(&self, owner: Option<Owner>, kind: Option<Kind>) -> u64 {
        self.buffers
            .iter()
            .filter(|b| owner.is_none_or(|o| o == b.owner) && kind.is_none_or(|k| k == b.kind))
            .map(|b| b.bytes)
            .sum()
    }

    pub fn get(&self, name: &str) -> Option<&PlannedBuffer> {
        self.buffers.iter().find(|b| b.name == name)
    }

    /// Every reason the plan does not fit (empty when it fits).
    pub fn misfits(&self) -> Vec<Misfit> {
        let mut out = Vec::new();
        for b in &self.buffers {
            if b.bytes > self.limits.max_buffer_size {
                out.push(Misfit::BufferTooLarge {
                    name: b.name.clone(),
                    bytes: b.bytes,
                    limit: self.limits.max_buffer_size,
                });
            } else if b.bound_whole && b.bytes > self.limits.max_storage_binding {
                out.push(Misfit::BindingTooLarge {
                    name: b.name.clone(),
                    bytes: b.bytes,
                    limit: self.limits.max_storage_binding,
                });
            }
        }
        let total = self.total();
        if total > self.budget.usable() {
            out.push(Misfit::OverBudget {
                total,
                budget: self.budget.usable(),
            });
        }
        out
    }

    pub fn fits(&self) -> bool {
        self.misfits().is_empty()
    }

    /// The misfits in a few lines: the budget line, then per limit the largest offender and a
    /// count of the others.
    pub fn misfit_summary(&self) -> Vec<String> {
        let all = self.misfits();
        let mut out: Vec<String> = all
            .iter()
            .filter(|m| matches!(m, Misfit::OverBudget { .. }))
            .map(|m| m.to_string())
            .collect();
        for binding in [false, true] {
            let group: Vec<&Misfit> = all
                .iter()
                .filter(|m| match m {
                    Misfit::BufferTooLarge { .. } => !binding,
                    Misfit::BindingTooLarge { .. } => binding,
                    Misfit::OverBudget { .. } => false,
                })
                .collect();
            let size = |m: &Misfit| match m {
                Misfit::BufferTooLarge { bytes, .. } | Misfit::BindingTooLarge { bytes, .. } => {
                    *bytes
                }
                Misfit::OverBudget { .. } => 0,
            };
            if let Some(worst) = group.iter().max_by_key(|m| size(m)) {
                let more = group.len() - 1;
                out.push(if more > 0 {
                    format!("{worst} (and {more} more buffers over that limit)")
                } else {
                    worst.to_string()
                });
            }
        }
        out
    }
}

/// `1.23 GiB`, `512.0 MiB`, `12.0 KiB`, `100 B`.
pub fn fmt_bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let x = b as f64;
    if x >= K * K * K {
        format!("{:.2} GiB", x / (K * K * K))
    } else if x >= K * K {
        format!("{:.1} MiB", x / (K * K))
    } else if x >= K {
        format!("{:.1} KiB", x / K)
    } else {
        format!("{b} B")
    }
}

/// Parse `16GiB`, `16G`, `8000MiB`, `1.5g`, `123456` (bytes).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult: f64 = match unit.trim() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0f64.powi(4),
        _ => return None,
    };
    let v = n * mult;
    (v.is_finite() && v >= 0.0 && v < u64::MAX as f64).then_some(v as u64)
}

/// The target's shape: hyperparameters and tensor infos (from a full or shape-only GGUF).
#[derive(Debug, Clone, Copy)]
pub struct TargetShape<'a> {
    pub hp: &'a crate::model::Hparams,
    pub tensors: &'a [crate::gguf::TensorInfo],
}

/// The drafter's shape.
#[derive(Debug, Clone, Copy)]
pub struct DrafterShape<'a> {
    pub meta: &'a crate::model::DrafterMeta,
    pub tensors: &'a [crate::gguf::TensorInfo],
}

/// Plan every buffer of a run of `p.n_seq` sequences (`-np`, 1 included) exactly as the engine
/// allocates them ([`batch`]: one set of activations for every sequence's rows, the weights
/// once, and per sequence a K/V cache, a hybrid's recurrent state with its checkpoint, and a
/// drafter). `flint plan`, the context fit and the load all plan with it.
pub fn plan(
    target: TargetShape<'_>,
    drafter: Option<DrafterShape<'_>>,
    p: &RunParams,
    budget: Budget,
    limits: DeviceLimits,
) -> Plan {
    let mut buffers = batch::buffers(target, drafter, p, &limits);
    placement::apply(&mut buffers, &p.placement, budget.usable());
    Plan {
        buffers,
        budget,
        limits,
    }
}

/// The plan of one single-sequence [`crate::model::forward::Forward`] (and its drafter): the
/// forward the CPU-oracle tests drive row by row, which no command runs.
pub fn forward_plan(
    target: TargetShape<'_>,
    drafter: Option<DrafterShape<'_>>,
    p: &RunParams,
    budget: Budget,
    limits: DeviceLimits,
) -> Plan {
    let mut buffers = target::buffers(target.hp, target.tensors, p, &limits);
    if let (Some(d), Some(dp)) = (drafter, p.draft.as_ref()) {
        buffers.extend(drafter::buffers(d.meta, d.tensors, p, dp, &limits));
    }
    placement::apply(&mut buffers, &p.placement, budget.usable());
    Plan {
        buffers,
        budget,
        limits,
    }
}
