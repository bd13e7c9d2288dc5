//! The split output of `matmul_rows.wgsl` (`SPLIT3`, `MatmulIo::split`): one dispatch over a
//! weight whose rows are three weights stacked (q | k | v) writes each part to its own buffer
//! with the bits of the three separate matmuls, for every block format, paired and unpaired
//! rows, mat-vec and batches, on every CPU-driver family; and bad split requests are typed
//! errors. Also the paired GLU (`GLU_PAIRED`, `MatmulIo::paired`): gate and up rows stacked
//! in blocks, one dispatch, the bits of the gate matmul, the up matmul and `glu.wgsl`.

use crate::common;
use crate::data;

use common::gpu::{assert_clean, ctx_features, read_f32, upload_f32, zeros_f32};
use data::{assert_bits, random_f32, random_weight};
use flint::gguf::GgmlType;
use flint::gpu::GpuContext;
use flint::kernels::launch::submit;
use flint::kernels::matmul::dispatch::GLU_PAIR_ROWS;
use flint::kernels::matmul::{
    glu_epilogue, matmul_dispatches, matmul_now, Family, GpuWeight, MatmulIo, SplitOut,
    SERIAL_INT64, SERIAL_INT64_BCAST,
};
use flint::kernels::ops::glu::{glu_on_gpu, Glu};

/// Rows of the three stacked parts (split boundaries off the 32-row workgroups).
const PARTS: [usize; 3] = [37, 13, 11];

fn split_now(ctx: &GpuContext, family: Family, w: &GpuWeight, x: &[f32], m: usize) -> Vec<f32> {
    let [a, b, c] = PARTS;
    let xb = upload_f32(ctx, "x", x);
    let ys = [a, b, c].map(|n| zeros_f32(ctx, "y", m * n));
    let io = MatmulIo {
        split: Some(SplitOut {
            y2: &ys[1],
            y3: &ys[2],
            split1: a as u32,
            split2: (a + b) as u32,
            rope: None,
        }),
        ..MatmulIo::dense(w, &xb, &ys[0], m as u32)
    };
    let list = matmul_dispatches(ctx, family, w, &io).unwrap();
    submit(ctx, "split output", &list.iter().collect::<Vec<_>>()).unwrap();
    let mut out = Vec::new();
    for (y, n) in ys.iter().zip(PARTS) {
        out.extend(read_f32(ctx, y, m * n));
    }
    out
}

#[test]
fn split_output_matches_three_matmuls_bit_for_bit() {
    let _serial = data::gpu_lock();
    let ctx = ctx_features(true, true);
    let types = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
    ];
    for (i, ty) in types.into_iter().enumerate() {
        // K = 576 (SmolLM2's width): 64 columns need three 64 KiB X windows on Family::SERIAL,
        // so the split output must place each dispatch's columns after the previous ones.
        for k in [160, 192, 576] {
            let parts: Vec<Vec<u8>> = PARTS
                .iter()
                .enumerate()
                .map(|(j, &n)| random_weight(ty, k, n, 40 * i as u64 + j as u64, true))
                .collect();
            let n: usize = PARTS.iter().sum();
            let stacked =
                GpuWeight::upload(&ctx, "qkv", ty, [k as u64, n as u64], &parts.concat()).unwrap();
            let alone: Vec<GpuWeight> = parts
                .iter()
                .zip(PARTS)
                .map(|(p, rows)| {
                    GpuWeight::upload(&ctx, "part", ty, [k as u64, rows as u64], p).unwrap()
                })
                .collect();
            let x = random_f32(64 * k, 70 + i as u64);
            for family in [Family::SERIAL, SERIAL_INT64_BCAST] {
                assert!(glu_epilogue(family, ty));
                for m in [1, 64] {
                    let xm = &x[..m * k];
                    let got = split_now(&ctx, family, &stacked, xm, m);
                    let mut want = Vec::new();
                    for w in &alone {
                        want.extend(matmul_now(&ctx, family, w, xm, m as u32).unwrap());
                    }
                    assert_bits(&format!("{ty} {family:?} K={k} M={m}"), &got, &want);
                }
            }
        }
    }
    assert_clean(&ctx);
}

#[test]
fn bad_split_requests_are_typed_errors() {
    let _serial = data::gpu_lock();
    let ctx = ctx_features(true, true);
    let (k, n) = (64, 40);
    let bytes = random_weight(GgmlType::Q4_1, k, n, 5, true);
    let w = GpuWeight::upload(&ctx, "qkv", GgmlType::Q4_1, [k as u64, n as u64], &bytes).unwrap();
    let x = upload_f32(&ctx, "x", &random_f32(2 * k, 6));
    let y = zeros_f32(&ctx, "y", 2 * n);
    let split = |split1, split2| SplitOut {
        y2: &y,
        y3: &y,
        split1,
        split2,
        rope: None,
    };
    let run = |family: Family, io: MatmulIo<'_>| matmul_dispatches(&ctx, family, &w, &io);
    let io = |s| MatmulIo {
        split: Some(s),
        ..MatmulIo::dense(&w, &x, &y, 2)
    };
    let err = run(SERIAL_INT64, io(split(30, 20))).unwrap_err();
    assert!(err.to_string().contains("split1 <= split2"), "{err}");
    let err = run(SERIAL_INT64, io(split(10, 41))).unwrap_err();
    assert!(err.to_string().contains("N = 40"), "{err}");
    let err = run(Family::wide(32, false), io(split(10, 20))).unwrap_err();
    assert!(err.to_string().contains("CPU-driver"), "{err}");
    let small = zeros_f32(&ctx, "small", 4);
    let s = SplitOut {
        y2: &small,
        ..split(10, 20)
    };
    let err = run(SERIAL_INT64, io(s)).unwrap_err();
    assert!(err.to_string().contains("Y2"), "{err}");
    assert!(run(SERIAL_INT64, io(split(10, 20))).is_ok());
    assert_clean(&ctx);
}

/// Gate and up weights `[k, n]` stacked as the paired GLU reads them: per block of
/// `GLU_PAIR_ROWS` rows, the gate rows then the same up rows.
fn pair_rows(gate: &[u8], up: &[u8], n: usize) -> Vec<u8> {
    let row = gate.len() / n;
    let blk = GLU_PAIR_ROWS as usize * row;
    let mut out = Vec::with_capacity(2 * gate.len());
    for (g, u) in gate.chunks(blk).zip(up.chunks(blk)) {
        out.extend_from_slice(g);
        out.extend_from_slice(u);
    }
    out
}

#[test]
fn paired_glu_matches_gate_up_and_glu_bit_for_bit() {
    let _serial = data::gpu_lock();
    let ctx = ctx_features(true, true);
    let n = 2 * GLU_PAIR_ROWS as usize;
    for (i, ty) in [GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0]
        .into_iter()
        .enumerate()
    {
        for k in [160, 192] {
            let seed = 90 * i as u64 + k as u64;
            let gate = random_weight(ty, k, n, seed, true);
            let up = random_weight(ty, k, n, seed + 1, true);
            let shape = |rows: usize| [k as u64, rows as u64];
            let wg = GpuWeight::upload(&ctx, "gate", ty, shape(n), &gate).unwrap();
            let wu = GpuWeight::upload(&ctx, "up", ty, shape(n), &up).unwrap();
            let stacked = pair_rows(&gate, &up, n);
            let wp = GpuWeight::upload(&ctx, "gate_up", ty, shape(2 * n), &stacked).unwrap();
            let x = random_f32(64 * k, seed + 2);
            for family in [Family::SERIAL, SERIAL_INT64_BCAST] {
                for m in [1, 5, 64] {
                    let xm = &x[..m * k];
                    let g = matmul_now(&ctx, family, &wg, xm, m as u32).unwrap();
                    let u = matmul_now(&ctx, family, &wu, xm, m as u32).unwrap();
                    for kind in [Glu::Swiglu, Glu::Geglu] {
                        let want = glu_on_gpu(&ctx, kind, &g, &u).unwrap();
                        let xb = upload_f32(&ctx, "x", xm);
                        let yb = zeros_f32(&ctx, "y", m * n);
                        let io = MatmulIo {
                            paired: Some(kind),
                            y_stride: n as u32,
                            ..MatmulIo::dense(&wp, &xb, &yb, m as u32)
                        };
                        let list = matmul_dispatches(&ctx, family, &wp, &io).unwrap();
                        submit(&ctx, "paired glu", &list.iter().collect::<Vec<_>>()).unwrap();
                        let got = read_f32(&ctx, &yb, m * n);
                        let what = format!("{ty} {family:?} K={k} M={m} {kind:?}");
                        assert_bits(&what, &got, &want);
                    }
                }
            }
        }
    }
    assert_clean(&ctx);
}
