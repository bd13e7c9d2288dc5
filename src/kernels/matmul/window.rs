//! Uniform windows of X: on CPU Vulkan drivers a load from a uniform buffer at an address
//! every invocation shares costs one scalar load, where the same storage load costs one per
//! invocation and component. Matmul families with `x_uniform` bind X as 64 KiB windows
//! ([`X_WINDOW`]), as many columns per window as fit, and fall back to the storage binding
//! (same bits) where the device or the buffer does not allow it.

use crate::gpu::GpuContext;

use super::variants::X_WINDOW;
use super::weights::GpuWeight;
use super::MatmulIo;

/// Columns of X per 64 KiB uniform window, or `None` when X cannot be read that way here (the
/// device's uniform bindings are smaller, X is smaller than a window, or one column does not
/// fit); the storage path gives the same bits. A window starts on the binding alignment at or
/// before its first column, and is moved back when it would pass the end of the buffer.
pub(super) fn x_window_columns(ctx: &GpuContext, w: &GpuWeight, io: &MatmulIo<'_>) -> Option<u32> {
    let limits = ctx.limits();
    let align = u64::from(limits.min_uniform_buffer_offset_alignment).max(4);
    let words = (X_WINDOW - align) / 4;
    let (k, stride) = (u64::from(w.k), u64::from(io.x_stride));
    let usable = limits.max_uniform_buffer_binding_size >= X_WINDOW
        && io.x.size() >= X_WINDOW
        && k <= words
        && stride > 0;
    if !usable {
        return None;
    }
    let cols = ((words - k) / stride + 1).min(u64::from(io.m)) as u32;
    // Every window must hold its columns (a window moved back from the end of the buffer may
    // fall short of it by less than the alignment).
    let covered = (0..io.m).step_by(cols as usize).all(|c0| {
        let m = u64::from(cols.min(io.m - c0));
        let first = 4 * (u64::from(io.x_off) + u64::from(c0) * stride);
        let (start, _) = x_window(ctx, io.x, first);
        first + 4 * ((m - 1) * stride + k) <= start + X_WINDOW
    });
    covered.then_some(cols)
}

/// The binding offset of the window holding X floats from `first` (bytes), and the float
/// offset of `first` inside it.
pub(super) fn x_window(ctx: &GpuContext, x: &wgpu::Buffer, first: u64) -> (u64, u32) {
    let align = u64::from(ctx.limits().min_uniform_buffer_offset_alignment).max(4);
    let start = first.min(x.size() - X_WINDOW) / align * align;
    (start, ((first - start) / 4) as u32)
}
