//! The fused single-pass attention (`shaders/attn_fused.wgsl`, `FusedAttention`), the multi-row
//! path (prefill, verify, the drafter's block) that needs no partials buffer: every output row
//! must be BIT-IDENTICAL to the decode path (split + reduce, one row alone) over the same visible
//! keys (design principle 3), for causal prefills crossing split boundaries, the drafter's
//! non-causal block with explicit masks, every KV type, GQA 9/3, 32/8 and 24/2 (two head
//! chunks), head dims 64 and 128, in every feature context. Oracle NMSE of the fused path:
//! `tests/kernels_attention.rs`. Also: the planner's decode partials formula.

use crate::common;

use common::gpu::{all_feature_contexts, assert_bits_eq, assert_clean, read_f32, upload_f32};
use common::Rng;
use flint::gpu::buffers::{create_storage, upload};
use flint::gpu::GpuContext;
use flint::kernels::attention::serial::{serial_pass_splits, use_serial};
use flint::kernels::attention::{
    attention_fused_now, attention_now, create_cache, decode_partials_bytes, pass_splits,
    store_rows_now, AttnIo, AttnMask, AttnShape, FusedAttention, KvLayout, KvType, MaskMode,
};
use flint::kernels::launch::submit;

/// Cache rows of the prefill cases (the longest visible length).
const KV_MAX: u32 = 600;
/// Query rows the re-aimed fused dispatch holds.
const MAX_Q: u32 = 300;

struct Fixture<'a> {
    ctx: &'a GpuContext,
    layout: KvLayout,
    n_head: u32,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    scale: f32,
}

impl<'a> Fixture<'a> {
    /// K/V caches of `n_ctx` random rows at positions `0..n_ctx`.
    fn new(
        ctx: &'a GpuContext,
        ty: KvType,
        (n_head, n_kv, d): (u32, u32, u32),
        n_ctx: u32,
    ) -> Self {
        let mut rng = Rng::new(u64::from(n_head * d) + ty as u64);
        let layout = KvLayout::new(ty, n_ctx, n_kv, d).unwrap();
        let positions: Vec<u32> = (0..n_ctx).collect();
        let [k, v] = [0, 1].map(|_| {
            let rows: Vec<f32> = (0..(n_ctx * n_kv * d) as usize)
                .map(|_| rng.f32() * 2.0)
                .collect();
            let cache = create_cache(ctx, "cache", &layout).unwrap();
            store_rows_now(ctx, &layout, &cache, &rows, &positions).unwrap();
            cache
        });
        let scale = AttnShape::default_scale(d);
        Fixture {
            ctx,
            layout,
            n_head,
            k,
            v,
            scale,
        }
    }

    fn row_len(&self) -> usize {
        (self.n_head * self.layout.head_dim) as usize
    }

    fn queries(&self, n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n * self.row_len()).map(|_| rng.f32() * 3.0).collect()
    }

    fn decode(&self, q: &[f32], kv_len: u32, mask: AttnMask<'_>) -> Vec<f32> {
        let (ctx, l, h, s) = (self.ctx, self.layout, self.n_head, self.scale);
        attention_now(ctx, l, h, &self.k, &self.v, q, kv_len, mask, s).unwrap()
    }

    fn fused(&self, q: &[f32], kv_len: u32, mask: AttnMask<'_>) -> Vec<f32> {
        let (ctx, l, h, s) = (self.ctx, self.layout, self.n_head, self.scale);
        attention_fused_now(ctx, l, h, &self.k, &self.v, q, kv_len, mask, s).unwrap()
    }
}

/// Causal prefills of `n` rows ending at `kv_len` (row i at position kv_len - n + i), for each
/// `(n, kv_len)` of `cases`, through one fused dispatch built once and re-aimed with `set_step`,
/// against the decode path: the same batch through split + reduce (whose rows are decode's bits:
/// tests/kernels_attention_invariance.rs), and true one-row decode calls for the first and last
/// rows and the rows at the split boundary.
fn check_prefill(
    label: &str,
    ctx: &GpuContext,
    ty: KvType,
    heads: (u32, u32, u32),
    cases: &[(u32, u32)],
) {
    let f = Fixture::new(ctx, ty, heads, KV_MAX);
    let rl = f.row_len();
    let q = f.queries(KV_MAX as usize, 7);
    let q_buf = create_storage(ctx, "q", 4 * (MAX_Q as usize * rl) as u64).unwrap();
    let pos_buf = create_storage(ctx, "positions", 4 * u64::from(MAX_Q)).unwrap();
    let out_buf = create_storage(ctx, "out", 4 * (MAX_Q as usize * rl) as u64).unwrap();
    let shape = AttnShape {
        kv: f.layout,
        n_head: f.n_head,
        max_q: MAX_Q,
        max_kv_len: KV_MAX,
        scale: f.scale,
        mask: MaskMode::Causal,
    };
    let io = AttnIo {
        q: &q_buf,
        k_cache: &f.k,
        v_cache: &f.v,
        positions: Some(&pos_buf),
        mask: None,
        out: &out_buf,
    };
    let state = create_storage(ctx, "state", shape.fused_state_bytes()).unwrap();
    let mut fused = FusedAttention::new(ctx, shape, io, &state).unwrap();
    for &(n, kv_len) in cases {
        let first = kv_len - n;
        let positions: Vec<u32> = (first..kv_len).collect();
        let rows = &q[first as usize * rl..kv_len as usize * rl];
        upload(ctx, "q", &q_buf, 0, bytemuck::cast_slice(rows)).unwrap();
        upload(ctx, "pos", &pos_buf, 0, bytemuck::cast_slice(&positions)).unwrap();
        fused.set_step(ctx, n, kv_len).unwrap();
        submit(ctx, "prefill", &fused.dispatches()).unwrap();
        let got = read_f32(ctx, &out_buf, n as usize * rl);
        let two_pass = f.decode(rows, kv_len, AttnMask::Causal(&positions));
        let what = format!("{label} {ty:?} {heads:?}: prefill of {n} rows to {kv_len}");
        for i in 0..n as usize {
            let row = &got[i * rl..][..rl];
            assert_bits_eq(&format!("{what}, row {i}"), row, &two_pass[i * rl..][..rl]);
            let p = first + i as u32;
            if i == 0 || i + 1 == n as usize || (254..=257).contains(&p) {
                let alone = f.decode(&rows[i * rl..][..rl], p + 1, AttnMask::None);
                assert_bits_eq(&format!("{what}, row {i} vs decode"), row, &alone);
            }
        }
    }
}

/// The drafter's block: `gamma` rows (at least 4), non-causal over context + block (520 keys:
/// three splits), with no mask, an all-zero mask and random explicit masks (one row with a whole
/// split hidden, one row with everything hidden), against each row alone through the decode
/// path.
fn check_block(label: &str, ctx: &GpuContext, ty: KvType, heads: (u32, u32, u32), gamma: usize) {
    const KV: u32 = 520;
    let kv = KV as usize;
    let f = Fixture::new(ctx, ty, heads, KV);
    let rl = f.row_len();
    let q = f.queries(gamma, 11);
    let mut rng = Rng::new(13);
    let mut mask: Vec<f32> = (0..gamma * kv)
        .map(|j| match rng.below(3) {
            0 if j % kv != 0 => f32::NEG_INFINITY,
            1 => -rng.f32().abs() * 4.0,
            _ => 0.0,
        })
        .collect();
    mask[kv + 256..kv + 512].fill(f32::NEG_INFINITY); // row 1: split 1 hidden (l == 0)
    mask[2 * kv..3 * kv].fill(f32::NEG_INFINITY); // row 2: sees nothing (zeros)
    mask[3 * kv..3 * kv + KV as usize - gamma].fill(f32::NEG_INFINITY); // row 3: block only

    let none = f.fused(&q, KV, AttnMask::None);
    let zeros = f.fused(&q, KV, AttnMask::Explicit(&vec![0.0; gamma * kv]));
    let masked = f.fused(&q, KV, AttnMask::Explicit(&mask));
    for i in 0..gamma {
        let qi = &q[i * rl..][..rl];
        let alone = f.decode(qi, KV, AttnMask::None);
        let what = format!("{label} {ty:?} {heads:?}: block row {i}");
        assert_bits_eq(&format!("{what}, no mask"), &none[i * rl..][..rl], &alone);
        assert_bits_eq(
            &format!("{what}, zero mask"),
            &zeros[i * rl..][..rl],
            &alone,
        );
        let alone = f.decode(qi, KV, AttnMask::Explicit(&mask[i * kv..][..kv]));
        assert_bits_eq(&format!("{what}, mask"), &masked[i * rl..][..rl], &alone);
    }
    assert!(masked[2 * rl..3 * rl].iter().all(|&x| x == 0.0));
}

/// Every (rows, kv_len) of rows 1, 17, 64 and kv lengths 255, 256, 257, 600.
fn all_cases() -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for n in [1u32, 17, 64] {
        out.extend([255u32, 256, 257, 600].map(|kv| (n, kv)));
    }
    out
}

#[test]
fn fused_prefill_rows_are_bit_identical_to_decode() {
    for (label, ctx) in all_feature_contexts() {
        for ty in KvType::ALL {
            let mut cases = all_cases();
            if ty == KvType::F16 {
                cases.push((300, 600));
            }
            check_prefill(&label, &ctx, ty, (9, 3, 64), &cases);
        }
        check_prefill(
            &label,
            &ctx,
            KvType::Q8_0,
            (32, 8, 128),
            &[(17, 257), (64, 600)],
        );
        assert_clean(&ctx);
    }
}

#[test]
fn fused_prefill_with_32_heads_over_8_is_bit_identical_to_decode_for_every_kv_type() {
    let (label, ctx) = all_feature_contexts().swap_remove(0);
    for ty in [KvType::F16, KvType::Q4_0] {
        check_prefill(
            &label,
            &ctx,
            ty,
            (32, 8, 128),
            &[(1, 256), (17, 600), (300, 600)],
        );
    }
    assert_clean(&ctx);
}

#[test]
fn fused_drafter_block_rows_are_bit_identical_to_decode() {
    for (label, ctx) in all_feature_contexts() {
        for ty in KvType::ALL {
            check_block(&label, &ctx, ty, (9, 3, 64), 7);
            check_block(&label, &ctx, ty, (32, 8, 128), 7);
        }
        // 12 heads per KV head: 2 chunks.
        check_block(&label, &ctx, KvType::F16, (24, 2, 64), 7);
        // On lavapipe the f16 cache runs attn_rows.wgsl (a workgroup per head and 8 rows) from
        // 7 rows on, with a partial last block of rows, and attn_serial.wgsl below.
        check_block(&label, &ctx, KvType::F16, (9, 3, 64), 11);
        check_block(&label, &ctx, KvType::F16, (32, 8, 128), 8);
        check_block(&label, &ctx, KvType::F16, (9, 3, 64), 5);
        assert_clean(&ctx);
    }
}

#[test]
fn fused_attention_checks_its_inputs_and_steps() {
    let (_, ctx) = all_feature_contexts().swap_remove(0);
    let layout = KvLayout::new(KvType::Q4_0, 64, 2, 64).unwrap();
    let cache = create_cache(&ctx, "cache", &layout).unwrap();
    let q = upload_f32(&ctx, "q", &[0.0; 4 * 4 * 64]);
    let out = upload_f32(&ctx, "out", &[1.0; 4 * 4 * 64]);
    let mut shape = AttnShape {
        kv: layout,
        n_head: 4,
        max_q: 4,
        max_kv_len: 64,
        scale: 1.0,
        mask: MaskMode::Causal,
    };
    let io = AttnIo {
        q: &q,
        k_cache: &cache,
        v_cache: &cache,
        positions: None,
        mask: None,
        out: &out,
    };
    let state = create_storage(&ctx, "state", shape.fused_state_bytes()).unwrap();
    let err = FusedAttention::new(&ctx, shape, io, &state).unwrap_err();
    assert!(err.to_string().contains("positions"), "{err}");
    shape.mask = MaskMode::None;
    shape.max_q = 5;
    let err = FusedAttention::new(&ctx, shape, io, &state).unwrap_err();
    assert!(err.to_string().contains("attention q"), "{err}");
    shape.max_q = 4;
    let small = create_storage(&ctx, "state", shape.fused_state_bytes() - 4).unwrap();
    let err = FusedAttention::new(&ctx, shape, io, &small).unwrap_err();
    assert!(err.to_string().contains("state"), "{err}");
    let mut fused = FusedAttention::new(&ctx, shape, io, &state).unwrap();
    assert!(fused.set_step(&ctx, 5, 64).is_err());
    assert!(fused.set_step(&ctx, 4, 65).is_err());
    fused.set_step(&ctx, 0, 0).unwrap();
    assert_eq!(fused.first.grid, [0, 0, 1]);
    assert_eq!(fused.dispatches().len(), 1);
    // kv_len 0: the one pass writes zeros.
    fused.set_step(&ctx, 3, 0).unwrap();
    submit(&ctx, "nothing visible", &fused.dispatches()).unwrap();
    assert!(read_f32(&ctx, &out, 3 * 4 * 64).iter().all(|&x| x == 0.0));
    assert_clean(&ctx);
}

/// Long contexts take several passes (lavapipe's loop budget); every row still has decode's
/// bits (on lavapipe the f16 cases run `attn_serial.wgsl`, the others `attn_fused.wgsl`). Worst-case work per split: head dim 256 with 8 query heads per KV head. At 8192 keys
/// one pass returns wrong values on lavapipe (measured: loops cut at 65535 iterations).
#[test]
fn fused_long_contexts_run_in_passes_with_decode_bits() {
    let contexts = all_feature_contexts();
    for (label, ctx) in [&contexts[0], &contexts[3]] {
        for (ty, heads, kv_len, n) in [
            (KvType::F16, (8, 1, 256), 8192u32, 3u32),
            (KvType::Q4_0, (8, 1, 256), 2600, 3),
            (KvType::F16, (16, 2, 128), 4608, 3),
            // The default model's shape: on CPU adapters the serial kernel, 7 splits a pass.
            (KvType::F16, (9, 3, 64), 8192, 3),
            // attn_rows.wgsl (7 rows or more): rows of one block end their splits in different
            // passes (visible 1788..=1796 keys: 7 splits, one pass, or 8 splits, two).
            (KvType::F16, (9, 3, 64), 1796, 9),
            (KvType::F16, (16, 2, 128), 4608, 8),
        ] {
            let f = Fixture::new(ctx, ty, heads, kv_len);
            let rl = f.row_len();
            let q = f.queries(n as usize, 17);
            let positions: Vec<u32> = (kv_len - n..kv_len).collect();
            let shape = AttnShape {
                kv: f.layout,
                n_head: f.n_head,
                max_q: n,
                max_kv_len: kv_len,
                scale: f.scale,
                mask: MaskMode::Causal,
            };
            let per_pass = if use_serial(ctx, ty) {
                serial_pass_splits(heads.2)
            } else {
                pass_splits(&f.layout, heads.0 / heads.1)
            };
            let passes = kv_len.div_ceil(256).div_ceil(per_pass);
            assert!(passes > 1, "{ty:?} {heads:?}: {passes} pass");
            let got = f.fused(&q, kv_len, AttnMask::Causal(&positions));
            let two_pass = f.decode(&q, kv_len, AttnMask::Causal(&positions));
            let what = format!("{label} {ty:?} {heads:?} kv {kv_len} ({passes} passes)");
            assert_bits_eq(&what, &got, &two_pass);
            let last = &q[(n as usize - 1) * rl..];
            let alone = f.decode(last, kv_len, AttnMask::None);
            assert_bits_eq(
                &format!("{what}, last row vs decode"),
                &got[(n as usize - 1) * rl..],
                &alone,
            );
            assert!(shape.fused_state_bytes() == 16 * u64::from(n * heads.0));
        }
        assert_clean(ctx);
    }
}

#[test]
fn decode_partials_bytes_is_the_planners_formula_and_prefill_needs_none() {
    for (n_seq, n_head, n_ctx, d) in [
        (1u64, 32u64, 4096u64, 128u64),
        (4, 9, 257, 64),
        (2, 40, 131072, 128),
    ] {
        let want = n_seq * n_head * n_ctx.div_ceil(256) * (d + 2) * 4;
        assert_eq!(decode_partials_bytes(n_seq, n_head, n_ctx, d), want);
        assert_eq!(
            flint::memory::layout::attn_partials_bytes(n_seq, n_head, n_ctx, d),
            want
        );
        let shape = AttnShape {
            kv: KvLayout::new(KvType::F16, n_ctx as u32, 1, d as u32).unwrap(),
            n_head: n_head as u32,
            max_q: n_seq as u32,
            max_kv_len: n_ctx as u32,
            scale: 1.0,
            mask: MaskMode::None,
        };
        assert_eq!(shape.partials_bytes(), want);
    }
    // The two-pass scratch a 512-row prefill would need at 4k context (136 MB); the fused pass
    // needs 16 bytes per (row, head) whatever the context.
    assert_eq!(decode_partials_bytes(512, 32, 4096, 128), 136_314_880);
    let kv = |n_ctx| KvLayout::new(KvType::F16, n_ctx, 8, 128).unwrap();
    let shape = |n_ctx| AttnShape {
        kv: kv(n_ctx),
        n_head: 32,
        max_q: 512,
        max_kv_len: n_ctx,
        scale: 1.0,
        mask: MaskMode::Causal,
    };
    assert_eq!(shape(4096).fused_state_bytes(), 512 * 32 * 16);
    assert_eq!(
        shape(4096).fused_state_bytes(),
        shape(131072).fused_state_bytes()
    );
    // Splits per pass (lavapipe's loop budget): the documented figures.
    assert_eq!(pass_splits(&kv(4096), 4), 18);
    assert_eq!(
        pass_splits(&KvLayout::new(KvType::F16, 64, 1, 256).unwrap(), 8),
        5
    );
}
