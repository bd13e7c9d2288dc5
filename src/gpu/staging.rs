//! Readback staging buffers kept between readbacks: a readback takes the smallest free
//! buffer that holds its bytes (or makes one, sized to the next power of two, at least
//! 4 KiB) and gives it back unmapped, so a decode loop's readbacks stop creating a mappable
//! buffer per token. At most [`KEPT`] buffers of up to [`KEPT_BYTES`] each are kept.

use std::sync::Mutex;

use super::buffers::create_buffer;
use super::{GpuContext, GpuError};

/// Free buffers kept at most.
pub const KEPT: usize = 8;
/// Largest buffer kept (a whole logits readback of a large vocabulary and many rows is
/// rare enough to allocate each time).
pub const KEPT_BYTES: u64 = 64 << 20;
/// Smallest buffer made.
const MIN_BYTES: u64 = 4096;

/// The free staging buffers of one device.
#[derive(Debug, Default)]
pub struct StagingPool {
    free: Mutex<Vec<wgpu::Buffer>>,
}

impl StagingPool {
    /// A `MAP_READ | COPY_DST` buffer of at least `bytes` bytes, unmapped.
    pub fn take(&self, ctx: &GpuContext, bytes: u64) -> Result<wgpu::Buffer, GpuError> {
        {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            let best = (0..free.len())
                .filter(|&i| free[i].size() >= bytes)
                .min_by_key(|&i| free[i].size());
            if let Some(i) = best {
                return Ok(free.swap_remove(i));
            }
        }
        let size = bytes
            .max(MIN_BYTES)
            .checked_next_power_of_two()
            .unwrap_or(bytes);
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        create_buffer(ctx, "readback staging", size, usage)
    }

    /// Returns `buffer` (unmapped) for later readbacks; the smallest goes when the pool is full.
    pub fn give(&self, buffer: wgpu::Buffer) {
        if buffer.size() > KEPT_BYTES {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        free.push(buffer);
        if free.len() > KEPT {
            if let Some(i) = (0..free.len()).min_by_key(|&i| free[i].size()) {
                free.swap_remove(i);
            }
        }
    }

    /// Buffers kept now.
    pub fn len(&self) -> usize {
        self.free.lock().map_or(0, |f| f.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
