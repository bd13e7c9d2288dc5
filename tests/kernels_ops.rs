//! Row and elementwise GPU ops (`flint::kernels::ops`) against the CPU oracle
//! (`flint::reference::ops`) on the real adapter (lavapipe in CI), over awkward shapes: one row,
//! one column, column counts that are not multiples of the workgroup size.
//!
//! Bounds, each measured (the constants below say on what, and why that multiple): NMSE ≤
//! [`NORM_NMSE`] (1e-11) for RMSNorm, [`SOFTMAX_NMSE`] (1e-11) for softmax, [`GLU_NMSE`] (1e-12)
//! and max abs ≤ [`GLU_MAX_ABS`] (5e-5) for GLU, [`ROPE_NMSE`] (1e-12) for RoPE (theta itself is
//! bit-identical); add and scale are single IEEE operations, so they must be bit-identical.
//! RMSNorm and softmax must be batch invariant: a row alone, among 8 and among 64 rows gives the
//! same bits. Every test checks that wgpu recorded no uncaptured error. `--nocapture` prints
//! every case's figure and each test's worst.

use crate::common;

use common::gpu::{all_feature_contexts, assert_bits_eq, assert_clean, ctx, max_abs, nmse};
use common::Rng;
use flint::gpu::{GpuContext, GpuError};
use flint::kernels::ops::{binary, glu, norm, rope, softmax};
use flint::reference::ops as oracle;

fn random(rng: &mut Rng, n: usize, amplitude: f32) -> Vec<f32> {
    (0..n).map(|_| rng.f32() * amplitude).collect()
}

// Vulkan lets a conformant GPU round some operations that the oracle's libm gets (nearly) right:
// division 2.5 ulp, inverseSqrt 2 ulp, sqrt as 1 / inverseSqrt, exp 3 + 2|x| ulp, sin/cos
// 2^-11 absolute on [-π, π]. Lavapipe (LLVM) is near-correctly rounded, so where that rounding
// alone would fail a lavapipe-tight bound, the bound is set at ~10× a model of it instead: the
// op's formula in f64 with every such operation pushed to its allowed error in one direction
// (every element the same way: the worst case), on data like the tests'.

/// RMSNorm vs the oracle (f64 sum of squares). Measured worst on lavapipe: 2.1e-14 (add + norm,
/// [1, 576], no f16 or subgroups; 1.5e-15 to 9.5e-15 in the other norm tests). The scale
/// `1 / sqrt(mean + eps)` may be ~7 ulp off on a conformant GPU (division, sqrt): ~9.1e-13
/// modelled. Bound 1e-11: ~11× that model, ~500× lavapipe. A mean over n − 1 columns instead
/// of n (4097 columns) gives 1.5e-8.
const NORM_NMSE: f64 = 1e-11;

/// Softmax vs the oracle (f32 exp, f64 sum). Measured worst on lavapipe: 1.3e-13 (the 49152
/// column vocabulary row, no f16 or subgroups, where each of the 64 lanes sums 768 terms in f32;
/// ≤ 1.3e-14 on the rows of ≤ 4097 columns). Exp and 1/sum at their allowed error: ~9e-14
/// modelled on top. Bound 1e-11: ~80× the lavapipe worst, ~50× both together.
const SOFTMAX_NMSE: f64 = 1e-11;

/// SwiGLU / GeGLU vs the oracle, gates up to ±30. Measured worst on lavapipe: 2.1e-17 (GeGLU,
/// n = 63; SwiGLU 2.1e-18). The division (2.5 ulp) and exp (3 + 2|x| ulp) at their allowed error
/// give ~8.9e-14 modelled, which a 100× lavapipe bound would fail. Bound 1e-12: ~11× that
/// model. Gelu by erf instead of tanh differs by up to 4.7e-4 per element.
const GLU_NMSE: f64 = 1e-12;

/// Max |GPU − oracle| of a GLU output (outputs up to ~30, whose ulp is 1.9e-6). Measured worst on
/// lavapipe: 4.8e-7 (both kinds, n = 4608: one ulp of a value in [4, 8)). Division and exp at
/// their allowed error: ~8.9e-6 modelled (~3 ulp of 30). Bound 5e-5: ~100× lavapipe, ~5.6× the
/// model.
const GLU_MAX_ABS: f32 = 5e-5;

/// RoPE vs the oracle (libm sin/cos of the same f32 theta). Measured worst on lavapipe: 1.1e-14
/// ([2, 9, 2], NEOX, freq factors: f32 rounding of the rotation). Bound 1e-12, ~90× that. It
/// admits sin/cos up to 2^-21 absolute off (≤ 4.5e-13 modelled), not the 2^-11 Vulkan allows
/// (up to ~5e-7): a GPU whose sin/cos are that coarse fails this test by design.
const ROPE_NMSE: f64 = 1e-12;

/// (n_rows, n_cols): one row, one column, lanes left idle, not multiples of 64, a model width.
const ROW_SHAPES: [(usize, usize); 7] = [
    (1, 1),
    (1, 576),
    (3, 63),
    (5, 65),
    (2, 1000),
    (4, 4097),
    (9, 128),
];

/// Fails unless NMSE ≤ `bound`; prints the figure (`--nocapture` shows every case) and returns
/// it, so that each test can print its worst.
fn check_nmse(what: &str, got: &[f32], want: &[f32], bound: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let e = nmse(got, want);
    eprintln!("NMSE {e:.3e} {what}");
    assert!(e <= bound, "{what}: NMSE {e:e} > {bound:e}");
    e
}

#[test]
fn rms_norm_matches_the_oracle_in_every_feature_set() {
    let mut rng = Rng::new(1);
    let mut worst = 0f64;
    for (label, ctx) in all_feature_contexts() {
        for &(rows, cols) in &ROW_SHAPES {
            let x = random(&mut rng, rows * cols, 3.0);
            let w = random(&mut rng, cols, 2.0);
            for (weight, in_place) in [(true, false), (false, true), (true, true), (false, false)] {
                let w = weight.then_some(&w[..]);
                let got = norm::rms_norm_on_gpu(&ctx, &x, cols, w, 1e-6, in_place).unwrap();
                let want = oracle::rms_norm(&x, cols, w, 1e-6);
                let what = format!("{label} [{rows}, {cols}] weight={weight} in_place={in_place}");
                worst = worst.max(check_nmse(&what, &got, &want, NORM_NMSE));
            }
        }
        assert_clean(&ctx);
    }
    eprintln!("rms_norm: worst NMSE {worst:.3e} (bound {NORM_NMSE:e})");
}

/// The residual add fused into the norm after it: the residual must be the single-rounding sum,
/// bit for bit, and the norm must have the bits of the plain norm of that sum.
#[test]
fn add_then_norm_has_the_bits_of_add_then_norm() {
    let mut rng = Rng::new(11);
    let mut worst = 0f64;
    for (label, ctx) in all_feature_contexts() {
        for &(rows, cols) in &ROW_SHAPES {
            let r = random(&mut rng, rows * cols, 3.0);
            let y = random(&mut rng, rows * cols, 3.0);
            let w = random(&mut rng, cols, 2.0);
            let what = format!("{label} [{rows}, {cols}]");
            let (sum, got) = norm::add_rms_norm_on_gpu(&ctx, &r, &y, cols, &w, 1e-6).unwrap();
            assert_bits_eq(&format!("{what} residual"), &sum, &oracle::add(&r, &y));
            let want = norm::rms_norm_on_gpu(&ctx, &sum, cols, Some(&w), 1e-6, false).unwrap();
            assert_bits_eq(&format!("{what} norm"), &got, &want);
            let oracle_norm = oracle::rms_norm(&sum, cols, Some(&w), 1e-6);
            worst = worst.max(check_nmse(&what, &got, &oracle_norm, NORM_NMSE));
        }
        assert_clean(&ctx);
    }
    eprintln!("add + rms_norm: worst NMSE {worst:.3e} (bound {NORM_NMSE:e})");
}

#[test]
fn softmax_matches_the_oracle_in_every_feature_set() {
    let mut rng = Rng::new(2);
    let neg_inf = f32::NEG_INFINITY;
    let mut worst = 0f64;
    for (label, ctx) in all_feature_contexts() {
        for &(rows, cols) in &ROW_SHAPES {
            let x = random(&mut rng, rows * cols, 8.0);
            // A causal-style mask: row r hides columns > r + 1; one mask row per two rows.
            let mask_rows = rows.div_ceil(2);
            let mask: Vec<f32> = (0..mask_rows * cols)
                .map(|i| {
                    if i % cols > i / cols + 1 {
                        neg_inf
                    } else {
                        rng.f32()
                    }
                })
                .collect();
            for (with_mask, in_place) in [(true, false), (false, true), (true, true)] {
                let m = with_mask.then_some(&mask[..]);
                let got = softmax::softmax_on_gpu(&ctx, &x, cols, 0.125, m, in_place).unwrap();
                let want = oracle::softmax(&x, cols, 0.125, m);
                let what = format!("{label} [{rows}, {cols}] mask={with_mask} in_place={in_place}");
                worst = worst.max(check_nmse(&what, &got, &want, SOFTMAX_NMSE));
            }
        }
        // A fully masked row is all zeros; a vocabulary-sized row.
        let got = softmax::softmax_on_gpu(&ctx, &[1.0, 2.0], 2, 1.0, Some(&[neg_inf; 2]), false);
        assert_eq!(got.unwrap(), [0.0, 0.0], "{label}: fully masked row");
        let x = random(&mut rng, 49152, 20.0);
        let got = softmax::softmax_on_gpu(&ctx, &x, 49152, 1.0, None, false).unwrap();
        let e = check_nmse(
            &format!("{label} vocab row"),
            &got,
            &oracle::softmax(&x, 49152, 1.0, None),
            SOFTMAX_NMSE,
        );
        worst = worst.max(e);
        assert_clean(&ctx);
    }
    eprintln!("softmax: worst NMSE {worst:.3e} (bound {SOFTMAX_NMSE:e})");
}

/// Row i of a batch of `rows` rows, computed by `f` on the batch.
fn row_of(
    f: &dyn Fn(&[f32]) -> Vec<f32>,
    x: &[f32],
    cols: usize,
    rows: usize,
    i: usize,
) -> Vec<f32> {
    let batch = f(&x[..rows * cols]);
    batch[i * cols..(i + 1) * cols].to_vec()
}

#[test]
fn rms_norm_and_softmax_are_batch_invariant() {
    let mut rng = Rng::new(3);
    for (label, ctx) in all_feature_contexts() {
        for cols in [576, 1000] {
            let x = random(&mut rng, 64 * cols, 4.0);
            let w = random(&mut rng, cols, 1.0);
            let norm =
                |x: &[f32]| norm::rms_norm_on_gpu(&ctx, x, cols, Some(&w), 1e-5, false).unwrap();
            let soft =
                |x: &[f32]| softmax::softmax_on_gpu(&ctx, x, cols, 0.5, None, false).unwrap();
            for (name, f) in [
                ("rms_norm", &norm as &dyn Fn(&[f32]) -> Vec<f32>),
                ("softmax", &soft),
            ] {
                for i in [0, 3, 7] {
                    let alone = f(&x[i * cols..(i + 1) * cols]);
                    for rows in [8, 64] {
                        let what = format!("{label} {name} cols={cols} row {i} of {rows}");
                        assert_bits_eq(&what, &row_of(f, &x, cols, rows, i), &alone);
                    }
                }
            }
        }
        assert_clean(&ctx);
    }
}

#[test]
fn built_ops_take_new_row_counts_between_steps() {
    use flint::gpu::buffers::read_back;
    use flint::kernels::launch::submit;
    use flint::kernels::ops::Io;
    let ctx = ctx();
    let mut rng = Rng::new(4);
    let cols = 96;
    let x = random(&mut rng, 16 * cols, 2.0);
    let src = common::gpu::upload_f32(&ctx, "x", &x);
    let dst = common::gpu::zeros_f32(&ctx, "y", 16 * cols);
    let io = Io::Out {
        src: &src,
        dst: &dst,
    };
    let mut op = norm::RmsNorm::new(&ctx, io, None, 16, cols as u32, 1e-6).unwrap();
    op.set_rows(&ctx, 3).unwrap();
    submit(&ctx, "norm 3 rows", &[&op.dispatch]).unwrap();
    let y = common::gpu::read_f32(&ctx, &dst, 16 * cols);
    let want = oracle::rms_norm(&x[..3 * cols], cols, None, 1e-6);
    check_nmse("first 3 rows", &y[..3 * cols], &want, NORM_NMSE);
    assert!(
        y[3 * cols..].iter().all(|&v| v == 0.0),
        "rows past 3 were written"
    );
    assert!(matches!(
        op.set_rows(&ctx, 17),
        Err(GpuError::BadInput { .. })
    ));
    // The same bind group, all rows.
    op.set_rows(&ctx, 16).unwrap();
    submit(&ctx, "norm 16 rows", &[&op.dispatch]).unwrap();
    let bytes = read_back(&ctx, &dst, 0, (16 * cols * 4) as u64).unwrap();
    let y: Vec<f32> = bytemuck::cast_slice(&bytes).to_vec();
    check_nmse(
        "all rows",
        &y,
        &oracle::rms_norm(&x, cols, None, 1e-6),
        NORM_NMSE,
    );
    assert_clean(&ctx);
}

fn rope_cfg(n_rot: u32, neox: bool, freq_base: f32, freq_scale: f32) -> rope::RopeConfig {
    let mode = if neox {
        rope::RopeMode::Neox
    } else {
        rope::RopeMode::Normal
    };
    rope::RopeConfig {
        n_rot,
        mode,
        freq_base,
        freq_scale,
    }
}

#[test]
fn rope_matches_the_oracle() {
    let ctx = ctx();
    let mut rng = Rng::new(5);
    // (n_tokens, n_heads, head_dim, n_rot): full, partial (pass-through), tiny heads.
    let shapes = [
        (1, 1, 64, 64),
        (7, 3, 64, 64),
        (5, 2, 128, 32),
        (3, 4, 10, 6),
        (2, 9, 2, 2),
    ];
    let mut worst = 0f64;
    for (n_tokens, n_heads, head_dim, n_rot) in shapes {
        let x = random(&mut rng, n_tokens * n_heads * head_dim, 2.0);
        // Positions from 0 to a long context; the last token far out.
        let mut positions: Vec<i32> = (0..n_tokens).map(|_| rng.below(8192) as i32).collect();
        positions[0] = 0;
        positions[n_tokens - 1] = 100_000;
        let factors: Vec<f32> = (0..n_rot / 2).map(|i| 1.0 + (i % 5) as f32 * 1.5).collect();
        for (neox, in_place, ff, base, scale) in [
            (false, false, false, 10000.0, 1.0),
            (true, false, true, 1_000_000.0, 1.0),
            (false, true, true, 500_000.0, 0.25),
            (true, true, false, 10000.0, 0.5),
        ] {
            let cfg = rope_cfg(n_rot as u32, neox, base, scale);
            let ff = ff.then_some(&factors[..]);
            let shape = rope::RopeShape {
                n_tokens: n_tokens as u32,
                n_heads: n_heads as u32,
                head_dim: head_dim as u32,
            };
            let got =
                rope::rope_on_gpu(&ctx, &x, &positions, shape, &cfg, None, ff, in_place).unwrap();
            let r = oracle::RopeRef {
                n_rot,
                neox,
                freq_base: base,
                freq_scale: scale,
            };
            // The table: the frequencies, then a cos/sin scale of exactly 1.
            let table = rope::rope_freqs(&cfg, ff).unwrap();
            assert_bits_eq(
                "frequency table",
                &table[..n_rot / 2],
                &oracle::rope_freqs(&r, ff),
            );
            assert_eq!(table[n_rot / 2].to_bits(), 1f32.to_bits(), "scale");
            let want = oracle::rope(&x, &positions, n_heads, head_dim, &r, ff);
            let what = format!(
                "{shape:?} n_rot={n_rot} neox={neox} in_place={in_place} ff={}",
                ff.is_some()
            );
            worst = worst.max(check_nmse(&what, &got, &want, ROPE_NMSE));
            // Pass-through dims are copied bit for bit.
            for (g, w) in got.chunks(head_dim).zip(want.chunks(head_dim)) {
                assert_bits_eq(&format!("{what} pass-through"), &g[n_rot..], &w[n_rot..]);
            }
        }
    }
    eprintln!("rope: worst NMSE {worst:.3e} (bound {ROPE_NMSE:e})");
    assert_clean(&ctx);
}

#[test]
fn glu_add_and_scale_match_the_oracle() {
    let ctx = ctx();
    let mut rng = Rng::new(6);
    let (mut worst, mut worst_abs) = (0f64, 0f32);
    for n in [1, 63, 1000, 3 * 1536] {
        // Gates up to ±30 reach exp overflow/underflow in silu and gelu.
        let gate = random(&mut rng, n, 30.0);
        let up = random(&mut rng, n, 1.0);
        for (kind, want) in [
            (glu::Glu::Swiglu, oracle::swiglu(&gate, &up)),
            (glu::Glu::Geglu, oracle::geglu(&gate, &up)),
        ] {
            let got = glu::glu_on_gpu(&ctx, kind, &gate, &up).unwrap();
            let what = format!("{kind:?} n={n}");
            worst = worst.max(check_nmse(&what, &got, &want, GLU_NMSE));
            let e = max_abs(&got, &want);
            eprintln!("max abs {e:.3e} {what}");
            assert!(e <= GLU_MAX_ABS, "{what}: max abs {e} > {GLU_MAX_ABS}");
            worst_abs = worst_abs.max(e);
        }
    }
    eprintln!("glu: worst NMSE {worst:.3e} (bound {GLU_NMSE:e})");
    eprintln!("glu: worst max abs {worst_abs:.3e} (bound {GLU_MAX_ABS:e})");
    // Add (same shape and a broadcast row) and scale are single roundings: bit-identical.
    for (rows, cols) in [(1, 1), (3, 65), (7, 576)] {
        let a = random(&mut rng, rows * cols, 5.0);
        let b = random(&mut rng, rows * cols, 5.0);
        let row = random(&mut rng, cols, 5.0);
        for in_place in [false, true] {
            let what = format!("[{rows}, {cols}] in_place={in_place}");
            let got = binary::add_on_gpu(&ctx, &a, &b, in_place).unwrap();
            assert_bits_eq(&format!("add {what}"), &got, &oracle::add(&a, &b));
            let got = binary::add_on_gpu(&ctx, &a, &row, in_place).unwrap();
            assert_bits_eq(&format!("add row {what}"), &got, &oracle::add(&a, &row));
            let got = binary::scale_on_gpu(&ctx, &a, -0.37, in_place).unwrap();
            assert_bits_eq(&format!("scale {what}"), &got, &oracle::scale(&a, -0.37));
        }
    }
    assert_clean(&ctx);
}

fn is_bad_input<T: std::fmt::Debug>(r: Result<T, GpuError>) -> bool {
    matches!(r, Err(GpuError::BadInput { .. }))
}

#[test]
fn bad_shapes_are_typed_errors() {
    let ctx: GpuContext = ctx();
    let x = [1.0f32; 12];
    assert!(is_bad_input(norm::rms_norm_on_gpu(
        &ctx, &x, 5, None, 1e-6, false
    )));
    assert!(is_bad_input(norm::rms_norm_on_gpu(
        &ctx, &x, 0, None, 1e-6, false
    )));
    assert!(is_bad_input(norm::rms_norm_on_gpu(
        &ctx,
        &x,
        4,
        Some(&[1.0; 3]),
        1e-6,
        false
    )));
    assert!(is_bad_input(norm::rms_norm_on_gpu(
        &ctx,
        &x,
        4,
        None,
        f32::NAN,
        false
    )));
    assert!(is_bad_input(softmax::softmax_on_gpu(
        &ctx,
        &x,
        4,
        1.0,
        Some(&[0.0; 3]),
        false
    )));
    assert!(is_bad_input(binary::add_on_gpu(&ctx, &x, &[1.0; 5], false)));
    assert!(is_bad_input(glu::glu_on_gpu(
        &ctx,
        glu::Glu::Swiglu,
        &x,
        &x[..11]
    )));
    let shape = rope::RopeShape {
        n_tokens: 1,
        n_heads: 2,
        head_dim: 6,
    };
    // RoPE at `positions` rotating `n_rot` dims of that shape.
    let rope_rejects = |positions: &[i32], n_rot, factors: Option<&[f32]>| {
        let cfg = rope_cfg(n_rot, false, 10000.0, 1.0);
        is_bad_input(rope::rope_on_gpu(
            &ctx, &x, positions, shape, &cfg, None, factors, false,
        ))
    };
    assert!(rope_rejects(&[0], 8, None));
    assert!(rope_rejects(&[0], 3, None));
    assert!(rope_rejects(&[0, 1], 6, None));
    assert!(rope_rejects(&[0], 6, Some(&[1.0; 2])));
    assert!(rope_rejects(&[0], 6, Some(&[1.0, 0.0, 1.0])));
    // A buffer smaller than the shape it is built for.
    let small = common::gpu::zeros_f32(&ctx, "small", 4);
    let io = flint::kernels::ops::Io::InPlace(&small);
    assert!(is_bad_input(norm::RmsNorm::new(&ctx, io, None, 2, 4, 1e-6)));
    assert_clean(&ctx);
}

/// YaRN RoPE (`rope::rope_table` with a [`rope::RopeYarn`]) against the oracle's
/// `RopeRef::rotate`, llama.cpp's `rope_yarn` (its own metadata type, `RefYarn`): the tables
/// agree bit for bit (frequencies with YaRN's ramp folded in, then the cos/sin scale) and the
/// rotation within [`ROPE_NMSE`], for Bonsai-8B's YaRN (x4 from 16384, base 1e6) and others
/// (normal pairs with frequency factors, a partial ext_factor with other betas, ext_factor 0
/// with only an attention factor), full and partial rotary dims, positions up to four times the
/// original context. Measured worst on lavapipe: 7.3e-15 (x2, ext 0, attn 0.7; Bonsai's 5.3e-15),
/// the order of plain RoPE's 1.1e-14: theta is shared bit for bit, only sin/cos differ.
#[test]
fn rope_yarn_matches_the_oracle() {
    use flint::reference::meta::RefYarn;
    let ctx = ctx();
    let mut rng = Rng::new(51);
    // (n_tokens, n_heads, head_dim, n_rot): full, partial (pass-through), tiny heads.
    let shapes = [
        (6, 3, 128, 128),
        (6, 2, 128, 96),
        (5, 4, 64, 32),
        (4, 2, 10, 6),
    ];
    // (neox, in_place, freq factors, base, factor, n_ctx_orig, ext, attn, beta fast, slow)
    type Yarn = (bool, bool, bool, f32, f32, u32, f32, f32, f32, f32);
    let configs: [Yarn; 4] = [
        (true, false, false, 1e6, 4.0, 16384, 1.0, 1.0, 32.0, 1.0),
        (false, false, true, 10000.0, 4.0, 4096, 1.0, 1.0, 32.0, 1.0),
        (true, true, false, 500_000.0, 8.0, 8192, 0.5, 0.9, 16.0, 2.0),
        (false, true, false, 10000.0, 2.0, 4096, 0.0, 0.7, 32.0, 1.0),
    ];
    let mut worst = 0f64;
    for (n_tokens, n_heads, head_dim, n_rot) in shapes {
        let x = random(&mut rng, n_tokens * n_heads * head_dim, 2.0);
        let factors: Vec<f32> = (0..n_rot / 2).map(|i| 1.0 + (i % 5) as f32 * 1.5).collect();
        for (neox, in_place, ff, base, factor, n_ctx_orig, ext, attn, fast, slow) in configs {
            let orig = n_ctx_orig as i32;
            // Around and past the original context, up to 4× it.
            let positions: Vec<i32> =
                [0, orig - 1, orig, orig + 1, 3 * orig + 7, 4 * orig - 1][..n_tokens].to_vec();
            let cfg = rope_cfg(n_rot as u32, neox, base, 1.0 / factor);
            let yarn = rope::RopeYarn {
                n_ctx_orig,
                ext_factor: ext,
                attn_factor: attn,
                beta_fast: fast,
                beta_slow: slow,
            };
            let ff = ff.then_some(&factors[..]);
            let shape = rope::RopeShape {
                n_tokens: n_tokens as u32,
                n_heads: n_heads as u32,
                head_dim: head_dim as u32,
            };
            let got =
                rope::rope_on_gpu(&ctx, &x, &positions, shape, &cfg, Some(&yarn), ff, in_place)
                    .unwrap();
            let r = oracle::RopeRef {
                n_rot,
                neox,
                freq_base: base,
                freq_scale: 1.0 / factor,
            };
            let ry = RefYarn {
                n_ctx_orig,
                ext_factor: ext,
                attn_factor: attn,
                beta_fast: fast,
                beta_slow: slow,
            };
            let what = format!(
                "{shape:?} n_rot={n_rot} neox={neox} in_place={in_place} ff={} base={base} \
                 x{factor} from {n_ctx_orig} ext={ext} attn={attn}",
                ff.is_some()
            );
            let table = rope::rope_table(&cfg, Some(&yarn), ff).unwrap();
            let (freqs, mscale) = r.freqs(Some(&ry), ff);
            assert_bits_eq(&format!("{what}: table"), &table[..n_rot / 2], &freqs);
            assert_eq!(
                table[n_rot / 2].to_bits(),
                mscale.to_bits(),
                "{what}: scale"
            );
            let want = r.rotate(&x, &positions, n_heads, head_dim, Some(&ry), ff);
            worst = worst.max(check_nmse(&what, &got, &want, ROPE_NMSE));
            for (g, w) in got.chunks(head_dim).zip(want.chunks(head_dim)) {
                assert_bits_eq(&format!("{what} pass-through"), &g[n_rot..], &w[n_rot..]);
            }
            // Not vacuous: YaRN (or the scale) moved the result away from linear scaling.
            let linear = oracle::rope(&x, &positions, n_heads, head_dim, &r, ff);
            assert!(
                nmse(&want, &linear) > 1e-6,
                "{what}: same as linear scaling"
            );
        }
    }
    eprintln!("rope yarn: worst NMSE {worst:.3e} (bound {ROPE_NMSE:e})");
    let cfg = rope_cfg(6, false, 10000.0, 0.25);
    let bad = rope::RopeYarn {
        n_ctx_orig: 0,
        ext_factor: 1.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
    };
    assert!(is_bad_input(rope::rope_table(&cfg, Some(&bad), None)));
    let bad = rope::RopeYarn {
        n_ctx_orig: 64,
        beta_slow: 0.0,
        ..bad
    };
    assert!(is_bad_input(rope::rope_table(&cfg, Some(&bad), None)));
    assert_clean(&ctx);
}
