//! Buffer helpers: every size is checked against the device limits before anything is created
//! ([`GpuError::BufferTooLarge`] names the numbers), creation runs inside error scopes, uploads
//! pad to whole words, and [`read_back`] blocks (map_async + a bounded device wait) with errors,
//! not panics.
//!
//! Sizes are rounded up to a multiple of 4 bytes (`wgpu::COPY_BUFFER_ALIGNMENT`), at least 4. A
//! buffer with `STORAGE` usage is bound whole, so it must fit `max_storage_buffer_binding_size`
//! (split larger tensors across bindings, as the memory planner will).

use std::sync::{Arc, Mutex};

use super::device::GpuContext;
use super::GpuError;

/// `bytes` rounded up to whole 4-byte words, at least one word.
pub fn padded_size(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(wgpu::COPY_BUFFER_ALIGNMENT) * wgpu::COPY_BUFFER_ALIGNMENT
}

/// The largest buffer with `usage` the device allows, and which limit that is.
pub fn size_limit(ctx: &GpuContext, usage: wgpu::BufferUsages) -> u64 {
    let limits = ctx.limits();
    let mut limit = limits.max_buffer_size;
    if usage.contains(wgpu::BufferUsages::STORAGE) {
        limit = limit.min(limits.max_storage_buffer_binding_size);
    }
    // A storage buffer that is also UNIFORM is bound as uniform only through windows.
    if usage.contains(wgpu::BufferUsages::UNIFORM) && !usage.contains(wgpu::BufferUsages::STORAGE) {
        limit = limit.min(limits.max_uniform_buffer_binding_size);
    }
    limit
}

/// Creates a buffer of at least `bytes` bytes, checked against the limits for `usage`.
pub fn create_buffer(
    ctx: &GpuContext,
    what: &str,
    bytes: u64,
    usage: wgpu::BufferUsages,
) -> Result<wgpu::Buffer, GpuError> {
    let size = padded_size(bytes);
    let limit = size_limit(ctx, usage);
    if size > limit {
        return Err(GpuError::BufferTooLarge {
            what: what.to_string(),
            bytes: size,
            limit,
        });
    }
    ctx.scoped(what, size, |device| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size,
            usage,
            mapped_at_creation: false,
        })
    })
}

/// A storage buffer (read or read_write in shaders) that can be copied to and from.
pub fn create_storage(ctx: &GpuContext, what: &str, bytes: u64) -> Result<wgpu::Buffer, GpuError> {
    // UNIFORM too: matmuls may bind a 64 KiB window of an activation as a uniform buffer.
    let usage = wgpu::BufferUsages::STORAGE
        | wgpu::BufferUsages::UNIFORM
        | wgpu::BufferUsages::COPY_SRC
        | wgpu::BufferUsages::COPY_DST;
    create_buffer(ctx, what, bytes, usage)
}

/// A storage buffer holding `data` (zero-padded to whole words).
pub fn create_storage_init(
    ctx: &GpuContext,
    what: &str,
    data: &[u8],
) -> Result<wgpu::Buffer, GpuError> {
    let buffer = create_storage(ctx, what, data.len() as u64)?;
    upload(ctx, what, &buffer, 0, data)?;
    Ok(buffer)
}

/// A uniform buffer holding `value` (a `#[repr(C)]` params struct).
pub fn create_uniform<T: bytemuck::Pod>(
    ctx: &GpuContext,
    what: &str,
    value: &T,
) -> Result<wgpu::Buffer, GpuError> {
    let data = bytemuck::bytes_of(value);
    let usage = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
    let buffer = create_buffer(ctx, what, data.len() as u64, usage)?;
    upload(ctx, what, &buffer, 0, data)?;
    Ok(buffer)
}

/// Writes `data` at `offset` (a multiple of 4) through the queue; a ragged tail is zero-padded.
pub fn upload(
    ctx: &GpuContext,
    what: &str,
    buffer: &wgpu::Buffer,
    offset: u64,
    data: &[u8],
) -> Result<(), GpuError> {
    let end = offset.saturating_add(padded_size(data.len() as u64));
    if !offset.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT) || end > buffer.size() {
        return Err(GpuError::BadInput {
            what: format!("upload to {what}"),
            expected: format!("a 4-aligned range within {} bytes", buffer.size()),
            actual: format!("{} bytes at offset {offset}", data.len()),
        });
    }
    let aligned = data.len() - data.len() % 4;
    ctx.scoped(&format!("upload to {what}"), 0, |_| {
        if aligned > 0 {
            ctx.queue().write_buffer(buffer, offset, &data[..aligned]);
        }
        if aligned < data.len() {
            let mut tail = [0u8; 4];
            tail[..data.len() - aligned].copy_from_slice(&data[aligned..]);
            ctx.queue()
                .write_buffer(buffer, offset + aligned as u64, &tail);
        }
    })
}

/// Copies `bytes` bytes at `offset` (a multiple of 4) of `src` (which needs `COPY_SRC`) back to
/// the host, blocking until the device is done. Errors (validation, map failure, timeout, loss)
/// are returned, never panicked.
pub fn read_back(
    ctx: &GpuContext,
    src: &wgpu::Buffer,
    offset: u64,
    bytes: u64,
) -> Result<Vec<u8>, GpuError> {
    let size = padded_size(bytes);
    if !offset.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
        || offset.saturating_add(size) > src.size()
    {
        return Err(GpuError::BadInput {
            what: "readback range".to_string(),
            expected: format!("a 4-aligned range within {} bytes", src.size()),
            actual: format!("{bytes} bytes at offset {offset}"),
        });
    }
    let len = usize::try_from(bytes).map_err(|_| GpuError::BufferTooLarge {
        what: "readback".to_string(),
        bytes,
        limit: usize::MAX as u64,
    })?;
    let staging = ctx.staging().take(ctx, size)?;
    let slot: Arc<Mutex<Option<Result<(), wgpu::BufferAsyncError>>>> = Arc::default();
    let sink = Arc::clone(&slot);
    ctx.scoped("readback copy", 0, |device| {
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("readback"),
        });
        encoder.copy_buffer_to_buffer(src, offset, &staging, 0, size);
        ctx.queue().submit([encoder.finish()]);
        ctx.counters().submitted();
        ctx.counters().read_back();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            *sink.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        });
    })?;
    ctx.poll("readback", true)?;
    let mapped = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    match mapped {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            return Err(GpuError::Map {
                message: e.to_string(),
            })
        }
        None => {
            return Err(GpuError::Map {
                message: "the map callback did not run after the device went idle".to_string(),
            })
        }
    }
    let view = staging
        .slice(..)
        .get_mapped_range()
        .map_err(|e| GpuError::Map {
            message: e.to_string(),
        })?;
    let out = view.get(..len).map(<[u8]>::to_vec);
    drop(view);
    staging.unmap();
    ctx.staging().give(staging);
    out.ok_or_else(|| GpuError::Map {
        message: format!("mapped range shorter than {len} bytes"),
    })
}
