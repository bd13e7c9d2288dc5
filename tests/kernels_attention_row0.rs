//! The two-pass attention (`attn_split.wgsl` + `attn_reduce.wgsl`, [`Attention`]) aimed at rows
//! `row0..row0 + n_q` of the bound buffers (a batch's sequence, `Attention::set_step_at`), with
//! partials for only `n_q` rows: each row's output is BIT-IDENTICAL to the fused pass
//! (`FusedAttention::set_step_at`, the batched default) on the same rows, the rows outside the
//! call are left as they were, and a call past the bound rows is refused. Causal, over 600 keys
//! (three 256-key splits), GQA 9/3 with head dim 64, f16 and q8_0 caches.

use crate::common;

use common::gpu::{assert_bits_eq, assert_clean, ctx, read_f32, upload_f32};
use common::Rng;
use flint::gpu::buffers::{create_storage, upload};
use flint::kernels::attention::{
    create_cache, store_rows_now, Attention, AttnBuffers, AttnIo, AttnShape, FusedAttention,
    KvLayout, KvType, MaskMode,
};
use flint::kernels::launch::submit;

const N_CTX: u32 = 600;
/// Rows the q / out / positions buffers hold.
const ROWS: u32 = 8;
const SENTINEL: f32 = -7.25;

#[test]
fn split_at_row0_matches_fused_bits() {
    let ctx = ctx();
    let (n_head, n_kv, d) = (9u32, 3u32, 64u32);
    for ty in [KvType::F16, KvType::Q8_0] {
        let mut rng = Rng::new(11 + ty as u64);
        let layout = KvLayout::new(ty, N_CTX, n_kv, d).unwrap();
        let cache_pos: Vec<u32> = (0..N_CTX).collect();
        let [k, v] = [0, 1].map(|_| {
            let rows: Vec<f32> = (0..(N_CTX * n_kv * d) as usize)
                .map(|_| rng.f32() * 2.0)
                .collect();
            let cache = create_cache(&ctx, "cache", &layout).unwrap();
            store_rows_now(&ctx, &layout, &cache, &rows, &cache_pos).unwrap();
            cache
        });
        let row_len = (n_head * d) as usize;
        let q_data: Vec<f32> = (0..ROWS as usize * row_len)
            .map(|_| rng.f32() * 3.0)
            .collect();
        let q = upload_f32(&ctx, "q", &q_data);
        // Row i at position 590 - 40·i (the last rows see 2 of the 3 splits).
        let positions: Vec<u32> = (0..ROWS).map(|i| 590 - 40 * i).collect();
        let pos = create_storage(&ctx, "positions", 4 * u64::from(ROWS)).unwrap();
        upload(&ctx, "positions", &pos, 0, bytemuck::cast_slice(&positions)).unwrap();
        let fill = vec![SENTINEL; ROWS as usize * row_len];
        let out_split = upload_f32(&ctx, "out split", &fill);
        let out_fused = upload_f32(&ctx, "out fused", &fill);
        let shape = AttnShape {
            kv: layout,
            n_head,
            max_q: ROWS,
            max_kv_len: N_CTX,
            scale: AttnShape::default_scale(d),
            mask: MaskMode::Causal,
        };
        let io = |out| AttnIo {
            q: &q,
            k_cache: &k,
            v_cache: &v,
            positions: Some(&pos),
            mask: None,
            out,
        };
        let state = create_storage(&ctx, "state", shape.fused_state_bytes()).unwrap();
        let mut fused = FusedAttention::new(&ctx, shape, io(&out_fused), &state).unwrap();
        // Partials for 2 rows only, whatever row0.
        let split_shape = AttnShape { max_q: 2, ..shape };
        let partials = create_storage(&ctx, "partials", split_shape.partials_bytes()).unwrap();
        let mut split = Attention::new(
            &ctx,
            split_shape,
            AttnBuffers::new(io(&out_split), &partials),
        )
        .unwrap();
        for (row0, n_q) in [(0u32, 1u32), (3, 1), (5, 2), (7, 1)] {
            fused.set_step_at(&ctx, n_q, N_CTX, row0).unwrap();
            submit(&ctx, "fused", &fused.dispatches()).unwrap();
            split.set_step_at(&ctx, n_q, N_CTX, row0).unwrap();
            submit(&ctx, "split", &split.dispatches()).unwrap();
        }
        let got = read_f32(&ctx, &out_split, ROWS as usize * row_len);
        let want = read_f32(&ctx, &out_fused, ROWS as usize * row_len);
        for r in 0..ROWS as usize {
            let (g, w) = (
                &got[r * row_len..][..row_len],
                &want[r * row_len..][..row_len],
            );
            assert_bits_eq(&format!("{ty:?} row {r}"), g, w);
            // Rows 1, 2 and 4 were never a call's: untouched.
            let untouched = [1, 2, 4].contains(&r);
            assert_eq!(
                g.iter().all(|&x| x == SENTINEL),
                untouched,
                "{ty:?} row {r}"
            );
        }
        // Past the bound rows, or more rows than the partials hold.
        assert!(split.set_step_at(&ctx, 2, N_CTX, 7).is_err());
        assert!(split.set_step_at(&ctx, 3, N_CTX, 0).is_err());
    }
    assert_clean(&ctx);
}
