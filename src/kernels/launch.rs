//! Dispatch plumbing shared by every kernel family: a [`Dispatch`] is a pipeline, its bind
//! group, its params uniform and its grid, ready to be recorded into a compute pass. A model step
//! records many of them into one pass and submits once (design principle 7); tests and one-shot
//! operations use [`submit`].

use std::sync::Arc;

use crate::gpu::{CachedPipeline, GpuContext, GpuError};

/// One recorded-ready dispatch.
#[derive(Debug)]
pub struct Dispatch {
    /// Label for debugging and error messages.
    pub label: String,
    pub pipeline: Arc<CachedPipeline>,
    pub bind_group: wgpu::BindGroup,
    /// The params uniform (binding 0 by convention), kept so a caller can rewrite it with
    /// `queue.write_buffer` between steps (positions, lengths) without rebuilding the bind group.
    pub params: Option<wgpu::Buffer>,
    /// Workgroups in x, y, z.
    pub grid: [u32; 3],
}

impl Dispatch {
    /// Record into an open compute pass (waiting for the pipeline if it is still building).
    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) -> Result<(), GpuError> {
        if self.grid.contains(&0) {
            return Ok(());
        }
        pass.set_pipeline(self.pipeline.ready()?);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.dispatch_workgroups(self.grid[0], self.grid[1], self.grid[2]);
        Ok(())
    }
}

/// A bind group for group 0 of `pipeline`, binding `resources[i]` to the i-th binding of the
/// variant's spec.
pub fn bind_group(
    ctx: &GpuContext,
    pipeline: &CachedPipeline,
    label: &str,
    resources: &[wgpu::BindingResource<'_>],
) -> Result<wgpu::BindGroup, GpuError> {
    let shader_error = |message: String| GpuError::Shader {
        name: pipeline.variant.shader.to_string(),
        variant: pipeline.variant.key(),
        message,
    };
    let layout = pipeline
        .bind_group_layouts
        .first()
        .ok_or_else(|| shader_error("no bind group layout".to_string()))?;
    let specs = pipeline.variant.bindings;
    if specs.len() != resources.len() {
        return Err(shader_error(format!(
            "{label}: {} resources for {} bindings",
            resources.len(),
            specs.len()
        )));
    }
    let entries: Vec<wgpu::BindGroupEntry<'_>> = specs
        .iter()
        .zip(resources)
        .map(|(spec, resource)| wgpu::BindGroupEntry {
            binding: spec.binding,
            resource: resource.clone(),
        })
        .collect();
    ctx.scoped(label, 0, |device| {
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(label),
            layout,
            entries: &entries,
        })
    })
}

/// Buffer work recorded ahead of a step's compute pass, in the same command buffer, in order.
#[derive(Debug)]
pub enum PreOp<'a> {
    /// A whole-buffer copy (source, destination; the smaller size).
    Copy(&'a wgpu::Buffer, &'a wgpu::Buffer),
    /// Zero a whole buffer.
    Clear(&'a wgpu::Buffer),
}

/// The [`PreOp`]s of one submit.
#[derive(Debug, Default)]
pub struct Prelude<'a> {
    pub ops: Vec<PreOp<'a>>,
}

/// Record `dispatches` into one compute pass of one command buffer and submit it (no wait).
pub fn submit(ctx: &GpuContext, label: &str, dispatches: &[&Dispatch]) -> Result<(), GpuError> {
    submit_with(ctx, label, &Prelude::default(), dispatches)
}

/// [`submit`], with `prelude`'s copies and clears recorded before the pass (one submit).
pub fn submit_with(
    ctx: &GpuContext,
    label: &str,
    prelude: &Prelude<'_>,
    dispatches: &[&Dispatch],
) -> Result<(), GpuError> {
    ctx.check_alive()?;
    // Recording waits for (or builds) pipelines still building; a failure stops the submit.
    let mut failed = None;
    ctx.scoped(label, 0, |device| {
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) });
        for op in &prelude.ops {
            match op {
                PreOp::Copy(src, dst) => {
                    encoder.copy_buffer_to_buffer(src, 0, dst, 0, src.size().min(dst.size()))
                }
                PreOp::Clear(b) => encoder.clear_buffer(b, 0, None),
            }
        }
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(label),
                timestamp_writes: None,
            });
            for d in dispatches {
                if let Err(e) = d.record(&mut pass) {
                    failed = Some(e);
                    break;
                }
            }
        }
        if failed.is_none() {
            ctx.queue().submit([encoder.finish()]);
            ctx.counters().submitted();
        }
    })?;
    if let Some(e) = failed {
        // A failure while the device is lost is reported as the loss.
        ctx.check_alive()?;
        return Err(e);
    }
    ctx.check_alive()
}
