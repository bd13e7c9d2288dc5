//! Batch invariance of the attention kernels (design principle 3, lossless speculation): a row
//! of a multi-row call (prefill, a verify batch of k+1 rows, the drafter's non-causal block)
//! must be BIT-IDENTICAL to the same query computed alone by the decode path over the same
//! visible keys. Also: a dispatch built once and re-aimed with `set_step` (what a model's
//! decode loop does) gives the same bits as a fresh call. Every feature context, every KV type.

use crate::common;

use common::gpu::{all_feature_contexts, assert_bits_eq, assert_clean, read_f32, upload_f32};
use common::Rng;
use flint::gpu::buffers::{create_storage, upload};
use flint::gpu::GpuContext;
use flint::kernels::attention::{
    attention_now, create_cache, store_rows_now, Attention, AttnBuffers, AttnMask, AttnShape,
    KvLayout, KvType, MaskMode,
};
use flint::kernels::launch::submit;

/// K/V caches of `layout` holding `n` random rows at positions `0..n`.
fn filled_caches(ctx: &GpuContext, layout: &KvLayout, n: u32, rng: &mut Rng) -> [wgpu::Buffer; 2] {
    let width = (layout.n_kv_heads * layout.head_dim) as usize;
    let positions: Vec<u32> = (0..n).collect();
    [0, 1].map(|_| {
        let rows: Vec<f32> = (0..n as usize * width).map(|_| rng.f32() * 2.0).collect();
        let cache = create_cache(ctx, "cache", layout).unwrap();
        store_rows_now(ctx, layout, &cache, &rows, &positions).unwrap();
        cache
    })
}

struct Case<'a> {
    ctx: &'a GpuContext,
    layout: KvLayout,
    n_head: u32,
    caches: [wgpu::Buffer; 2],
    scale: f32,
}

impl Case<'_> {
    fn run(&self, q: &[f32], kv_len: u32, mask: AttnMask<'_>) -> Vec<f32> {
        let [k, v] = &self.caches;
        attention_now(
            self.ctx,
            self.layout,
            self.n_head,
            k,
            v,
            q,
            kv_len,
            mask,
            self.scale,
        )
        .unwrap()
    }
    fn row_len(&self) -> usize {
        (self.n_head * self.layout.head_dim) as usize
    }
}

const P0: u32 = 250; // verify rows straddle the split boundary at 256
const MAX_ROWS: usize = 17;

fn check_context(label: &str, ctx: &GpuContext, ty: KvType, (n_head, n_kv, d): (u32, u32, u32)) {
    let mut rng = Rng::new(u64::from(d) + ty as u64);
    let kv_total = P0 + MAX_ROWS as u32;
    let layout = KvLayout::new(ty, kv_total, n_kv, d).unwrap();
    let case = Case {
        ctx,
        layout,
        n_head,
        caches: filled_caches(ctx, &layout, kv_total, &mut rng),
        scale: AttnShape::default_scale(d),
    };
    let rl = case.row_len();
    let q: Vec<f32> = (0..MAX_ROWS * rl).map(|_| rng.f32() * 3.0).collect();
    // Decode: row i alone at position P0 + i sees keys 0..=P0 + i.
    let decode: Vec<Vec<f32>> = (0..MAX_ROWS)
        .map(|i| case.run(&q[i * rl..][..rl], P0 + i as u32 + 1, AttnMask::None))
        .collect();

    // Verify batches of 1, 2, 5, 8, 17 rows (causal) against decode.
    for n in [1usize, 2, 5, 8, 17] {
        let positions: Vec<u32> = (0..n as u32).map(|i| P0 + i).collect();
        let out = case.run(&q[..n * rl], P0 + n as u32, AttnMask::Causal(&positions));
        for (i, want) in decode.iter().enumerate().take(n) {
            let what = format!("{label} {ty:?} d={d}: row {i} of a batch of {n}");
            assert_bits_eq(&what, &out[i * rl..][..rl], want);
        }
    }

    // The drafter's block: 7 rows, non-causal over context + block, through an all-zero
    // explicit mask, against each row alone with no mask.
    let block = 7usize;
    let zeros = vec![0f32; block * kv_total as usize];
    let out = case.run(&q[..block * rl], kv_total, AttnMask::Explicit(&zeros));
    for i in 0..block {
        let alone = case.run(&q[i * rl..][..rl], kv_total, AttnMask::None);
        let what = format!("{label} {ty:?} d={d}: block row {i}");
        assert_bits_eq(&what, &out[i * rl..][..rl], &alone);
    }

    // A random explicit mask: row i of the batch against row i alone with its mask row.
    let mask: Vec<f32> = (0..block * kv_total as usize)
        .map(|j| match rng.below(3) {
            0 if j % kv_total as usize != 0 => f32::NEG_INFINITY,
            1 => -rng.f32().abs() * 4.0,
            _ => 0.0,
        })
        .collect();
    let out = case.run(&q[..block * rl], kv_total, AttnMask::Explicit(&mask));
    for i in 0..block {
        let row_mask = &mask[i * kv_total as usize..][..kv_total as usize];
        let alone = case.run(&q[i * rl..][..rl], kv_total, AttnMask::Explicit(row_mask));
        let what = format!("{label} {ty:?} d={d}: masked row {i}");
        assert_bits_eq(&what, &out[i * rl..][..rl], &alone);
    }

    // Build once, re-aim per step (a decode loop): same bits as the fresh calls above.
    let [k, v] = &case.caches;
    let q_buf = upload_f32(ctx, "q", &q[..rl]);
    let out_buf = create_storage(ctx, "out", 4 * rl as u64).unwrap();
    let shape = AttnShape {
        kv: layout,
        n_head,
        max_q: 1,
        max_kv_len: kv_total,
        scale: case.scale,
        mask: MaskMode::None,
    };
    let partials = create_storage(ctx, "partials", shape.partials_bytes()).unwrap();
    let bufs = AttnBuffers {
        q: &q_buf,
        k_cache: k,
        v_cache: v,
        positions: None,
        mask: None,
        partials: &partials,
        out: &out_buf,
    };
    let mut attn = Attention::new(ctx, shape, bufs).unwrap();
    for kv_len in [P0 + 1, P0 + 7, P0 + 5] {
        let i = (kv_len - P0 - 1) as usize;
        let q_i = bytemuck::cast_slice(&q[i * rl..][..rl]);
        upload(ctx, "q", &q_buf, 0, q_i).unwrap();
        attn.set_step(ctx, 1, kv_len).unwrap();
        submit(ctx, "decode step", &attn.dispatches()).unwrap();
        let got = read_f32(ctx, &out_buf, rl);
        let what = format!("{label} {ty:?} d={d}: reused dispatch kv_len {kv_len}");
        assert_bits_eq(&what, &got, &decode[i]);
    }
}

#[test]
fn multi_row_attention_is_bit_identical_to_decode() {
    for (label, ctx) in all_feature_contexts() {
        for ty in KvType::ALL {
            check_context(&label, &ctx, ty, (9, 3, 64));
        }
        check_context(&label, &ctx, KvType::Q8_0, (32, 8, 128));
        check_context(&label, &ctx, KvType::F16, (16, 2, 128)); // 8 query heads per KV head
        assert_clean(&ctx);
    }
}
