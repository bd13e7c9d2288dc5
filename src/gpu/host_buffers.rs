//! Storage buffers in host memory that shaders bind directly: what `memory::placement` puts on
//! the host (routed experts with `--cpu-moe`, `--n-cpu-moe`, `-ot …=CPU` or automatic
//! placement). wgpu gives them with `Features::MAPPABLE_PRIMARY_BUFFERS` (native backends):
//! `MAP_WRITE` together with `STORAGE`, which on Vulkan selects a host-visible memory type, so
//! the kernels read the weights over the bus and no copy of them is made in device memory.
//! The buffer is filled through its mapping at creation, then unmapped and bound as usual.

use super::buffers::{padded_size, size_limit};
use super::{GpuContext, GpuError};

/// The feature host-placed weights need.
pub const FEATURE: wgpu::Features = wgpu::Features::MAPPABLE_PRIMARY_BUFFERS;

/// Usages of a host-placed weight buffer: a storage buffer that is also mappable for writing.
pub fn usage() -> wgpu::BufferUsages {
    wgpu::BufferUsages::STORAGE
        | wgpu::BufferUsages::UNIFORM
        | wgpu::BufferUsages::COPY_SRC
        | wgpu::BufferUsages::MAP_WRITE
}

/// Whether `ctx` was created with [`FEATURE`].
pub fn supported(ctx: &GpuContext) -> bool {
    ctx.features().contains(FEATURE)
}

/// A host-memory storage buffer holding `data` (zero-padded to whole words), written through
/// its mapping. [`GpuError::HostStorageUnsupported`] when `ctx` lacks [`FEATURE`].
pub fn create_host_storage_init(
    ctx: &GpuContext,
    what: &str,
    data: &[u8],
) -> Result<wgpu::Buffer, GpuError> {
    if !supported(ctx) {
        return Err(GpuError::HostStorageUnsupported {
            adapter: ctx.info().name.clone(),
            what: what.to_string(),
        });
    }
    let size = padded_size(data.len() as u64);
    let limit = size_limit(ctx, usage());
    if size > limit {
        return Err(GpuError::BufferTooLarge {
            what: what.to_string(),
            bytes: size,
            limit,
        });
    }
    let buffer = ctx.scoped(what, size, |device| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size,
            usage: usage(),
            mapped_at_creation: true,
        })
    })?;
    {
        // wgpu zero-initialises the buffer, so the padding past `data` reads 0.
        let mut view = buffer
            .slice(..)
            .get_mapped_range_mut()
            .map_err(|e| GpuError::Internal {
                what: what.to_string(),
                message: e.to_string(),
            })?;
        view.slice(..data.len()).copy_from_slice(data);
    }
    buffer.unmap();
    Ok(buffer)
}
