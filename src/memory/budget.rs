//! The memory budget and the device limits a plan is checked against.
//!
//! Budget, first that applies:
//! 1. `--gpu-mem` when given;
//! 2. a CPU adapter (lavapipe, llvmpipe): the host's available memory (Linux);
//! 3. what the driver reports ([`crate::gpu::memory`]): the device-local heap less a headroom,
//!    or the driver's current budget less this process's usage where that is smaller (some
//!    drivers report a constant budget, so the heap bounds it);
//! 4. else a stated default of 8 GiB, which the plan names as such.
//!
//! A headroom (default 5 %, at least 256 MiB) is kept free for the driver and other programs;
//! a driver budget already leaves out what others use, so none is taken from it.

use crate::gpu::{DriverMemory, GpuContext};

/// Budget when nothing better is known.
pub const DEFAULT_BUDGET: u64 = 8 << 30;

/// Where the budget figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetSource {
    /// `--gpu-mem`.
    Flag,
    /// The host's available memory (a CPU adapter).
    Host,
    /// The driver's device-local heap size.
    Heap,
    /// The driver's current budget less this process's usage (`VK_EXT_memory_budget`,
    /// `QueryVideoMemoryInfo`).
    DriverBudget,
    /// [`DEFAULT_BUDGET`]: the driver tells nothing.
    Default,
}

impl BudgetSource {
    pub fn name(self) -> &'static str {
        match self {
            BudgetSource::Flag => "--gpu-mem",
            BudgetSource::Host => "host memory",
            BudgetSource::Heap => "device-local heap",
            BudgetSource::DriverBudget => "driver budget",
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

    /// `--gpu-mem` if given, else what the context's adapter lets us know, else the default.
    pub fn resolve(flag: Option<u64>, ctx: Option<&GpuContext>) -> Budget {
        let memory = ctx.and_then(|c| crate::gpu::driver_memory(c.adapter()));
        Budget::resolve_for(flag, ctx.is_some_and(GpuContext::is_cpu), memory)
    }

    /// `--gpu-mem` if given, else the host's memory for a CPU adapter, else the driver's
    /// figures ([`Budget::from_driver`]), else the default.
    pub fn resolve_for(flag: Option<u64>, is_cpu: bool, memory: Option<DriverMemory>) -> Budget {
        if let Some(b) = flag {
            return Budget::new(b, BudgetSource::Flag);
        }
        if is_cpu {
            if let Some(b) = host_available_memory() {
                return Budget::new(b, BudgetSource::Host);
            }
        }
        memory
            .and_then(Budget::from_driver)
            .unwrap_or_else(|| Budget::new(DEFAULT_BUDGET, BudgetSource::Default))
    }

    /// The smaller of the device-local heap less the headroom and a driver budget that looks
    /// live (reported, non-zero, within the heap, at least the usage) less the usage; `None`
    /// when the driver reports no device-local memory.
    pub fn from_driver(m: DriverMemory) -> Option<Budget> {
        if m.device_local == 0 {
            return None;
        }
        let heap = Budget::new(m.device_local, BudgetSource::Heap);
        let live = match (m.budget, m.usage) {
            (Some(b), Some(u)) if b > 0 && b <= m.device_local && u <= b => Some(b - u),
            _ => None,
        };
        Some(match live {
            Some(avail) if avail < heap.usable() => Budget {
                bytes: avail,
                headroom: 0,
                source: BudgetSource::DriverBudget,
            },
            _ => heap,
        })
    }
}

#[cfg(target_os = "linux")]
pub fn host_available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(not(target_os = "linux"))]
pub fn host_available_memory() -> Option<u64> {
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

    /// The limits of an enumerated adapter (a device gets the adapter's limits).
    pub fn from_summary(a: &crate::gpu::AdapterSummary) -> DeviceLimits {
        DeviceLimits {
            max_buffer_size: a.limits.max_buffer_size,
            max_storage_binding: a.limits.max_storage_buffer_binding_size,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn driver(device_local: u64, budget: Option<u64>, usage: Option<u64>) -> Budget {
        Budget::resolve_for(
            None,
            false,
            Some(DriverMemory {
                device_local,
                budget,
                usage,
            }),
        )
    }

    #[test]
    fn heap_less_headroom_without_a_budget() {
        let b = driver(16 * GIB, None, None);
        assert_eq!(b.source, BudgetSource::Heap);
        assert_eq!(b.usable(), 16 * GIB - 16 * GIB / 20);
    }

    #[test]
    fn a_smaller_live_budget_wins() {
        // Another program holds 6 GiB: the driver's budget says 10, of which we use 1.
        let b = driver(16 * GIB, Some(10 * GIB), Some(GIB));
        assert_eq!(
            (b.source, b.usable()),
            (BudgetSource::DriverBudget, 9 * GIB)
        );
    }

    #[test]
    fn a_constant_budget_above_the_heap_less_headroom_is_bounded_by_the_heap() {
        // total − 768 MiB with usage 0, as one driver reports whatever is in use.
        let b = driver(16 * GIB, Some(16 * GIB - (768 << 20)), Some(0));
        assert_eq!(b.source, BudgetSource::Heap);
        // A budget above the heap is not live.
        assert_eq!(
            driver(8 * GIB, Some(9 * GIB), Some(0)).source,
            BudgetSource::Heap
        );
    }

    #[test]
    fn the_default_only_when_the_driver_tells_nothing() {
        let none = Budget::resolve_for(None, false, None);
        assert_eq!(
            (none.source, none.bytes),
            (BudgetSource::Default, DEFAULT_BUDGET)
        );
        assert_eq!(driver(0, None, None).source, BudgetSource::Default);
        let flag = Budget::resolve_for(Some(GIB), false, None);
        assert_eq!(flag.source, BudgetSource::Flag);
    }
}
