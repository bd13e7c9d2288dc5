//! The device, and everything that keeps device errors from becoming panics.
//!
//! [`GpuContext::new`] picks an adapter (see [`super::adapters`]: `--device N` or the preferred
//! one among the backends `FLINT_BACKEND` allows) and creates the device. The device gets `SHADER_F16` and `SUBGROUP` when the adapter offers them
//! (unless forced off) and the adapter's real limits, not WebGPU's defaults (lowered by the
//! overrides tests use to force the fallbacks).
//!
//! Errors: an uncaptured-error handler records instead of panicking
//! ([`GpuContext::take_uncaptured_errors`]); a device-lost callback records the loss, after which
//! every operation returns [`GpuError::DeviceLost`]; [`GpuContext::scoped`] runs a closure inside
//! pushed OutOfMemory + Validation + Internal error scopes and turns what they catch into typed
//! errors. Waits have a timeout, and a wgpu panic inside `Device::poll` (wgpu 30 panics there
//! when the device is lost mid-wait) is caught and reported as a loss.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::adapters::AdapterSummary;
use super::adapters::{feature_names, find_adapters, preference, summarize};
use super::pipelines::PipelineCache;
use super::GpuError;

thread_local! {
    /// This thread is inside [`GpuContext::step_scope`]: its error scopes catch what the calls
    /// inside do, so [`GpuContext::scoped`] pushes none of its own.
    static IN_STEP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How a [`GpuContext`] is created. `Default` = best adapter, every useful feature, real limits.
#[derive(Debug, Clone)]
pub struct DeviceOptions {
    /// Index into the enumerated adapter list (`flint devices`); `None` picks the best.
    pub index: Option<usize>,
    /// Backends to enumerate; `None` reads `FLINT_BACKEND`, and if that is unset searches
    /// Vulkan, Metal and DX12, then GL only if those find nothing.
    pub backends: Option<wgpu::Backends>,
    /// Request `SHADER_F16` when offered. `false` forces the f16-free shader variants.
    pub allow_f16: bool,
    /// Request `SUBGROUP` when offered. `false` forces the subgroup-free shader variants.
    pub allow_subgroups: bool,
    /// Lower `max_storage_buffer_binding_size` to at most this many bytes.
    pub max_storage_binding_override: Option<u64>,
    /// Lower `max_compute_workgroups_per_dimension` to at most this.
    pub max_workgroups_per_dimension_override: Option<u32>,
    /// The longest a blocking wait on the device may take before [`GpuError::Timeout`].
    pub poll_timeout: Duration,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            index: None,
            backends: None,
            allow_f16: true,
            allow_subgroups: true,
            max_storage_binding_override: None,
            max_workgroups_per_dimension_override: None,
            poll_timeout: Duration::from_secs(120),
        }
    }
}

/// An error wgpu reported outside any error scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedError {
    /// `validation`, `out-of-memory` or `internal`.
    pub kind: &'static str,
    pub message: String,
}

/// Why and how the device was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostInfo {
    /// wgpu's `DeviceLostReason` (`Destroyed`, `Unknown`), or where flint noticed the loss.
    pub reason: String,
    pub message: String,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn kind_of(e: &wgpu::Error) -> &'static str {
    match e {
        wgpu::Error::OutOfMemory { .. } => "out-of-memory",
        wgpu::Error::Validation { .. } => "validation",
        wgpu::Error::Internal { .. } => "internal",
    }
}

/// A device, its queue, and what was actually granted.
pub struct GpuContext {
    instance: wgpu::Instance,
    adapter: wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
    summary: AdapterSummary,
    features: wgpu::Features,
    limits: wgpu::Limits,
    errors: Arc<Mutex<Vec<CapturedError>>>,
    lost: Arc<Mutex<Option<LostInfo>>>,
    pipelines: PipelineCache,
    poll_timeout: Duration,
    counters: Counters,
    /// The CPU-driver kernel set is chosen ([`super::adapters::cpu_profile`]).
    cpu_profile: bool,
    /// Readback staging buffers kept between readbacks.
    staging: super::staging::StagingPool,
}

/// Queue submissions, host readbacks and blocking waits since the context was created
/// (`flint bench` reports them per step).
#[derive(Debug, Default)]
pub struct Counters {
    pub submits: std::sync::atomic::AtomicU64,
    pub readbacks: std::sync::atomic::AtomicU64,
    /// Blocking waits for the device (`poll(Wait)`), and the nanoseconds spent in them.
    pub waits: std::sync::atomic::AtomicU64,
    pub wait_nanos: std::sync::atomic::AtomicU64,
}

/// The counters at one moment; the difference of two is what happened between them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CounterSnapshot {
    pub submits: u64,
    pub readbacks: u64,
    pub waits: u64,
    pub wait_nanos: u64,
}

impl std::ops::Sub for CounterSnapshot {
    type Output = CounterSnapshot;
    fn sub(self, o: CounterSnapshot) -> CounterSnapshot {
        CounterSnapshot {
            submits: self.submits.saturating_sub(o.submits),
            readbacks: self.readbacks.saturating_sub(o.readbacks),
            waits: self.waits.saturating_sub(o.waits),
            wait_nanos: self.wait_nanos.saturating_sub(o.wait_nanos),
        }
    }
}

impl Counters {
    /// (submits, readbacks) so far.
    pub fn get(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.submits.load(Relaxed), self.readbacks.load(Relaxed))
    }

    /// Every counter now.
    pub fn snapshot(&self) -> CounterSnapshot {
        use std::sync::atomic::Ordering::Relaxed;
        CounterSnapshot {
            submits: self.submits.load(Relaxed),
            readbacks: self.readbacks.load(Relaxed),
            waits: self.waits.load(Relaxed),
            wait_nanos: self.wait_nanos.load(Relaxed),
        }
    }

    /// A blocking wait of `nanos` happened.
    pub fn waited(&self, nanos: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.waits.fetch_add(1, Relaxed);
        self.wait_nanos.fetch_add(nanos, Relaxed);
    }

    pub fn submitted(&self) {
        self.submits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn read_back(&self) {
        self.readbacks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The features to request: f16 and subgroups when offered and allowed, 64-bit integers when
/// offered, and `extra` (refused when not offered).
fn features(
    opts: &DeviceOptions,
    offered: wgpu::Features,
    extra: wgpu::Features,
    adapter: &str,
) -> Result<wgpu::Features, GpuError> {
    let mut features = wgpu::Features::empty();
    if opts.allow_f16 && offered.contains(wgpu::Features::SHADER_F16) {
        features |= wgpu::Features::SHADER_F16;
    }
    if opts.allow_subgroups && offered.contains(wgpu::Features::SUBGROUP) {
        features |= wgpu::Features::SUBGROUP;
    }
    // 64-bit loads halve the per-component load cost of CPU drivers (matmul_rows.wgsl).
    if offered.contains(wgpu::Features::SHADER_INT64) {
        features |= wgpu::Features::SHADER_INT64;
    }
    if !offered.contains(extra) {
        return Err(GpuError::HostStorageUnsupported {
            adapter: adapter.to_string(),
            what: "the device".to_string(),
        });
    }
    Ok(features | extra)
}

impl GpuContext {
    /// Picks an adapter and creates the device (see the module docs for the policy).
    pub fn new(opts: &DeviceOptions) -> Result<GpuContext, GpuError> {
        Self::with_features(opts, wgpu::Features::empty())
    }

    /// [`GpuContext::new`] also requesting `extra` (each refused with
    /// [`GpuError::HostStorageUnsupported`] for `MAPPABLE_PRIMARY_BUFFERS`, the one extra
    /// feature flint asks for, when the adapter lacks it).
    pub fn with_features(
        opts: &DeviceOptions,
        extra: wgpu::Features,
    ) -> Result<GpuContext, GpuError> {
        let found = find_adapters(opts.backends)?;
        let (instance, adapters) = (found.instance, found.adapters);
        let count = adapters.len();
        if count == 0 {
            return Err(GpuError::NoAdapter {
                backends: format!("{:?}", found.searched),
            });
        }
        let chosen = match opts.index {
            Some(index) => index,
            None => (0..count)
                .min_by_key(|&i| (preference(&adapters[i].get_info()), i))
                .unwrap_or(0),
        };
        let adapter = adapters
            .into_iter()
            .nth(chosen)
            .ok_or(GpuError::AdapterIndexOutOfRange {
                index: chosen,
                count,
            })?;
        let summary = summarize(chosen, &adapter);

        let features = features(opts, adapter.features(), extra, &summary.name)?;
        let mut limits = adapter.limits();
        if let Some(max) = opts.max_storage_binding_override {
            // Storage bindings are whole words: keep the limit a multiple of 4.
            limits.max_storage_buffer_binding_size =
                limits.max_storage_buffer_binding_size.min(max) & !3;
        }
        if let Some(max) = opts.max_workgroups_per_dimension_override {
            limits.max_compute_workgroups_per_dimension =
                limits.max_compute_workgroups_per_dimension.min(max);
        }
        let desc = wgpu::DeviceDescriptor {
            label: Some("flint"),
            required_features: features,
            required_limits: limits,
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc)).map_err(|e| {
            GpuError::RequestDevice {
                adapter: summary.name.clone(),
                message: e.to_string(),
            }
        })?;

        let errors: Arc<Mutex<Vec<CapturedError>>> = Arc::default();
        let sink = Arc::clone(&errors);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            tracing::error!("wgpu error outside any error scope: {e}");
            lock(&sink).push(CapturedError {
                kind: kind_of(&e),
                message: e.to_string(),
            });
        }));
        let lost: Arc<Mutex<Option<LostInfo>>> = Arc::default();
        let lost_sink = Arc::clone(&lost);
        device.set_device_lost_callback(move |reason, message| {
            // `Destroyed` is the device's own teardown (flint's, on exit), not a failure.
            if reason == wgpu::DeviceLostReason::Destroyed {
                tracing::debug!("GPU device destroyed: {message}");
            } else {
                tracing::error!("GPU device lost ({reason:?}): {message}");
            }
            lock(&lost_sink).get_or_insert(LostInfo {
                reason: format!("{reason:?}"),
                message,
            });
        });

        Ok(GpuContext {
            features: device.features(),
            limits: device.limits(),
            instance,
            device,
            queue,
            summary,
            errors,
            lost,
            pipelines: PipelineCache::default(),
            poll_timeout: opts.poll_timeout,
            counters: Counters::default(),
            staging: super::staging::StagingPool::default(),
            cpu_profile: {
                let info = adapter.get_info();
                super::adapters::cpu_profile(info.backend, info.device_type)
            },
            adapter,
        })
    }

    pub fn instance(&self) -> &wgpu::Instance {
        &self.instance
    }
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.adapter
    }
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// Readback staging buffers kept between readbacks.
    pub fn staging(&self) -> &super::staging::StagingPool {
        &self.staging
    }
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }
    /// The chosen adapter as `flint devices` describes it (adapter-level features and limits).
    pub fn info(&self) -> &AdapterSummary {
        &self.summary
    }
    /// The features the device was granted.
    pub fn features(&self) -> wgpu::Features {
        self.features
    }
    /// The limits the device was granted.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }
    pub fn has_f16(&self) -> bool {
        self.features.contains(wgpu::Features::SHADER_F16)
    }
    pub fn has_subgroups(&self) -> bool {
        self.features.contains(wgpu::Features::SUBGROUP)
    }
    pub fn has_int64(&self) -> bool {
        self.features.contains(wgpu::Features::SHADER_INT64)
    }
    /// f16 pack/unpack in f32 code (`unpack2x16float`; wgpu's `SHADER_F16_IN_F32` downlevel
    /// flag, set on every Vulkan, Metal and DX12 adapter).
    pub fn has_f16_in_f32(&self) -> bool {
        self.adapter
            .get_downlevel_capabilities()
            .flags
            .contains(wgpu::DownlevelFlags::SHADER_F16_IN_F32)
    }
    /// Whether the adapter is a CPU driver (lavapipe, WARP, SwiftShader): kernels that suit
    /// CPUs are chosen by this.
    pub fn is_cpu(&self) -> bool {
        self.cpu_profile
    }
    /// The pipeline cache of this device.
    pub fn pipelines(&self) -> &PipelineCache {
        &self.pipelines
    }

    /// Drains the errors wgpu reported outside any error scope.
    pub fn take_uncaptured_errors(&self) -> Vec<CapturedError> {
        std::mem::take(&mut *lock(&self.errors))
    }

    /// The recorded loss, if the device is lost.
    pub fn lost(&self) -> Option<LostInfo> {
        lock(&self.lost).clone()
    }

    /// `Err(DeviceLost)` once the device is lost.
    pub fn check_alive(&self) -> Result<(), GpuError> {
        match self.lost() {
            None => Ok(()),
            Some(l) => Err(GpuError::DeviceLost {
                reason: l.reason,
                message: l.message,
            }),
        }
    }

    fn mark_lost(&self, reason: &str, message: String) {
        let mut lost = lock(&self.lost);
        if lost.is_none() && reason != "Destroyed" {
            tracing::error!("GPU device lost ({reason}): {message}");
        }
        lost.get_or_insert(LostInfo {
            reason: reason.to_string(),
            message,
        });
    }

    /// Runs `f` (a whole step: its parameter uploads, recording and submit) inside one set of
    /// error scopes instead of one per call: the [`GpuContext::scoped`] calls inside push none
    /// (three scopes pushed and popped per upload were a sixth of a decode step's host time).
    /// An error inside names `what`.
    pub fn step_scope<T>(
        &self,
        what: &str,
        f: impl FnOnce() -> Result<T, crate::Error>,
    ) -> Result<T, crate::Error> {
        if IN_STEP.with(std::cell::Cell::get) {
            return f();
        }
        // Reset even if `f` panics (the server catches panics per request).
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                IN_STEP.with(|c| c.set(false));
            }
        }
        self.check_alive()?;
        self.with_scopes(what, 0, |_| {
            IN_STEP.with(|c| c.set(true));
            let _reset = Reset;
            f()
        })?
    }

    /// Runs `f` inside OutOfMemory, Validation and Internal error scopes; anything they catch
    /// becomes a typed error naming `what` (and `bytes`, for allocations; 0 otherwise). Inside
    /// [`GpuContext::step_scope`] the step's scopes catch it instead.
    pub fn scoped<T>(
        &self,
        what: &str,
        bytes: u64,
        f: impl FnOnce(&wgpu::Device) -> T,
    ) -> Result<T, GpuError> {
        self.check_alive()?;
        if IN_STEP.with(std::cell::Cell::get) {
            return Ok(f(&self.device));
        }
        self.with_scopes(what, bytes, f)
    }

    /// [`GpuContext::scoped`]'s scopes, always pushed.
    fn with_scopes<T>(
        &self,
        what: &str,
        bytes: u64,
        f: impl FnOnce(&wgpu::Device) -> T,
    ) -> Result<T, GpuError> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let out = f(&self.device);
        let caught = [
            pollster::block_on(internal.pop()),
            pollster::block_on(validation.pop()),
            pollster::block_on(oom.pop()),
        ];
        self.check_alive()?;
        match caught.into_iter().flatten().next() {
            None => Ok(out),
            Some(e) => Err(match e {
                wgpu::Error::OutOfMemory { .. } => GpuError::OutOfMemory {
                    what: what.to_string(),
                    bytes,
                },
                wgpu::Error::Validation { description, .. } => GpuError::Validation {
                    what: what.to_string(),
                    message: description,
                },
                wgpu::Error::Internal { description, .. } => GpuError::Internal {
                    what: what.to_string(),
                    message: description,
                },
            }),
        }
    }

    /// Polls the device once (runs ready callbacks) or, with `wait`, blocks until all submitted
    /// work is done, at most the configured timeout.
    pub fn poll(&self, what: &str, wait: bool) -> Result<(), GpuError> {
        self.check_alive()?;
        let poll_type = if wait {
            wgpu::PollType::Wait {
                submission_index: None,
                timeout: Some(self.poll_timeout),
            }
        } else {
            wgpu::PollType::Poll
        };
        let t0 = std::time::Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| self.device.poll(poll_type)));
        if wait {
            let nanos = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.counters.waited(nanos);
        }
        match result {
            Ok(Ok(_)) => {}
            Ok(Err(wgpu::PollError::Timeout)) => {
                return Err(GpuError::Timeout {
                    what: what.to_string(),
                    seconds: self.poll_timeout.as_secs(),
                })
            }
            Ok(Err(e)) => {
                return Err(GpuError::Internal {
                    what: what.to_string(),
                    message: e.to_string(),
                })
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "wgpu panicked in Device::poll".to_string());
                self.mark_lost("poll failed", message);
            }
        }
        self.check_alive()
    }

    /// Destroys the device (as on shutdown, or to test loss handling): the lost callback fires
    /// with `Destroyed` and every later operation returns [`GpuError::DeviceLost`].
    pub fn destroy(&self) {
        self.device.destroy();
        // The lost callback runs from a poll once the queue is empty.
        let _ = catch_unwind(AssertUnwindSafe(|| self.device.poll(wgpu::PollType::Poll)));
        self.mark_lost("Destroyed", "destroyed by GpuContext::destroy".to_string());
        self.pipelines.clear();
    }
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext")
            .field("adapter", &self.summary.name)
            .field("backend", &self.summary.backend)
            .field("features", &feature_names(self.features))
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}
