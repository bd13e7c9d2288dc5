//! GPU test helpers: contexts (with fallbacks forced), f32 upload/readback, error metrics.
//! GPU tests FAIL, never skip, when no adapter is found.

use flint::gpu::buffers::{create_storage, create_storage_init, read_back};
use flint::gpu::{DeviceOptions, GpuContext};

/// A context on the best adapter with every feature it offers.
pub fn ctx() -> GpuContext {
    ctx_with(DeviceOptions::default())
}

/// A context with f16 and/or subgroups forced off (to exercise the fallback variants).
pub fn ctx_features(f16: bool, subgroups: bool) -> GpuContext {
    ctx_with(DeviceOptions {
        allow_f16: f16,
        allow_subgroups: subgroups,
        ..DeviceOptions::default()
    })
}

pub fn ctx_with(opts: DeviceOptions) -> GpuContext {
    GpuContext::new(&opts).unwrap_or_else(|e| {
        panic!("no usable GPU adapter ({e}); GPU tests fail rather than skip without one")
    })
}

/// The four feature combinations, each as a context (only those the adapter can grant differ).
pub fn all_feature_contexts() -> Vec<(String, GpuContext)> {
    [(true, true), (true, false), (false, true), (false, false)]
        .into_iter()
        .map(|(f, s)| (format!("f16={f} subgroups={s}"), ctx_features(f, s)))
        .collect()
}

/// Fails the test if wgpu recorded an uncaptured error.
pub fn assert_clean(ctx: &GpuContext) {
    let errors = ctx.take_uncaptured_errors();
    assert!(errors.is_empty(), "uncaptured wgpu errors: {errors:#?}");
}

pub fn upload_f32(ctx: &GpuContext, what: &str, data: &[f32]) -> wgpu::Buffer {
    create_storage_init(ctx, what, bytemuck::cast_slice(data)).unwrap()
}

pub fn upload_bytes(ctx: &GpuContext, what: &str, data: &[u8]) -> wgpu::Buffer {
    create_storage_init(ctx, what, data).unwrap()
}

pub fn zeros_f32(ctx: &GpuContext, what: &str, n: usize) -> wgpu::Buffer {
    create_storage(ctx, what, (n * 4) as u64).unwrap()
}

pub fn read_f32(ctx: &GpuContext, buf: &wgpu::Buffer, n: usize) -> Vec<f32> {
    let bytes = read_back(ctx, buf, 0, (n * 4) as u64).unwrap();
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Normalised mean squared error, ggml's metric: Σ(a−b)² / Σb².
pub fn nmse(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += (f64::from(g) - f64::from(w)).powi(2);
        den += f64::from(w).powi(2);
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Largest absolute difference.
pub fn max_abs(got: &[f32], want: &[f32]) -> f32 {
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f32::max)
}

/// Bit-identical slices (NaN payloads included).
pub fn assert_bits_eq(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!("{what}: element {i} differs: {} vs {}", got[i], want[i]);
    }
}
