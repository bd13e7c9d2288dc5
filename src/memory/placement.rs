//! Where each planned buffer lives: device memory, or host memory the GPU reads over the bus
//! (docs/MEMORY.md, docs/LLAMA_CPP.md). Only weights move to the host; everything a step
//! writes stays on the device.
//!
//! Rules, as llama.cpp spells them (`common/arg.cpp`): `-ot/--override-tensor PATTERN=CPU|GPU`
//! (a regex searched anywhere in the tensor name; the first pattern that matches decides; `CPU`
//! means host memory here, any other buffer type the device), `--cpu-moe` (every layer's
//! routed experts, `\.ffn_(up|down|gate)_exps`), `--n-cpu-moe N` (those of layers `0..N`).
//! Explicit `-ot` patterns come first, so they win over the two shorthands.
//!
//! Without any rule the placement is automatic (llama.cpp's `--fit`): when the device part
//! does not fit the budget, the routed experts of whole layers move to the host, from the last
//! layer down, until it fits. Dense tensors never move unless a pattern says so.

use fancy_regex::Regex;

use super::{Kind, Owner, PlannedBuffer};

/// Where a buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Placement {
    /// Device memory (counted against the budget).
    #[default]
    Device,
    /// Host memory the GPU reads directly (mappable storage buffers); not in the budget.
    Host,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::Device => "device",
            Placement::Host => "host",
        }
    }
}

/// The placement rules of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementRules {
    /// `(pattern, placement)` in order; the first whose regex matches a tensor name decides.
    pub overrides: Vec<(String, Placement)>,
    /// Move experts to the host, last layer first, while the device part does not fit.
    pub auto: bool,
}

impl Default for PlacementRules {
    fn default() -> Self {
        PlacementRules {
            overrides: Vec::new(),
            auto: true,
        }
    }
}

/// Why a placement flag is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("-ot {spec:?}: expected PATTERN=BUFFER_TYPE (e.g. exps=CPU)")]
    Syntax { spec: String },
    #[error("-ot {pattern:?}: not a regular expression: {message}")]
    Regex { pattern: String, message: String },
}

/// llama.cpp's `--cpu-moe` pattern (`LLM_FFN_EXPS_REGEX`).
pub const EXPS_PATTERN: &str = r"\.ffn_(up|down|gate)_exps";

/// The rules of `-ot` specs (each `P=T[,P=T…]`), `--cpu-moe` and `--n-cpu-moe N`. No flag at
/// all: automatic placement.
pub fn rules(
    override_tensor: &[String],
    cpu_moe: bool,
    n_cpu_moe: Option<u32>,
) -> Result<PlacementRules, PlacementError> {
    let mut overrides = Vec::new();
    for spec in override_tensor {
        for part in spec.split(',').filter(|p| !p.is_empty()) {
            let Some((pattern, ty)) = part.rsplit_once('=') else {
                return Err(PlacementError::Syntax { spec: part.into() });
            };
            if pattern.is_empty() || ty.is_empty() {
                return Err(PlacementError::Syntax { spec: part.into() });
            }
            Regex::new(pattern).map_err(|e| PlacementError::Regex {
                pattern: pattern.into(),
                message: e.to_string(),
            })?;
            // llama.cpp's host buffer types are CPU and its repacked variants (CPU_REPACK …).
            let to = match ty.to_ascii_uppercase().starts_with("CPU") {
                true => Placement::Host,
                false => Placement::Device,
            };
            overrides.push((pattern.to_string(), to));
        }
    }
    if cpu_moe {
        overrides.push((EXPS_PATTERN.to_string(), Placement::Host));
    }
    for il in 0..n_cpu_moe.unwrap_or(0) {
        overrides.push((format!(r"blk\.{il}{EXPS_PATTERN}"), Placement::Host));
    }
    let auto = override_tensor.is_empty() && !cpu_moe && n_cpu_moe.is_none();
    Ok(PlacementRules { overrides, auto })
}

pub use crate::model::moe::expert_layer;

/// Bytes of the device-placed buffers.
pub fn device_bytes(buffers: &[PlannedBuffer]) -> u64 {
    buffers
        .iter()
        .filter(|b| b.placement == Placement::Device)
        .map(|b| b.bytes)
        .sum()
}

/// Applies `rules` to the target's weights in `buffers`; with automatic placement and a device
/// part over `usable`, moves the experts of whole layers to the host, last layer first, until
/// it fits. Returns how many layers' experts the automatic step moved.
pub fn apply(buffers: &mut [PlannedBuffer], rules: &PlacementRules, usable: u64) -> u32 {
    let compiled: Vec<(Regex, Placement)> = rules
        .overrides
        .iter()
        .filter_map(|(p, to)| Regex::new(p).ok().map(|r| (r, *to)))
        .collect();
    let movable = |b: &PlannedBuffer| b.owner == Owner::Target && b.kind == Kind::Weights;
    for b in buffers.iter_mut().filter(|b| movable(b)) {
        if let Some((_, to)) = compiled
            .iter()
            .find(|(r, _)| r.is_match(&b.name).unwrap_or(false))
        {
            b.placement = *to;
        }
    }
    if !rules.auto {
        return 0;
    }
    let mut layers: Vec<u32> = buffers
        .iter()
        .filter(|b| movable(b))
        .filter_map(|b| expert_layer(&b.name))
        .collect();
    layers.sort_unstable();
    layers.dedup();
    let mut moved = 0;
    for il in layers.into_iter().rev() {
        if device_bytes(buffers) <= usable {
            break;
        }
        for b in buffers.iter_mut().filter(|b| movable(b)) {
            if expert_layer(&b.name) == Some(il) {
                b.placement = Placement::Host;
            }
        }
        moved += 1;
    }
    moved
}

/// Layers whose routed experts are all on the host, ascending.
pub fn host_expert_layers(buffers: &[PlannedBuffer]) -> Vec<u32> {
    let mut layers: Vec<(u32, bool)> = buffers
        .iter()
        .filter_map(|b| expert_layer(&b.name).map(|il| (il, b.placement == Placement::Host)))
        .collect();
    layers.sort_unstable();
    let mut out: Vec<u32> = Vec::new();
    for il in layers.iter().map(|&(il, _)| il) {
        if out.last() != Some(&il) && layers.iter().all(|&(l, h)| l != il || h) {
            out.push(il);
        }
    }
    out
}

/// The one line that says what automatic placement did (`None` when it moved nothing or the
/// placement was asked for with flags).
pub fn auto_line(plan: &super::Plan, rules: &PlacementRules) -> Option<String> {
    let layers = host_expert_layers(&plan.buffers);
    let (first, last) = (layers.first()?, layers.last()?);
    if !rules.auto {
        return None;
    }
    Some(format!(
        "the weights do not fit the device budget of {}: the routed experts of layers {first}-{last} \
         ({} layers, {}) go to host memory, which the GPU reads directly (choose with --n-cpu-moe \
         or -ot)",
        super::fmt_bytes(plan.budget.usable()),
        layers.len(),
        super::fmt_bytes(plan.host_total()),
    ))
}
