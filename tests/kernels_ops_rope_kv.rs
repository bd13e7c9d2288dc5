//! The fused RoPE + KV store (`flint::kernels::attention::RopeKv`, one dispatch) against the
//! four ops it replaces (RoPE on q and on k in place, then the f16 KV store of k and of v): q
//! and both caches must have the same bits, for both pairings, full and partial rotary dims,
//! scattered positions (one past the cache, which neither path writes) and token counts that are
//! not multiples of the workgroup size, with a plain RoPE table and a YaRN one (x4 from an
//! original context of 16, so most positions are past it; the cos/sin scale is not 1).

use crate::common;

use common::gpu::{assert_bits_eq, assert_clean, ctx, read_f32, upload_bytes, upload_f32};
use common::Rng;
use flint::gpu::buffers::create_storage;
use flint::gpu::GpuContext;
use flint::kernels::attention::{KvLayout, KvStore, KvType, RopeKv, RopeKvIo};
use flint::kernels::launch::submit;
use flint::kernels::ops::rope::{rope_table, Rope, RopeConfig, RopeMode, RopeShape, RopeYarn};
use flint::kernels::ops::Io;

struct Case {
    mode: RopeMode,
    n_rot: u32,
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    n_ctx: u32,
    n_tokens: u32,
    yarn: bool,
}

/// YaRN x4 from an original context of 16 tokens (the caches hold 96).
const YARN: RopeYarn = RopeYarn {
    n_ctx_orig: 16,
    ext_factor: 1.0,
    attn_factor: 1.0,
    beta_fast: 32.0,
    beta_slow: 1.0,
};

/// (q after RoPE, K cache, V cache) as f32 bit patterns, by the fused op or the four ops.
fn run(ctx: &GpuContext, c: &Case, fused: bool, seed: u64) -> [Vec<f32>; 3] {
    let mut rng = Rng::new(seed);
    let t = c.n_tokens as usize;
    let mut random = |n: usize| (0..n).map(|_| rng.f32() * 3.0).collect::<Vec<f32>>();
    let q = random(t * (c.n_head * c.head_dim) as usize);
    let k = random(t * (c.n_kv * c.head_dim) as usize);
    let v = random(t * (c.n_kv * c.head_dim) as usize);
    // Scattered positions; with several tokens the last one is past the cache (neither path
    // stores it).
    let mut positions: Vec<u32> = (0..c.n_tokens).map(|i| (i * 7 + 3) % c.n_ctx).collect();
    if let (Some(last), true) = (positions.last_mut(), c.n_tokens > 1) {
        *last = c.n_ctx + 5;
    }
    let cfg = RopeConfig {
        n_rot: c.n_rot,
        mode: c.mode,
        freq_base: 10000.0,
        freq_scale: if c.yarn { 0.25 } else { 1.0 },
    };
    let yarn = c.yarn.then_some(&YARN);
    let (qb, kb, vb) = (
        upload_f32(ctx, "q", &q),
        upload_f32(ctx, "k", &k),
        upload_f32(ctx, "v", &v),
    );
    let pos = upload_bytes(ctx, "positions", bytemuck::cast_slice(&positions));
    let freqs = upload_f32(ctx, "freqs", &rope_table(&cfg, yarn, None).unwrap());
    let layout = KvLayout::new(KvType::F16, c.n_ctx, c.n_kv, c.head_dim).unwrap();
    let kc = create_storage(ctx, "k cache", layout.buffer_bytes()).unwrap();
    let vc = create_storage(ctx, "v cache", layout.buffer_bytes()).unwrap();
    if fused {
        let io = RopeKvIo {
            q: &qb,
            k: &kb,
            v: &vb,
            positions: &pos,
            freqs: &freqs,
            k_cache: &kc,
            v_cache: &vc,
        };
        let op = RopeKv::new(ctx, io, c.n_head, [&layout, &layout], &cfg, c.n_tokens).unwrap();
        submit(ctx, "rope kv", &[&op.dispatch]).unwrap();
    } else {
        let rope = |buf: &wgpu::Buffer, heads: u32| {
            let shape = RopeShape {
                n_tokens: c.n_tokens,
                n_heads: heads,
                head_dim: c.head_dim,
            };
            Rope::new(ctx, Io::InPlace(buf), &pos, &freqs, shape, &cfg).unwrap()
        };
        let (rq, rk) = (rope(&qb, c.n_head), rope(&kb, c.n_kv));
        let sk = KvStore::new(ctx, layout, &kc, &kb, &pos, c.n_tokens).unwrap();
        let sv = KvStore::new(ctx, layout, &vc, &vb, &pos, c.n_tokens).unwrap();
        let list = [&rq.dispatch, &rk.dispatch, &sk.dispatch, &sv.dispatch];
        submit(ctx, "rope, store", &list).unwrap();
    }
    let cache_words = (layout.buffer_bytes() / 4) as usize;
    [
        read_f32(ctx, &qb, q.len()),
        read_f32(ctx, &kc, cache_words),
        read_f32(ctx, &vc, cache_words),
    ]
}

#[test]
fn fused_rope_and_store_match_the_four_ops_bit_for_bit() {
    let ctx = ctx();
    let mut checked = 0;
    for (mode, yarn) in [
        (RopeMode::Normal, false),
        (RopeMode::Neox, false),
        (RopeMode::Normal, true),
        (RopeMode::Neox, true),
    ] {
        for (n_rot, head_dim) in [(64, 64), (32, 64), (128, 128)] {
            for n_tokens in [1, 5, 67] {
                let c = Case {
                    mode,
                    n_rot,
                    n_head: 9,
                    n_kv: 3,
                    head_dim,
                    n_ctx: 96,
                    n_tokens,
                    yarn,
                };
                let seed = u64::from(n_rot * 1000 + n_tokens);
                let fused = run(&ctx, &c, true, seed);
                let split = run(&ctx, &c, false, seed);
                for (what, a, b) in [
                    ("q", &fused[0], &split[0]),
                    ("K cache", &fused[1], &split[1]),
                    ("V cache", &fused[2], &split[2]),
                ] {
                    let label = format!(
                        "{what}: {mode:?} yarn {yarn} n_rot {n_rot} D {head_dim} T {n_tokens}"
                    );
                    assert_bits_eq(&label, a, b);
                }
                // The stores wrote something (a cache of zeros would also match).
                assert!(fused[1].iter().any(|x| x.to_bits() != 0));
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 36);
    assert_clean(&ctx);
}
