//! Adapter enumeration and choice: which backends (`FLINT_BACKEND=vulkan|dx12|metal|gl|noop`,
//! or `DeviceOptions::backends`), the enumerated list that `flint devices` prints and
//! `--device N` indexes, and the default preference: discrete > integrated > virtual > other >
//! CPU, then Vulkan > Metal > DX12 > GL. Without a backend named, GL is searched only when
//! Vulkan, Metal and DX12 find nothing.
//!
//! `noop` is wgpu's backend whose kernels do nothing (buffers live in host memory, readbacks
//! return what was uploaded or zeros): `flint bench` on it measures what the host costs per
//! step. It is searched only when named, and it stands for a discrete GPU (the GPU kernel set,
//! 32-wide subgroups, an NVIDIA-like set of limits) unless `FLINT_NOOP_PROFILE=cpu` asks for a
//! CPU driver's kernel set.

use super::GpuError;

/// The backends searched first when neither `FLINT_BACKEND` nor `DeviceOptions::backends` says
/// otherwise.
pub const PRIMARY_BACKENDS: wgpu::Backends = wgpu::Backends::VULKAN
    .union(wgpu::Backends::METAL)
    .union(wgpu::Backends::DX12);

/// Searched only when the primary backends find no adapter (or when asked for by name): GL is
/// wgpu's downlevel backend (no subgroups, no f16, tighter limits), a last resort for compute.
pub const FALLBACK_BACKENDS: wgpu::Backends = wgpu::Backends::GL;

/// The limits that matter to flint, as an adapter reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLimits {
    pub max_storage_buffer_binding_size: u64,
    pub max_buffer_size: u64,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroup_size_x: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub max_storage_buffers_per_shader_stage: u32,
    /// Subgroup sizes from the adapter info (meaningful when `subgroups` is among the features).
    pub min_subgroup_size: u32,
    pub max_subgroup_size: u32,
}

/// One enumerated adapter, as `flint devices` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSummary {
    /// Position in the enumerated list: the `--device N` value.
    pub index: usize,
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub vendor: u32,
    pub device: u32,
    /// Feature names as wgpu spells them (`shader-f16`, `subgroups`, …).
    pub features: Vec<String>,
    pub limits: KeyLimits,
}

/// Parses a `FLINT_BACKEND` value: one or more of `vulkan`, `dx12`, `metal`, `gl`, comma-separated.
pub fn parse_backends(value: &str) -> Result<wgpu::Backends, GpuError> {
    let mut backends = wgpu::Backends::empty();
    for part in value.split(',') {
        backends |= match part.trim().to_ascii_lowercase().as_str() {
            "vulkan" | "vk" => wgpu::Backends::VULKAN,
            "dx12" | "d3d12" => wgpu::Backends::DX12,
            "metal" | "mtl" => wgpu::Backends::METAL,
            "gl" | "gles" | "opengl" => wgpu::Backends::GL,
            "noop" => wgpu::Backends::NOOP,
            _ => {
                return Err(GpuError::BadBackendEnv {
                    value: value.to_string(),
                })
            }
        };
    }
    Ok(backends)
}

/// What a search found: the instance the adapters belong to, the adapters in `--device N`
/// order, and the backends that were searched.
pub(crate) struct Found {
    pub instance: wgpu::Instance,
    pub adapters: Vec<wgpu::Adapter>,
    pub searched: wgpu::Backends,
}

/// Enumerates the adapters of `explicit` backends, else of `FLINT_BACKEND`, else of
/// [`PRIMARY_BACKENDS`] falling back to [`FALLBACK_BACKENDS`] when those find none.
pub(crate) fn find_adapters(explicit: Option<wgpu::Backends>) -> Result<Found, GpuError> {
    let chosen = match explicit {
        Some(b) => Some(b),
        None => match std::env::var("FLINT_BACKEND") {
            Ok(v) if !v.trim().is_empty() => Some(parse_backends(&v)?),
            Ok(_) | Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(v)) => {
                return Err(GpuError::BadBackendEnv {
                    value: v.to_string_lossy().into_owned(),
                })
            }
        },
    };
    if let Some(backends) = chosen {
        return Ok(enumerate(backends));
    }
    let primary = enumerate(PRIMARY_BACKENDS);
    if !primary.adapters.is_empty() {
        return Ok(primary);
    }
    let fallback = enumerate(FALLBACK_BACKENDS);
    Ok(Found {
        searched: PRIMARY_BACKENDS | FALLBACK_BACKENDS,
        ..fallback
    })
}

fn enumerate(backends: wgpu::Backends) -> Found {
    // wgpu's own switches (WGPU_VALIDATION, WGPU_DEBUG, …) still apply to the instance flags.
    let mut desc = wgpu::InstanceDescriptor {
        backends,
        flags: wgpu::InstanceFlags::from_build_config().with_env(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    };
    if backends.contains(wgpu::Backends::NOOP) {
        desc.backend_options.noop = noop_options();
    }
    let instance = wgpu::Instance::new(desc);
    let adapters = pollster::block_on(instance.enumerate_adapters(backends));
    Found {
        instance,
        adapters,
        searched: backends,
    }
}

pub(crate) fn summarize(index: usize, adapter: &wgpu::Adapter) -> AdapterSummary {
    let info = adapter.get_info();
    let limits = adapter.limits();
    AdapterSummary {
        index,
        name: info.name,
        backend: info.backend.to_str().to_string(),
        device_type: format!("{:?}", info.device_type),
        driver: info.driver,
        driver_info: info.driver_info,
        vendor: info.vendor,
        device: info.device,
        features: feature_names(adapter.features()),
        limits: KeyLimits {
            max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
            max_buffer_size: limits.max_buffer_size,
            max_compute_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
            max_compute_workgroup_size_x: limits.max_compute_workgroup_size_x,
            max_compute_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
            max_storage_buffers_per_shader_stage: limits.max_storage_buffers_per_shader_stage,
            min_subgroup_size: info.subgroup_min_size,
            max_subgroup_size: info.subgroup_max_size,
        },
    }
}

/// The kebab-case names of the flags in `features`.
pub fn feature_names(features: wgpu::Features) -> Vec<String> {
    features
        .iter()
        .map(|f| f.as_str().map_or_else(|| format!("{f:?}"), str::to_string))
        .collect()
}

/// Every adapter wgpu finds for the selected backends, in `--device N` order.
pub fn list_adapters() -> Result<Vec<AdapterSummary>, GpuError> {
    let found = find_adapters(None)?;
    let adapters = found.adapters.iter().enumerate();
    Ok(adapters.map(|(i, a)| summarize(i, a)).collect())
}

/// Every adapter with the memory figures its driver reports ([`super::memory`]), in
/// `--device N` order.
pub fn list_adapters_with_memory(
) -> Result<Vec<(AdapterSummary, Option<super::DriverMemory>)>, GpuError> {
    let found = find_adapters(None)?;
    let adapters = found.adapters.iter().enumerate();
    Ok(adapters
        .map(|(i, a)| (summarize(i, a), super::driver_memory(a)))
        .collect())
}

/// Lower is better: device type first, then backend.
pub(crate) fn preference(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let ty = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    };
    let backend = match info.backend {
        wgpu::Backend::Vulkan => 0,
        wgpu::Backend::Metal => 1,
        wgpu::Backend::Dx12 => 2,
        wgpu::Backend::Gl => 3,
        _ => 4,
    };
    (ty, backend)
}

/// The adapter [`super::GpuContext::new`] would pick for `index` (`--device N`; `None`: the
/// preferred one), or `None` when there is none (the context reports that error itself).
pub fn selected_adapter(index: Option<usize>) -> Result<Option<AdapterSummary>, GpuError> {
    Ok(selected_adapter_with_memory(index)?.map(|(a, _)| a))
}

/// [`selected_adapter`] with the memory figures its driver reports ([`super::memory`]).
pub fn selected_adapter_with_memory(
    index: Option<usize>,
) -> Result<Option<(AdapterSummary, Option<super::DriverMemory>)>, GpuError> {
    let found = find_adapters(None)?;
    let adapters = &found.adapters;
    let chosen = match index {
        Some(i) => i,
        None => (0..adapters.len())
            .min_by_key(|&i| (preference(&adapters[i].get_info()), i))
            .unwrap_or(0),
    };
    Ok(adapters
        .get(chosen)
        .map(|a| (summarize(chosen, a), super::driver_memory(a))))
}

/// The device line run commands print at start, like llama.cpp's:
/// `flint: llvmpipe (LLVM 15.0.6, 256 bits), vulkan, Mesa 22.3.6`.
pub fn device_line(a: &AdapterSummary) -> String {
    let mut driver = a.driver.clone();
    if !a.driver_info.is_empty() {
        if !driver.is_empty() {
            driver.push(' ');
        }
        driver.push_str(&a.driver_info);
    }
    if driver.is_empty() {
        driver = "driver unknown".into();
    }
    format!("flint: {}, {}, {driver}", a.name, a.backend)
}

/// The extra line for an adapter on GL (wgpu's `gl` backend), which flint uses only when
/// Vulkan, Metal and DX12 find nothing or `FLINT_BACKEND=gl` asks for it; `None` elsewhere.
pub fn gl_note(a: &AdapterSummary) -> Option<String> {
    if !a.backend.eq_ignore_ascii_case("gl") {
        return None;
    }
    let install = if cfg!(target_os = "linux") {
        "install a Vulkan driver (Debian/Ubuntu: `apt install mesa-vulkan-drivers`, or your GPU vendor's driver)"
    } else {
        "install a current GPU driver (Vulkan or DX12 on Windows; Metal is built into macOS)"
    };
    Some(format!(
        "flint: running on OpenGL (GL): much slower than Vulkan, Metal or DX12, and shader \
         compilation takes minutes; {install}"
    ))
}

/// The `noop` adapter flint asks for: a discrete GPU's features and limits (those of a
/// current NVIDIA Vulkan driver where they matter to flint's kernel and plan choices).
fn noop_options() -> wgpu::NoopBackendOptions {
    let limits = wgpu::Limits {
        max_storage_buffer_binding_size: u64::from(u32::MAX - 3),
        max_buffer_size: 1 << 40,
        max_compute_workgroup_storage_size: 49_152,
        max_compute_invocations_per_workgroup: 1024,
        max_compute_workgroup_size_x: 1024,
        max_compute_workgroup_size_y: 1024,
        max_compute_workgroup_size_z: 64,
        max_compute_workgroups_per_dimension: 65_535,
        max_storage_buffers_per_shader_stage: 1 << 20,
        max_bindings_per_bind_group: 1000,
        ..wgpu::Limits::default()
    };
    // What flint may ask for on a discrete GPU; the noop adapter would offer every feature.
    let features = wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP
        | wgpu::Features::SHADER_INT64
        | wgpu::Features::TIMESTAMP_QUERY
        | wgpu::Features::MAPPABLE_PRIMARY_BUFFERS;
    wgpu::NoopBackendOptions {
        enable: true,
        limits: Some(limits),
        features: Some(features),
        device_type: Some(wgpu::DeviceType::DiscreteGpu),
        subgroup_min_size: Some(32),
        subgroup_max_size: Some(32),
    }
}

/// Whether an adapter on `backend` runs flint's CPU-driver kernel set: a CPU device type, or
/// `noop` when `FLINT_NOOP_PROFILE=cpu` (wgpu's noop adapter reports a CPU device type whatever
/// it is given, so the profile is flint's to choose).
pub fn cpu_profile(backend: wgpu::Backend, device_type: wgpu::DeviceType) -> bool {
    if backend == wgpu::Backend::Noop {
        return std::env::var("FLINT_NOOP_PROFILE").is_ok_and(|v| v.eq_ignore_ascii_case("cpu"));
    }
    device_type == wgpu::DeviceType::Cpu
}
