//! GPU dequantization against the CPU reference, bit for bit, on the real adapter (lavapipe in
//! CI). These tests FAIL when no adapter is found: a machine without one must not pass quietly.
//! Every test also asserts that wgpu recorded no uncaptured error.

use flint::gguf::GgmlType;
use flint::gpu::buffers::{create_storage, read_back};
use flint::gpu::{
    parse_backends, BindingKind, BindingSpec, DeviceOptions, GpuContext, GpuError, ShaderVariant,
};
use flint::kernels::dequant::{self, dequantize_on_gpu};

fn context(opts: DeviceOptions) -> GpuContext {
    GpuContext::new(&opts).unwrap_or_else(|e| {
        panic!("no usable GPU adapter ({e}); GPU tests fail rather than skip without one")
    })
}

fn is_lost(e: Option<&GpuError>) -> bool {
    matches!(e, Some(GpuError::DeviceLost { .. }))
}

fn assert_clean(ctx: &GpuContext) {
    let errors = ctx.take_uncaptured_errors();
    assert!(errors.is_empty(), "uncaptured wgpu errors: {errors:#?}");
}

/// splitmix64: deterministic test data without a rand dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// A finite f16 of either sign (subnormals included), as scales in real files are.
    fn finite_f16(&mut self) -> [u8; 2] {
        loop {
            let h = self.next() as u16;
            if (h >> 10) & 0x1f != 0x1f {
                return h.to_le_bytes();
            }
        }
    }
}

/// Random blocks of `ty` with finite scales.
fn random_tensor(ty: GgmlType, n_blocks: usize, seed: u64) -> (Vec<u8>, usize) {
    let mut rng = Rng(seed);
    let (block, size) = ty.block_layout();
    let mut bytes = rng.bytes(n_blocks * size);
    let scales = match ty {
        GgmlType::Q4_1 => 2, // d, m
        GgmlType::Q8_0 => 1, // d
        _ => 0,
    };
    for b in 0..n_blocks {
        for s in 0..scales {
            let at = b * size + 2 * s;
            bytes[at..at + 2].copy_from_slice(&rng.finite_f16());
        }
    }
    (bytes, n_blocks * block)
}

fn assert_bits_equal(ty: GgmlType, what: &str, gpu: &[f32], cpu: &[f32]) {
    assert_eq!(gpu.len(), cpu.len(), "{ty} {what}: lengths");
    let bad: Vec<usize> = (0..gpu.len())
        .filter(|&i| gpu[i].to_bits() != cpu[i].to_bits())
        .collect();
    if let Some(&i) = bad.first() {
        panic!(
            "{ty} {what}: {} of {} elements differ; first at {i}: gpu {:#010x} ({}) vs cpu {:#010x} ({})",
            bad.len(),
            gpu.len(),
            gpu[i].to_bits(),
            gpu[i],
            cpu[i].to_bits(),
            cpu[i]
        );
    }
}

fn check(ctx: &GpuContext, ty: GgmlType, bytes: &[u8], n: usize, what: &str) {
    let cpu = flint::quant::dequantize(ty, bytes, n).expect("CPU reference");
    let gpu = dequantize_on_gpu(ctx, ty, bytes, n).unwrap_or_else(|e| panic!("{ty} {what}: {e}"));
    assert_bits_equal(ty, what, &gpu, &cpu);
}

/// Every f16 bit pattern (NaN payloads, subnormals, infinities), then an odd count.
fn all_f16_patterns() -> Vec<u8> {
    (0..=u16::MAX).flat_map(u16::to_le_bytes).collect()
}

fn run_suite(ctx: &GpuContext, label: &str) {
    for ty in dequant::SUPPORTED_TYPES {
        for (i, n_blocks) in [1usize, 3, 257, 1001].into_iter().enumerate() {
            let (bytes, n) = random_tensor(ty, n_blocks, 17 * i as u64 + ty.id() as u64);
            check(ctx, ty, &bytes, n, &format!("{label}, {n_blocks} blocks"));
        }
    }
    let patterns = all_f16_patterns();
    check(
        ctx,
        GgmlType::F16,
        &patterns,
        65536,
        &format!("{label}, all patterns"),
    );
    check(
        ctx,
        GgmlType::F16,
        &patterns[..2 * 65535],
        65535,
        &format!("{label}, odd count"),
    );
    assert_clean(ctx);
}

#[test]
fn pipelines_are_set_up_once_and_built_off_thread() {
    let ctx = context(DeviceOptions::default());
    let variants: Vec<ShaderVariant> = dequant::SUPPORTED_TYPES
        .iter()
        .map(|&ty| dequant::variant(ty, false, false).unwrap())
        .collect();
    // Four threads ask for every variant at once: one pipeline each, the same for all.
    let handles: Vec<Vec<_>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let got: Vec<_> = variants
                        .iter()
                        .map(|v| ctx.pipelines().get(&ctx, v).unwrap())
                        .collect();
                    for p in &got {
                        p.ready().unwrap();
                    }
                    got
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(ctx.pipelines().len(), variants.len());
    for other in &handles[1..] {
        for (a, b) in handles[0].iter().zip(other) {
            assert!(std::sync::Arc::ptr_eq(a, b), "{:?} set up twice", a.variant);
        }
    }
    // The pipelines built on the cache's threads compute what the CPU does.
    run_suite(&ctx, "pipelines built off thread");
    for (v, p) in variants.iter().zip(&handles[0]) {
        let again = ctx.pipelines().get(&ctx, v).unwrap();
        assert!(std::sync::Arc::ptr_eq(&again, p), "{v:?} set up again");
    }
    assert_clean(&ctx);
}

#[test]
fn dequant_matches_cpu_with_every_granted_feature() {
    let ctx = context(DeviceOptions::default());
    eprintln!("adapter: {:?}", ctx);
    run_suite(&ctx, "default features");
    // One pipeline per type, built once however often it is used.
    run_suite(&ctx, "again");
    assert_eq!(ctx.pipelines().len(), dequant::SUPPORTED_TYPES.len());
    assert_clean(&ctx);
}

#[test]
fn dequant_forced_fallbacks_match_cpu() {
    for (f16, subgroups) in [(false, true), (true, false), (false, false)] {
        let ctx = context(DeviceOptions {
            allow_f16: f16,
            allow_subgroups: subgroups,
            ..DeviceOptions::default()
        });
        assert!(f16 || !ctx.has_f16(), "f16 was forced off");
        assert!(
            subgroups || !ctx.has_subgroups(),
            "subgroups were forced off"
        );
        for ty in dequant::SUPPORTED_TYPES {
            let v = dequant::variant_for(&ctx, ty).unwrap();
            assert!(!v.requires_f16 || ctx.has_f16(), "{ty}: {}", v.key());
            assert!(
                !v.requires_subgroups || ctx.has_subgroups(),
                "{ty}: {}",
                v.key()
            );
        }
        run_suite(&ctx, &format!("f16={f16} subgroups={subgroups}"));
    }
}

#[test]
fn dequant_spreads_workgroups_over_2d_past_the_limit() {
    // Lowered limit: 16 groups per dimension, so a few hundred blocks need a 2D grid.
    let ctx = context(DeviceOptions {
        max_workgroups_per_dimension_override: Some(16),
        ..DeviceOptions::default()
    });
    assert_eq!(ctx.limits().max_compute_workgroups_per_dimension, 16);
    for ty in dequant::SUPPORTED_TYPES {
        // Q8_0: 301 blocks = 2408 units = 38 groups = 16 x 3 grid.
        let (bytes, n) = random_tensor(ty, 301, 99);
        check(&ctx, ty, &bytes, n, "16 groups per dimension");
    }
    // 16 x 16 groups of 64 invocations, 2 outputs each, is the most F16 can do here.
    let (bytes, n) = random_tensor(GgmlType::F16, 16 * 16 * 64 * 2 + 2, 5);
    assert!(matches!(
        dequantize_on_gpu(&ctx, GgmlType::F16, &bytes, n),
        Err(GpuError::DispatchTooLarge {
            max_per_dim: 16,
            ..
        })
    ));
    assert_clean(&ctx);

    // The real limit (65535 on lavapipe): F16 with 65540 workgroups.
    let ctx = context(DeviceOptions::default());
    let max = ctx.limits().max_compute_workgroups_per_dimension as usize;
    let n = (max + 5) * dequant::WG_SIZE as usize * 2 - 1;
    let binding = ctx.limits().max_storage_buffer_binding_size as usize;
    assert!(
        n * 4 <= binding,
        "the adapter's storage binding limit ({binding} bytes) cannot hold the {n} f32 outputs \
         that pass its {max} workgroups per dimension; this case needs another shape there"
    );
    let (bytes, n) = random_tensor(GgmlType::F16, n, 7);
    check(
        &ctx,
        GgmlType::F16,
        &bytes,
        n,
        "more than max groups per dimension",
    );
    assert_clean(&ctx);
}

#[test]
fn oversized_buffers_are_typed_errors() {
    let ctx = context(DeviceOptions::default());
    let limit = ctx.limits().max_storage_buffer_binding_size;
    match create_storage(&ctx, "too big", limit + 4) {
        Err(GpuError::BufferTooLarge {
            bytes, limit: l, ..
        }) => {
            assert_eq!((bytes, l), (limit + 4, limit));
        }
        other => panic!("expected BufferTooLarge, got {other:?}"),
    }
    assert_clean(&ctx);

    // A lowered binding limit: the f32 output of 2^18 elements (1 MiB) no longer fits 512 KiB.
    let ctx = context(DeviceOptions {
        max_storage_binding_override: Some(512 * 1024),
        ..DeviceOptions::default()
    });
    assert_eq!(ctx.limits().max_storage_buffer_binding_size, 512 * 1024);
    let (bytes, n) = random_tensor(GgmlType::Q8_0, 8192, 3);
    match dequantize_on_gpu(&ctx, GgmlType::Q8_0, &bytes, n) {
        Err(GpuError::BufferTooLarge { bytes, limit, .. }) => {
            assert_eq!((bytes, limit), (4 << 18, 512 * 1024));
        }
        other => panic!("expected BufferTooLarge, got {:?}", other.map(|v| v.len())),
    }
    assert_clean(&ctx);
}

#[test]
fn bad_inputs_and_broken_variants_are_typed_errors() {
    let ctx = context(DeviceOptions {
        allow_f16: false,
        ..DeviceOptions::default()
    });
    let (bytes, n) = random_tensor(GgmlType::Q4_1, 4, 1);
    let short = dequantize_on_gpu(&ctx, GgmlType::Q4_1, &bytes[1..], n);
    assert!(matches!(short, Err(GpuError::BadInput { .. })), "{short:?}");
    let ragged = dequantize_on_gpu(&ctx, GgmlType::Q4_1, &bytes, n - 1);
    assert!(
        matches!(ragged, Err(GpuError::BadInput { .. })),
        "{ragged:?}"
    );
    let unsupported = dequantize_on_gpu(&ctx, GgmlType::Q4_K, &[0; 144], 256);
    assert!(
        matches!(unsupported, Err(GpuError::UnsupportedType { .. })),
        "{unsupported:?}"
    );
    assert!(dequantize_on_gpu(&ctx, GgmlType::Q8_0, &[], 0)
        .unwrap()
        .is_empty());

    // A variant that needs a feature the device was not given.
    let needs_f16 = dequant::variant(GgmlType::F16, true, false).unwrap();
    let err = ctx.pipelines().get(&ctx, &needs_f16).unwrap_err();
    assert!(matches!(err, GpuError::MissingFeature { .. }), "{err}");
    // A variant whose WGSL does not compile (no TYPE_* define): an error naming it, no panic.
    let broken = ShaderVariant {
        defines: vec![("NOT_A_TYPE", String::new())],
        ..dequant::variant(GgmlType::Q8_0, false, false).unwrap()
    };
    match ctx.pipelines().get(&ctx, &broken) {
        Err(GpuError::Shader { name, variant, .. }) => {
            assert_eq!(
                (name.as_str(), variant.as_str()),
                ("dequant", "NOT_A_TYPE;WG_SIZE=64")
            );
        }
        other => panic!("expected a Shader error, got {other:?}"),
    }
    // Bindings that disagree with the WGSL are caught by wgpu validation when the pipeline is
    // created (on a builder thread, reported by `ready`), also as Shader.
    static WRONG: [BindingSpec; 1] = [BindingSpec {
        group: 0,
        binding: 0,
        kind: BindingKind::StorageRead,
    }];
    let wrong = ShaderVariant {
        bindings: &WRONG,
        ..dequant::variant(GgmlType::Q8_0, false, false).unwrap()
    };
    for attempt in 0..2 {
        // A failed build is not cached: asking again fails again.
        let err = ctx
            .pipelines()
            .get(&ctx, &wrong)
            .and_then(|p| p.ready().map(|_| ()))
            .unwrap_err();
        assert!(
            matches!(err, GpuError::Shader { .. }),
            "attempt {attempt}: {err}"
        );
    }
    // wait_all reports the failure once, then the variant is gone.
    assert!(
        ctx.pipelines().wait_all().is_err(),
        "wait_all hid the failure"
    );
    assert!(
        ctx.pipelines().wait_all().is_ok(),
        "the failed variant stayed cached"
    );
    assert_clean(&ctx);
}

#[test]
fn device_selection_errors_are_typed() {
    let err = GpuContext::new(&DeviceOptions {
        index: Some(99),
        ..DeviceOptions::default()
    })
    .unwrap_err();
    assert!(
        matches!(err, GpuError::AdapterIndexOutOfRange { index: 99, .. }),
        "{err}"
    );
    assert!(matches!(
        parse_backends("cuda"),
        Err(GpuError::BadBackendEnv { .. })
    ));
    assert_eq!(parse_backends("Vulkan").unwrap(), wgpu::Backends::VULKAN);
    assert_eq!(
        parse_backends("vulkan, gl").unwrap(),
        wgpu::Backends::VULKAN | wgpu::Backends::GL
    );
    let adapters = flint::gpu::list_adapters().unwrap();
    assert!(!adapters.is_empty(), "no adapter listed");
    for (i, a) in adapters.iter().enumerate() {
        assert_eq!(a.index, i);
        assert!(a.limits.max_storage_buffer_binding_size > 0, "{a:?}");
    }
}

#[test]
fn device_loss_is_an_error_not_a_panic() {
    let ctx = context(DeviceOptions::default());
    let (bytes, n) = random_tensor(GgmlType::Q8_0, 5, 11);
    check(&ctx, GgmlType::Q8_0, &bytes, n, "before loss");
    let out = create_storage(&ctx, "survivor", 64).unwrap();
    assert!(ctx.lost().is_none());

    ctx.destroy();
    let lost = ctx.lost().expect("loss recorded");
    assert_eq!(lost.reason, "Destroyed", "{lost:?}");
    // Recorded by wgpu's device-lost callback, not by destroy()'s fallback.
    assert_ne!(lost.message, "destroyed by GpuContext::destroy", "{lost:?}");
    let r = dequantize_on_gpu(&ctx, GgmlType::Q8_0, &bytes, n);
    assert!(is_lost(r.as_ref().err()), "{:?}", r.map(|v| v.len()));
    let r = create_storage(&ctx, "after loss", 64);
    assert!(is_lost(r.as_ref().err()), "{r:?}");
    let r = read_back(&ctx, &out, 0, 64);
    assert!(is_lost(r.as_ref().err()), "{r:?}");
    let r = ctx.poll("after loss", true);
    assert!(is_lost(r.as_ref().err()), "{r:?}");
    assert_clean(&ctx);
}
