//! Pipeline cache: each (shader, variant key) compute pipeline is built once per device.
//!
//! Building = check the variant's feature needs against what the device was granted, preprocess,
//! create the shader module, explicit bind-group layouts from the variant's [`BindingSpec`]s (so
//! the Rust-side spec, which `tests/shaders.rs` checks against the WGSL, is what the pipeline
//! uses), the pipeline layout and the pipeline, all inside error scopes: a failure is
//! [`GpuError::Shader`] naming the shader and variant, never a panic.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::device::GpuContext;
use super::shaders::{BindingKind, BindingSpec, ShaderVariant};
use super::GpuError;

/// A built pipeline and the layouts its bind groups must use (index = group).
#[derive(Debug)]
pub struct CachedPipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub bind_group_layouts: Vec<wgpu::BindGroupLayout>,
    pub variant: ShaderVariant,
}

/// Pipelines by (shader, variant key). Owned by a [`GpuContext`]: see [`GpuContext::pipelines`].
#[derive(Debug, Default)]
pub struct PipelineCache {
    map: Mutex<HashMap<(String, String), Arc<CachedPipeline>>>,
}

impl PipelineCache {
    /// The pipeline of `variant`, built on first use.
    pub fn get(
        &self,
        ctx: &GpuContext,
        variant: &ShaderVariant,
    ) -> Result<Arc<CachedPipeline>, GpuError> {
        ctx.check_alive()?;
        let key = (variant.shader.to_string(), variant.key());
        // Held while building: concurrent requests for the same variant build it once.
        let mut map = self
            .map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(p) = map.get(&key) {
            return Ok(Arc::clone(p));
        }
        let built = Arc::new(build(ctx, variant)?);
        map.insert(key, Arc::clone(&built));
        Ok(built)
    }

    /// Number of pipelines built so far.
    pub fn len(&self) -> usize {
        self.map.lock().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every cached pipeline (after a device loss they are useless).
    pub fn clear(&self) {
        self.map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
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

fn build(ctx: &GpuContext, v: &ShaderVariant) -> Result<CachedPipeline, GpuError> {
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
    let result = ctx.scoped(&format!("building pipeline {label}"), 0, |device| {
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
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(&label),
            bind_group_layouts: &layout_refs,
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&label),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(v.entry_point),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &v.overrides,
                ..Default::default()
            },
            cache: None,
        });
        (pipeline, layouts)
    });
    match result {
        Ok((pipeline, bind_group_layouts)) => Ok(CachedPipeline {
            pipeline,
            bind_group_layouts,
            variant: v.clone(),
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
