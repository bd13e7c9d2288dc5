//! Pipeline cache: each (shader, variant key) compute pipeline is built once per device, off
//! the calling thread.
//!
//! [`PipelineCache::get`] checks the variant's feature needs against what the device was
//! granted, preprocesses, creates the shader module (WGSL errors surface here), explicit
//! bind-group layouts from the variant's [`BindingSpec`]s (so the Rust-side spec, which
//! `tests/shaders.rs` checks against the WGSL, is what the pipeline uses) and the pipeline
//! layout, and returns at once: the pipeline itself, the dear part (on lavapipe 20–350 ms per
//! variant even with Mesa's shader cache warm, most of a short run's wall time), is queued to a
//! pool of builder threads, one per CPU. [`CachedPipeline::ready`] waits for it, or builds it on
//! the calling thread when no builder has taken it yet; recording a dispatch calls it. So a
//! model's pipelines build in parallel, with each other and with the setting up of its ops
//! (llama.cpp's Vulkan backend compiles its pipelines concurrently the same way).
//!
//! Every failure is [`GpuError::Shader`] naming the shader and variant (from `get` for WGSL
//! and layout errors, from `ready` and [`PipelineCache::wait_all`] for pipeline creation),
//! never a panic; a failed variant is not kept, so asking again tries again.
//! `FLINT_PIPELINE_THREADS=0` builds every pipeline inside `get`, on the calling thread.
//!
//! Counting: [`PipelineCache::builds`] says how many pipeline creations ran and how long they
//! took (summed over threads); [`PipelineCache::thread_wait`] how long the calling thread has
//! spent on pipelines (setting a new variant up in `get`, blocked in `ready` on one not built
//! yet), which is what a timed generation subtracts as one-time compilation.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use super::device::GpuContext;
use super::shaders::{BindingKind, BindingSpec, ShaderVariant};
use super::GpuError;

/// Locks `m`, also after a panic elsewhere (the data are plain state, valid either way).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

thread_local! {
    /// Time this thread spent on pipelines: see [`PipelineCache::thread_wait`].
    static WAITED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// Adds the time since `since` to this thread's [`PipelineCache::thread_wait`].
fn note_wait(since: Instant) {
    let d = since.elapsed();
    WAITED.with(|w| w.set(w.get() + d));
}

/// Pipeline creations run, and their time summed over threads (shared by a cache's pipelines).
#[derive(Debug, Default)]
struct Counters {
    builds: AtomicU64,
    nanos: AtomicU64,
}

impl Counters {
    fn record(&self, took: Duration) {
        self.builds.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// What [`PipelineCache::builds`] reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildCount {
    /// Pipeline creations that ran (failed ones included).
    pub builds: u64,
    /// Their time, summed over the threads that ran them (builds overlap: more than wall time).
    pub time: Duration,
}

/// What creating a pipeline needs, kept until a thread runs it.
struct Job {
    device: wgpu::Device,
    module: wgpu::ShaderModule,
    layout: wgpu::PipelineLayout,
}

impl Job {
    /// Creates the pipeline inside this thread's error scopes; `Err` is wgpu's message.
    fn run(self, v: &ShaderVariant, label: &str) -> Result<wgpu::ComputePipeline, String> {
        let device = &self.device;
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(label),
            layout: Some(&self.layout),
            module: &self.module,
            entry_point: Some(v.entry_point),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &v.overrides,
                ..Default::default()
            },
            cache: None,
        });
        let caught = [
            pollster::block_on(internal.pop()),
            pollster::block_on(validation.pop()),
            pollster::block_on(oom.pop()),
        ];
        match caught.into_iter().flatten().next() {
            None => Ok(pipeline),
            Some(e) => Err(e.to_string()),
        }
    }
}

/// Where a pipeline's creation stands.
enum Build {
    Queued(Job),
    Building,
    Done,
}

/// A pipeline (built, or being built) and the layouts its bind groups must use (index = group).
pub struct CachedPipeline {
    pub bind_group_layouts: Vec<wgpu::BindGroupLayout>,
    pub variant: ShaderVariant,
    label: String,
    state: Mutex<Build>,
    finished: Condvar,
    pipeline: OnceLock<Result<wgpu::ComputePipeline, String>>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for CachedPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.pipeline.get() {
            None => "building",
            Some(Ok(_)) => "built",
            Some(Err(_)) => "failed",
        };
        f.debug_struct("CachedPipeline")
            .field("label", &self.label)
            .field("state", &state)
            .finish()
    }
}

impl CachedPipeline {
    /// The pipeline: built by now, built here if no builder has taken it yet, or waited for.
    pub fn ready(&self) -> Result<&wgpu::ComputePipeline, GpuError> {
        if self.pipeline.get().is_none() {
            let t = Instant::now();
            self.build_or_wait();
            note_wait(t);
        }
        match self.pipeline.get() {
            Some(Ok(p)) => Ok(p),
            Some(Err(message)) => Err(self.error(message.clone())),
            None => Err(self.error("the pipeline build ended without a result".into())),
        }
    }

    /// The build has ended (built or failed).
    fn done(&self) -> bool {
        self.pipeline.get().is_some()
    }

    /// The build ended in an error.
    fn failed(&self) -> bool {
        matches!(self.pipeline.get(), Some(Err(_)))
    }

    fn error(&self, message: String) -> GpuError {
        GpuError::Shader {
            name: self.variant.shader.to_string(),
            variant: self.variant.key(),
            message,
        }
    }

    /// Runs the queued build on this thread, or waits for the thread running it.
    fn build_or_wait(&self) {
        self.build(true);
    }

    /// Runs the build on this thread if it is still queued; if another thread runs it, waits
    /// for it when `wait`.
    fn build(&self, wait: bool) {
        let mut state = lock(&self.state);
        if !wait && !matches!(*state, Build::Queued(_)) {
            return;
        }
        match std::mem::replace(&mut *state, Build::Building) {
            Build::Queued(job) => {
                drop(state);
                let t = Instant::now();
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    job.run(&self.variant, &self.label)
                }));
                let result = run.unwrap_or_else(|_| Err("the pipeline build panicked".into()));
                self.counters.record(t.elapsed());
                // Only this thread sets it (the state left Queued once).
                let _ = self.pipeline.set(result);
                *lock(&self.state) = Build::Done;
                self.finished.notify_all();
            }
            Build::Building => {
                while matches!(*state, Build::Building) {
                    state = self
                        .finished
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
            Build::Done => *state = Build::Done,
        }
    }
}

/// Builder threads taking queued pipelines in order; they end when the cache is dropped.
struct Pool {
    queue: Sender<Arc<CachedPipeline>>,
}

impl Pool {
    /// `threads` builders (none: `None`, pipelines build in `get`).
    fn start(threads: usize) -> Option<Pool> {
        if threads == 0 {
            return None;
        }
        let (tx, rx) = channel::<Arc<CachedPipeline>>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx: Arc<Mutex<Receiver<Arc<CachedPipeline>>>> = Arc::clone(&rx);
            // Driver compilers recurse deeply: the main thread's 8 MiB, not a spawned
            // thread's 2 MiB default.
            let spawned = std::thread::Builder::new()
                .name(format!("flint-pipelines-{i}"))
                .stack_size(8 << 20)
                .spawn(move || loop {
                    let next = lock(&rx).recv();
                    match next {
                        // Skipped when nothing else holds it (the cache was dropped).
                        Ok(p) if Arc::strong_count(&p) > 1 => p.build(false),
                        Ok(_) => {}
                        Err(_) => break,
                    }
                });
            if spawned.is_err() && i == 0 {
                return None;
            }
        }
        Some(Pool { queue: tx })
    }

    /// Builder threads: `FLINT_PIPELINE_THREADS` when it is a number, else one per CPU (at
    /// most 8).
    fn threads() -> usize {
        let per_cpu = || std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        std::env::var("FLINT_PIPELINE_THREADS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(per_cpu)
    }
}

/// Pipelines by (shader, variant key). Owned by a [`GpuContext`]: see [`GpuContext::pipelines`].
#[derive(Default)]
pub struct PipelineCache {
    map: Mutex<HashMap<(String, String), Arc<CachedPipeline>>>,
    pool: OnceLock<Option<Pool>>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for PipelineCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineCache")
            .field("pipelines", &self.len())
            .finish()
    }
}

impl PipelineCache {
    /// The pipeline of `variant`, set up on first use and queued to the builders ([`CachedPipeline::ready`]
    /// gives the pipeline).
    pub fn get(
        &self,
        ctx: &GpuContext,
        variant: &ShaderVariant,
    ) -> Result<Arc<CachedPipeline>, GpuError> {
        ctx.check_alive()?;
        let key = (variant.shader.to_string(), variant.key());
        // Held while setting up: concurrent requests for the same variant set it up once.
        let mut map = lock(&self.map);
        if let Some(p) = map.get(&key) {
            // A failed build is not kept: this request sets the variant up again.
            if !p.failed() {
                return Ok(Arc::clone(p));
            }
        }
        let t = Instant::now();
        let set = set_up(ctx, variant, &self.counters);
        note_wait(t);
        let built = Arc::new(set?);
        map.insert(key.clone(), Arc::clone(&built));
        drop(map);
        match self.pool.get_or_init(|| Pool::start(Pool::threads())) {
            Some(pool) if pool.queue.send(Arc::clone(&built)).is_ok() => {}
            // No builders: build now, so `get` reports every failure.
            _ => {
                if let Err(e) = built.ready() {
                    lock(&self.map).remove(&key);
                    return Err(e);
                }
            }
        }
        Ok(built)
    }

    /// Waits for (or builds) every pipeline set up so far: the first failure, after which the
    /// failed variants are dropped from the cache.
    pub fn wait_all(&self) -> Result<(), GpuError> {
        self.wait_all_with(|_, _| {})
    }

    /// [`PipelineCache::wait_all`], calling `progress(done, total)` first with the pipelines
    /// already built and then after each one it waited for (`total`: those set up so far).
    pub fn wait_all_with(&self, mut progress: impl FnMut(usize, usize)) -> Result<(), GpuError> {
        let all: Vec<Arc<CachedPipeline>> = lock(&self.map).values().cloned().collect();
        let (built, pending): (Vec<_>, Vec<_>) = all.iter().partition(|p| p.done());
        let mut done = built.len();
        progress(done, all.len());
        let mut first = built.iter().find_map(|p| p.ready().err());
        for p in &pending {
            if let Err(e) = p.ready() {
                first.get_or_insert(e);
            }
            done += 1;
            progress(done, all.len());
        }
        match first {
            None => Ok(()),
            Some(e) => {
                lock(&self.map).retain(|_, p| !p.failed());
                Err(e)
            }
        }
    }

    /// Pipelines set up so far whose build has not ended yet (queued or building).
    pub fn pending(&self) -> usize {
        lock(&self.map).values().filter(|p| !p.done()).count()
    }

    /// Pipeline creations this cache ran so far, and their time summed over threads.
    pub fn builds(&self) -> BuildCount {
        BuildCount {
            builds: self.counters.builds.load(Ordering::Relaxed),
            time: Duration::from_nanos(self.counters.nanos.load(Ordering::Relaxed)),
        }
    }

    /// Time the calling thread has spent on pipelines, in any cache, since it started: setting
    /// new variants up in [`PipelineCache::get`], and blocked in [`CachedPipeline::ready`] (or
    /// [`PipelineCache::wait_all`]) on pipelines not built yet, building them or waiting for a
    /// builder. It only grows; the difference over a span is that span's compile time.
    pub fn thread_wait() -> Duration {
        WAITED.with(Cell::get)
    }

    /// Number of pipelines set up so far (built or building).
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every cached pipeline (after a device loss they are useless).
    pub fn clear(&self) {
        lock(&self.map).clear();
    }
}

fn layout_entry(spec: &BindingSpec) -> wgpu::BindGroupLayoutEntry {
    let ty = match spec.kind {
        BindingKind::Uniform => wgpu::BufferBindingType::Uniform,
        BindingKind::StorageRead => wgpu::BufferBindingType::Storage { read_only: true },
        BindingKind::StorageReadWrite => wgpu::BufferBindingType::Storage { read_only: false },
    };
    wgpu::BindGroupLayoutEntry {
        binding: spec.binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

fn set_up(
    ctx: &GpuContext,
    v: &ShaderVariant,
    counters: &Arc<Counters>,
) -> Result<CachedPipeline, GpuError> {
    let variant = v.key();
    let missing = |feature: &str| GpuError::MissingFeature {
        name: v.shader.to_string(),
        variant: variant.clone(),
        feature: feature.to_string(),
    };
    if v.requires_f16 && !ctx.has_f16() {
        return Err(missing("shader-f16"));
    }
    if v.requires_subgroups && !ctx.has_subgroups() {
        return Err(missing("subgroups"));
    }
    if v.requires_int64 && !ctx.has_int64() {
        return Err(missing("shader-int64"));
    }
    let source = v.source()?;
    let label = format!("{} [{variant}]", v.shader);
    let n_groups = v.bindings.iter().map(|b| b.group + 1).max().unwrap_or(0);
    let result = ctx.scoped(&format!("setting up pipeline {label}"), 0, |device| {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&label),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let layouts: Vec<wgpu::BindGroupLayout> = (0..n_groups)
            .map(|g| {
                let entries: Vec<wgpu::BindGroupLayoutEntry> = v
                    .bindings
                    .iter()
                    .filter(|b| b.group == g)
                    .map(layout_entry)
                    .collect();
                device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some(&label),
                    entries: &entries,
                })
            })
            .collect();
        let layout_refs: Vec<Option<&wgpu::BindGroupLayout>> = layouts.iter().map(Some).collect();
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(&label),
            bind_group_layouts: &layout_refs,
            immediate_size: 0,
        });
        let job = Job {
            device: device.clone(),
            module,
            layout,
        };
        (job, layouts)
    });
    match result {
        Ok((job, bind_group_layouts)) => Ok(CachedPipeline {
            bind_group_layouts,
            variant: v.clone(),
            label,
            state: Mutex::new(Build::Queued(job)),
            finished: Condvar::new(),
            pipeline: OnceLock::new(),
            counters: Arc::clone(counters),
        }),
        Err(GpuError::Validation { message, .. } | GpuError::Internal { message, .. }) => {
            Err(GpuError::Shader {
                name: v.shader.to_string(),
                variant,
                message,
            })
        }
        Err(e) => Err(e),
    }
}
