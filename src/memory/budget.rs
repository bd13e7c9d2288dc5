//! The memory budget and the device limits a plan is checked against.
//!
//! Budget: `--gpu-mem` when given; else what the adapter lets us know (for a CPU adapter such as
//! lavapipe, the host's available memory on Linux); else a stated default of 8 GiB. wgpu does not
//! report a discrete GPU's memory size, so on real GPUs pass `--gpu-mem`. A headroom (default
//! 5 %, at least 256 MiB) is kept free for the driver and other programs.

use crate::gpu::GpuContext;

/// Budget when nothing better is known.
pub const DEFAULT_BUDGET: u64 = 8 << 30;

/// Where the budget figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetSource {
    /// `--gpu-mem`.
    Flag,
    /// The adapter (host memory of a CPU adapter).
    Adapter,
    /// [`DEFAULT_BUDGET`].
    Default,
}

impl BudgetSource {
    pub fn name(self) -> &'static str {
        match self {
            BudgetSource::Flag => "--gpu-mem",
            BudgetSource::Adapter => "adapter",
            BudgetSource::Default => "default",
        }
    }
}

/// Device memory available to the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub bytes: u64,
    pub headroom: u64,
    pub source: BudgetSource,
}

impl Budget {
    /// A budget of `bytes` with the default headroom (5 %, at least 256 MiB, at most the budget).
    pub fn new(bytes: u64, source: BudgetSource) -> Budget {
        let headroom = (bytes / 20).max(256 << 20).min(bytes);
        Budget {
            bytes,
            headroom,
            source,
        }
    }

    /// With an explicit headroom.
    pub fn with_headroom(mut self, headroom: u64) -> Budget {
        self.headroom = headroom.min(self.bytes);
        self
    }

    /// Bytes the plan may use.
    pub fn usable(&self) -> u64 {
        self.bytes - self.headroom
    }

    /// `--gpu-mem` if given, else the adapter's figure if one is known, else the default.
    pub fn resolve(flag: Option<u64>, ctx: Option<&GpuContext>) -> Budget {
        if let Some(b) = flag {
            return Budget::new(b, BudgetSource::Flag);
        }
        if let Some(b) = ctx.and_then(adapter_memory) {
            return Budget::new(b, BudgetSource::Adapter);
        }
        Budget::new(DEFAULT_BUDGET, BudgetSource::Default)
    }
}

/// Memory the adapter can use, where it can be known: a CPU adapter uses host memory.
fn adapter_memory(ctx: &GpuContext) -> Option<u64> {
    if ctx.is_cpu() {
        host_available_memory()
    } else {
        None
    }
}

#[cfg(target_os = "linux")]
fn host_available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(not(target_os = "linux"))]
fn host_available_memory() -> Option<u64> {
    None
}

/// The per-buffer and per-binding limits a plan is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    pub max_buffer_size: u64,
    pub max_storage_binding: u64,
}

impl DeviceLimits {
    /// Limits of a typical discrete GPU under wgpu (used when planning without an adapter):
    /// 4 GiB buffers, 2 GiB storage bindings.
    pub const GENERIC: DeviceLimits = DeviceLimits {
        max_buffer_size: 4 << 30,
        max_storage_binding: (2 << 30) - 4,
    };

    pub fn from_context(ctx: &GpuContext) -> DeviceLimits {
        let l = ctx.limits();
        DeviceLimits {
            max_buffer_size: l.max_buffer_size,
            max_storage_binding: l.max_storage_buffer_binding_size,
        }
    }
}
