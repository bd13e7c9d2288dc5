//! GPU layer: adapter and device selection, error capture, shader registry, pipeline cache and
//! buffer helpers, on wgpu (Vulkan first; DX12, Metal and GL where wgpu reaches them).
//!
//! - [`adapters`]: backend selection (`FLINT_BACKEND`), adapter enumeration ([`list_adapters`],
//!   what `flint devices` prints) and the default preference.
//! - [`device`]: [`GpuContext`] (the device with the features and limits actually granted, an
//!   uncaptured-error recorder, device-lost tracking, error-scope helpers).
//! - [`shaders`]: the shaders embedded by `build.rs`, the tiny preprocessor (`#define`,
//!   `#ifdef`/`#ifndef`/`#else`/`#endif`) and [`ShaderVariant`], the unit the registry lists.
//! - [`pipelines`]: a cache that builds each (shader, variant) compute pipeline once.
//! - [`buffers`]: storage/uniform/staging buffers checked against the device limits first,
//!   uploads, and a blocking readback.
//! - [`staging`]: the readback staging buffers kept between readbacks.
//! - [`exit`]: [`end_process`], the end of a process whose threads may still be in the driver
//!   (`flint serve`), without the library teardown that races them.
//!
//! Nothing here panics on device results: wgpu errors come back as [`GpuError`] values with the
//! offending numbers, through error scopes or the recorded uncaptured errors.

pub mod adapters;
pub mod buffers;
pub mod device;
pub mod exit;
pub mod host_buffers;
pub mod memory;
pub mod pipelines;
pub mod shaders;
pub mod staging;

pub use adapters::{list_adapters, parse_backends, AdapterSummary, KeyLimits};
pub use device::{CapturedError, CounterSnapshot, Counters, DeviceOptions, GpuContext, LostInfo};
pub use exit::end_process;
pub use memory::{driver_memory, DriverMemory};
pub use pipelines::{CachedPipeline, PipelineCache};
pub use shaders::{preprocess, shader_source, BindingKind, BindingSpec, ShaderVariant};

use crate::gguf::GgmlType;

/// Errors of the GPU layer. Every variant names the offending values.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no GPU adapter found for backends {backends}")]
    NoAdapter { backends: String },
    #[error(
        "adapter index {index} is out of range: {count} adapter(s) found (see `flint devices`)"
    )]
    AdapterIndexOutOfRange { index: usize, count: usize },
    #[error("FLINT_BACKEND={value:?} is not one of vulkan, dx12, metal, gl, noop")]
    BadBackendEnv { value: String },
    #[error(
        "{what}: host-placed weights need storage buffers in host memory \
         (MAPPABLE_PRIMARY_BUFFERS), which adapter {adapter:?} does not offer; \
         keep every tensor on the device (no --cpu-moe, --n-cpu-moe, -ot …=CPU) or pick another adapter"
    )]
    HostStorageUnsupported { adapter: String, what: String },
    #[error("requesting a device from adapter {adapter:?} failed: {message}")]
    RequestDevice { adapter: String, message: String },
    #[error("validation error in {what}: {message}")]
    Validation { what: String, message: String },
    #[error("internal GPU error in {what}: {message}")]
    Internal { what: String, message: String },
    #[error("out of device memory in {what} ({bytes} bytes requested; 0 = not an allocation)")]
    OutOfMemory { what: String, bytes: u64 },
    #[error("device lost ({reason}): {message}")]
    DeviceLost { reason: String, message: String },
    #[error("timed out after {seconds} s waiting for the device in {what}")]
    Timeout { what: String, seconds: u64 },
    #[error("shader {name} variant [{variant}] failed to build: {message}")]
    Shader {
        name: String,
        variant: String,
        message: String,
    },
    #[error("shader {name} variant [{variant}] needs device feature {feature}, not granted")]
    MissingFeature {
        name: String,
        variant: String,
        feature: String,
    },
    #[error("unknown shader {name:?} (not under shaders/)")]
    UnknownShader { name: String },
    #[error("preprocessing shader {name}, line {line}: {message}")]
    Preprocess {
        name: String,
        line: usize,
        message: String,
    },
    #[error("writing shader dump {path}: {message}")]
    DumpShader { path: String, message: String },
    #[error("mapping a buffer for readback failed: {message}")]
    Map { message: String },
    #[error("{what} needs {bytes} bytes, over the device limit of {limit} bytes")]
    BufferTooLarge {
        what: String,
        bytes: u64,
        limit: u64,
    },
    #[error("{what} needs {groups} workgroups, more than {max_per_dim}^2 (2D dispatch limit)")]
    DispatchTooLarge {
        what: String,
        groups: u64,
        max_per_dim: u32,
    },
    #[error("{op} does not support tensor type {ty}")]
    UnsupportedType { op: String, ty: GgmlType },
    #[error("{what}: expected {expected}, got {actual}")]
    BadInput {
        what: String,
        expected: String,
        actual: String,
    },
}
