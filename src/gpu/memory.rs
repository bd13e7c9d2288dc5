//! Device memory as the driver reports it, per adapter, through wgpu's hal interop.
//!
//! - Vulkan: the device-local heaps (`vkGetPhysicalDeviceMemoryProperties2`) and, where
//!   `VK_EXT_memory_budget` is present, their current budget and this process's usage.
//! - DX12: `IDXGIAdapter3::QueryVideoMemoryInfo` on the local segment group (budget and usage)
//!   and the adapter's dedicated video memory.
//! - Metal: the device's `recommendedMaxWorkingSetSize` (the memory it can use with good
//!   performance: about 3/4 of RAM on Apple silicon's unified memory, the VRAM on a discrete
//!   card) as both size and budget, and `currentAllocatedSize` as the usage.
//! - GL and anything else: `None` (the driver tells nothing that wgpu-hal reaches).
//!
//! Nothing here allocates on the device; the figures are read from the adapter alone.

/// What the driver says about an adapter's device-local memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverMemory {
    /// Bytes of device-local memory (the sum of the device-local heaps).
    pub device_local: u64,
    /// The driver's current budget for this process over those heaps, where it reports one.
    pub budget: Option<u64>,
    /// This process's current usage of those heaps, reported alongside the budget.
    pub usage: Option<u64>,
}

/// The driver's memory figures of `adapter`, or `None` when its backend reports none.
pub fn driver_memory(adapter: &wgpu::Adapter) -> Option<DriverMemory> {
    match adapter.get_info().backend {
        wgpu::Backend::Vulkan => vulkan(adapter),
        wgpu::Backend::Dx12 => dx12(adapter),
        wgpu::Backend::Metal => metal(adapter),
        _ => None,
    }
}

#[cfg(any(
    windows,
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd"
))]
fn vulkan(adapter: &wgpu::Adapter) -> Option<DriverMemory> {
    use ash::vk;
    // SAFETY: the hal adapter is only read (no handle escapes this function), and the adapter
    // outlives the guard.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let shared = hal.shared_instance();
    let instance = shared.raw_instance();
    let phd = hal.raw_physical_device();
    let caps = hal.physical_device_capabilities();
    let v11 = shared.instance_api_version() >= vk::API_VERSION_1_1
        && caps.properties().api_version >= vk::API_VERSION_1_1;
    if !v11 {
        // SAFETY: `phd` is a physical device of `instance`.
        let props = unsafe { instance.get_physical_device_memory_properties(phd) };
        return Some(DriverMemory {
            budget: None,
            usage: None,
            ..heaps(&props, None)
        });
    }
    let with_budget = caps.supports_extension(ash::ext::memory_budget::NAME);
    let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let mut props2 = vk::PhysicalDeviceMemoryProperties2::default();
    if with_budget {
        props2 = props2.push_next(&mut budget);
    }
    // SAFETY: `phd` is a physical device of a Vulkan 1.1 instance; the chain holds only the
    // budget structure of an extension the device supports.
    unsafe { instance.get_physical_device_memory_properties2(phd, &mut props2) };
    let props = props2.memory_properties;
    Some(heaps(&props, with_budget.then_some(&budget)))
}

/// Sums the device-local heaps of `props`, with their budgets and usage when given.
#[cfg(any(
    windows,
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd"
))]
fn heaps(
    props: &ash::vk::PhysicalDeviceMemoryProperties,
    budget: Option<&ash::vk::PhysicalDeviceMemoryBudgetPropertiesEXT<'_>>,
) -> DriverMemory {
    let n = (props.memory_heap_count as usize).min(props.memory_heaps.len());
    let local = (0..n).filter(|&i| {
        props.memory_heaps[i]
            .flags
            .contains(ash::vk::MemoryHeapFlags::DEVICE_LOCAL)
    });
    let sum = |f: &dyn Fn(usize) -> u64| local.clone().map(f).fold(0u64, u64::saturating_add);
    DriverMemory {
        device_local: sum(&|i| props.memory_heaps[i].size),
        budget: budget.map(|b| sum(&|i| b.heap_budget[i])),
        usage: budget.map(|b| sum(&|i| b.heap_usage[i])),
    }
}

#[cfg(not(any(
    windows,
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd"
)))]
fn vulkan(_adapter: &wgpu::Adapter) -> Option<DriverMemory> {
    None
}

#[cfg(windows)]
fn dx12(adapter: &wgpu::Adapter) -> Option<DriverMemory> {
    // SAFETY: the hal adapter is only read, and the adapter outlives the guard.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Dx12>() }?;
    let raw = hal.raw_adapter();
    // SAFETY: a plain query of the adapter's description.
    let desc = unsafe { raw.GetDesc1() }.ok()?;
    // The segment group's default value is DXGI_MEMORY_SEGMENT_GROUP_LOCAL (0): the
    // device-local segment.
    let info = raw.query_video_memory_info(Default::default()).ok();
    Some(DriverMemory {
        device_local: desc.DedicatedVideoMemory as u64,
        budget: info.as_ref().map(|i| i.Budget),
        usage: info.as_ref().map(|i| i.CurrentUsage),
    })
}

#[cfg(not(windows))]
fn dx12(_adapter: &wgpu::Adapter) -> Option<DriverMemory> {
    None
}

#[cfg(target_vendor = "apple")]
fn metal(adapter: &wgpu::Adapter) -> Option<DriverMemory> {
    use objc2_metal::MTLDevice;
    // SAFETY: the hal adapter is only read (no handle escapes this function), and the adapter
    // outlives the guard.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Metal>() }?;
    let device = hal.raw_device();
    // Metal has no heap list: the working-set size is what Apple's documentation tells an app to
    // keep its resources under, so it is the size and the budget both.
    let working_set = device.recommendedMaxWorkingSetSize();
    let allocated = device.currentAllocatedSize() as u64;
    Some(DriverMemory {
        device_local: working_set,
        budget: Some(working_set),
        usage: Some(allocated),
    })
}

#[cfg(not(target_vendor = "apple"))]
fn metal(_adapter: &wgpu::Adapter) -> Option<DriverMemory> {
    None
}
