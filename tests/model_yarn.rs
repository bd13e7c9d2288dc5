//! YaRN RoPE scaling (`rope.scaling.type = yarn`) end to end, on tiny random models written
//! with the GGUF writer (as `tests/model_arch.rs`): the GPU forward of qwen3 (NEOX, partial
//! rotary dims; Bonsai-8B's kind of YaRN: x4 from 16384, base 1e6) and of llama (normal pairs,
//! `rope_freqs.weight` combined with YaRN, an attention factor, other betas and an original
//! context the positions run past) against the CPU oracle (llama.cpp's `rope_yarn`), with f16
//! caches (fused RoPE + KV store, or the q | k | v matmul's RoPE epilogue) and q8_0 caches
//! (the RoPE op): logits within model_arch's NMSE bound. A file without YaRN keys keeps the
//! pre-YaRN path: no YaRN parameters, the table the kernels bind is the pre-YaRN table bit for
//! bit with a cos/sin scale of exactly 1. Both metadata readers agree on every YaRN key and its
//! default, and refuse unknown scaling types (`longrope`) naming the value.

use crate::common;

use flint::gguf::{GgmlType, Gguf, GgufFile, GgufWriter, MetaValue};
use flint::memory::{self, Budget, DeviceLimits, RunParams, TargetShape};
use flint::model::forward::{rope_config, rope_yarn, Allocator, Forward};
use flint::model::hparams::RopeScaling;
use flint::model::weights::Qkv;
use flint::model::{weights, Hparams, HparamsError};
use flint::reference::forward::RefModel;
use flint::reference::meta::{MetaError, RefHparams, RefRopeScaling};

/// 2 layers, d 128, 4 query / 2 KV heads of 64, FFN 192, vocab 96; Q8_0 matrices. qwen3 has
/// q/k norms.
struct Tiny {
    arch: &'static str,
    n_rot: u32,
    freq_base: f32,
    rope_freqs: bool,
    /// Extra `{arch}.…` keys (the RoPE scaling ones).
    keys: Vec<(&'static str, MetaValue)>,
}

fn write(t: &Tiny, path: &std::path::Path) {
    std::fs::write(path, bytes(t)).unwrap();
}

fn bytes(t: &Tiny) -> Vec<u8> {
    let (d, nh, nkv, hd, ff, nv) = (128u64, 4u64, 2u64, 64u64, 192u64, 96u64);
    let mut w = GgufWriter::new();
    let a = t.arch;
    w.set("general.architecture", MetaValue::String(a.into()));
    for (k, v) in [
        ("block_count", 2),
        ("embedding_length", d),
        ("attention.head_count", nh),
        ("attention.head_count_kv", nkv),
        ("feed_forward_length", ff),
        ("vocab_size", nv),
        ("context_length", 65536),
        ("attention.key_length", hd),
        ("attention.value_length", hd),
        ("rope.dimension_count", u64::from(t.n_rot)),
    ] {
        w.set(&format!("{a}.{k}"), MetaValue::U32(v as u32));
    }
    w.set(
        &format!("{a}.attention.layer_norm_rms_epsilon"),
        MetaValue::F32(1e-6),
    );
    w.set(&format!("{a}.rope.freq_base"), MetaValue::F32(t.freq_base));
    for (k, v) in &t.keys {
        w.set(&format!("{a}.{k}"), v.clone());
    }
    let mut rng = common::Rng::new(7);
    let mut f32s = |n: u64, scale: f32, base: f32| -> Vec<f32> {
        (0..n).map(|_| base + rng.f32() * scale).collect()
    };
    let q8 = |v: &[f32]| -> Vec<u8> {
        v.chunks(32)
            .flat_map(|b| {
                let amax = b.iter().fold(0f32, |a, x| a.max(x.abs()));
                let dd = amax / 127.0;
                let id = if dd > 0.0 { 1.0 / dd } else { 0.0 };
                let mut out = half::f16::from_f32(dd).to_le_bytes().to_vec();
                out.extend(b.iter().map(|x| (x * id).round() as i8 as u8));
                out
            })
            .collect()
    };
    let mat = |w: &mut GgufWriter, name: &str, k: u64, n: u64, vals: Vec<f32>| {
        w.add_tensor(name, &[k, n], GgmlType::Q8_0, q8(&vals))
            .unwrap();
    };
    let vec = |w: &mut GgufWriter, name: &str, v: Vec<f32>| {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        w.add_tensor(name, &[v.len() as u64], GgmlType::F32, bytes)
            .unwrap();
    };
    mat(&mut w, "token_embd.weight", d, nv, f32s(d * nv, 1.0, 0.0));
    vec(&mut w, "output_norm.weight", f32s(d, 0.2, 1.0));
    if t.rope_freqs {
        let half = u64::from(t.n_rot / 2);
        vec(
            &mut w,
            "rope_freqs.weight",
            (0..half).map(|i| 1.0 + i as f32 / 8.0).collect(),
        );
    }
    let qk_norm = t.arch == "qwen3";
    for il in 0..2 {
        let n = |s: &str| format!("blk.{il}.{s}");
        vec(&mut w, &n("attn_norm.weight"), f32s(d, 0.2, 1.0));
        mat(
            &mut w,
            &n("attn_q.weight"),
            d,
            nh * hd,
            f32s(d * nh * hd, 0.3, 0.0),
        );
        mat(
            &mut w,
            &n("attn_k.weight"),
            d,
            nkv * hd,
            f32s(d * nkv * hd, 0.3, 0.0),
        );
        mat(
            &mut w,
            &n("attn_v.weight"),
            d,
            nkv * hd,
            f32s(d * nkv * hd, 0.3, 0.0),
        );
        mat(
            &mut w,
            &n("attn_output.weight"),
            nh * hd,
            d,
            f32s(nh * hd * d, 0.3, 0.0),
        );
        vec(&mut w, &n("ffn_norm.weight"), f32s(d, 0.2, 1.0));
        mat(&mut w, &n("ffn_gate.weight"), d, ff, f32s(d * ff, 0.3, 0.0));
        mat(&mut w, &n("ffn_up.weight"), d, ff, f32s(d * ff, 0.3, 0.0));
        mat(&mut w, &n("ffn_down.weight"), ff, d, f32s(ff * d, 0.3, 0.0));
        if qk_norm {
            vec(&mut w, &n("attn_q_norm.weight"), f32s(hd, 0.2, 1.0));
            vec(&mut w, &n("attn_k_norm.weight"), f32s(hd, 0.2, 1.0));
        }
    }
    w.to_bytes().unwrap()
}

/// The steps every run takes: a 12-token prefill, then single tokens (positions 0..15).
const STEPS: [&[u32]; 4] = [
    &[3, 17, 90, 0, 42, 5, 60, 61, 62, 63, 1, 2],
    &[7],
    &[11],
    &[13],
];

/// NMSE of the GPU logits against the oracle's, per step, with f16 caches: `tests/model_arch.rs`'s
/// bound (two layers of f32 sums in other orders than the oracle's, K/V rounded to f16 on both
/// sides, where an f32 difference across an f16 rounding boundary is a 2^-11 relative step).
/// Measured worst on lavapipe: 7.5e-13 (qwen3), 1.8e-10 (llama); up to 3e-9 in a sweep of
/// attention factors and betas.
const LOGITS_NMSE: f64 = 1e-8;

/// The same with q8_0 caches, where a value across a rounding boundary moves by one q8_0 step,
/// 1/127 of its block's largest: ~16× an f16 step, ~260× in NMSE (model_arch's 1e-8 becomes
/// ~2.6e-6). Measured worst on lavapipe: 9.2e-8, llama step 3 (one such flip: an attention
/// factor 1e-4 away gives 4.9e-13; every other step and model is at most 4e-12). Bound 1e-6,
/// ~11× that flip.
const LOGITS_NMSE_Q8: f64 = 1e-6;

/// GPU logits of every step of [`STEPS`] with `kv` caches, and whether the q | k | v weights
/// are stacked (with f16 caches and normal pairs: the matmul's RoPE epilogue).
fn gpu_logits(file: &GgufFile, kv: GgmlType) -> (Vec<Vec<f32>>, bool) {
    let ctx = common::gpu::ctx();
    let hp = Hparams::from_gguf(file).unwrap();
    let params = RunParams {
        n_ctx: 64,
        n_ubatch: 16,
        type_k: kv,
        type_v: kv,
        ..RunParams::default()
    };
    let plan = memory::forward_plan(
        TargetShape {
            hp: &hp,
            tensors: &file.tensors,
        },
        None,
        &params,
        Budget::resolve(None, Some(&ctx)),
        DeviceLimits::from_context(&ctx),
    );
    let w = weights::load(&ctx, file, &hp, false).unwrap();
    let stacked = matches!(w.layers[0].attn().unwrap().qkv, Qkv::Stacked { .. });
    let mut alloc = Allocator::new(&ctx, &plan);
    let mut fwd = Forward::new(&ctx, hp, w, &params, &mut alloc).unwrap();
    let out = STEPS
        .iter()
        .map(|tokens| {
            fwd.step(&ctx, tokens, 1).unwrap();
            fwd.logits(&ctx).unwrap()
        })
        .collect();
    common::gpu::assert_clean(&ctx);
    (out, stacked)
}

/// The oracle's logits of every step of [`STEPS`] with `kv` caches.
fn oracle_logits(file: &GgufFile, kv: GgmlType) -> Vec<Vec<f32>> {
    let oracle = RefModel::load(file).unwrap();
    let mut cache = oracle.new_cache(kv).unwrap();
    let mut pos = 0;
    STEPS
        .iter()
        .map(|tokens| {
            let logits = oracle.forward_last(&mut cache, tokens, pos).unwrap();
            pos += tokens.len();
            logits
        })
        .collect()
}

fn temp_file(t: &Tiny, what: &str) -> (std::path::PathBuf, GgufFile) {
    let name = format!("flint-yarn-{}-{what}-{}.gguf", t.arch, std::process::id());
    let path = std::env::temp_dir().join(name);
    write(t, &path);
    let file = GgufFile::open(&path).unwrap();
    (path, file)
}

/// GPU against the oracle for `t` (with YaRN keys), both cache types; YaRN must move the
/// logits (against `t` without its scaling keys). Returns the worst NMSE with f16 caches.
fn check(t: Tiny) -> f64 {
    let (path, file) = temp_file(&t, "yarn");
    let hp = Hparams::from_gguf(&file).unwrap();
    assert_eq!(hp.rope_scaling, RopeScaling::Yarn);
    assert!(rope_yarn(&hp).is_some());
    let plain = Tiny {
        keys: Vec::new(),
        ..t
    };
    let (plain_path, plain_file) = temp_file(&plain, "plain");
    let mut worst = 0f64;
    for kv in [GgmlType::F16, GgmlType::Q8_0] {
        let (gpu, stacked) = gpu_logits(&file, kv);
        let cpu = oracle_logits(&file, kv);
        for (step, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
            let e = common::gpu::nmse(g, c);
            eprintln!(
                "{} {kv:?} (stacked q|k|v {stacked}) step {step}: logits NMSE {e:.3e}",
                plain.arch
            );
            let bound = if kv == GgmlType::F16 {
                worst = worst.max(e);
                LOGITS_NMSE
            } else {
                LOGITS_NMSE_Q8
            };
            let arch = plain.arch;
            assert!(
                e <= bound,
                "{arch} {kv:?} step {step}: NMSE {e:e} > {bound:e}"
            );
        }
        let (without, _) = gpu_logits(&plain_file, kv);
        let moved = common::gpu::nmse(&without[3], &gpu[3]);
        eprintln!(
            "{} {kv:?}: YaRN moves the last logits by NMSE {moved:.3e}",
            plain.arch
        );
        assert!(moved > 1e-4, "YaRN changed nothing");
    }
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&plain_path).ok();
    worst
}

fn yarn_keys(factor: f32, orig: u32) -> Vec<(&'static str, MetaValue)> {
    vec![
        ("rope.scaling.type", MetaValue::String("yarn".into())),
        ("rope.scaling.factor", MetaValue::F32(factor)),
        ("rope.scaling.original_context_length", MetaValue::U32(orig)),
    ]
}

/// Bonsai-8B's kind of YaRN (x4 from 16384, base 1e6, llama.cpp's default betas and factors)
/// on a qwen3 with 32 of 64 dims rotated: the ramp runs over rotations 5..10 of 16.
#[test]
fn qwen3_yarn_matches_the_oracle() {
    let worst = check(Tiny {
        arch: "qwen3",
        n_rot: 32,
        freq_base: 1e6,
        rope_freqs: false,
        keys: yarn_keys(4.0, 16384),
    });
    eprintln!("qwen3 yarn: worst logits NMSE {worst:.3e} (bound {LOGITS_NMSE:e})");
}

/// llama with `rope_freqs.weight` and YaRN together (the factors divide the YaRN
/// frequencies), an attention factor, betas 0.05 / 0.01 and an original context of 8 that the
/// 15 positions run past: the ramp runs over rotations 5..9 of 32.
#[test]
fn llama_yarn_with_rope_factors_matches_the_oracle() {
    let mut keys = yarn_keys(4.0, 8);
    keys.extend([
        ("rope.scaling.attn_factor", MetaValue::F32(0.9)),
        ("rope.scaling.yarn_beta_fast", MetaValue::F32(0.05)),
        ("rope.scaling.yarn_beta_slow", MetaValue::F32(0.01)),
    ]);
    let worst = check(Tiny {
        arch: "llama",
        n_rot: 64,
        freq_base: 10000.0,
        rope_freqs: true,
        keys,
    });
    eprintln!("llama yarn: worst logits NMSE {worst:.3e} (bound {LOGITS_NMSE:e})");
}

/// Without scaling keys nothing changes: no YaRN parameters, and the table every RoPE kernel
/// binds is the pre-YaRN one bit for bit (`freq_scale · freq_base^(-2i/n_rot) / ff` in f64,
/// rounded once) followed by a cos/sin scale of exactly 1, by which the kernels' products are
/// exact. (Measured once against the code before YaRN: the logits of these models, f16 and q8_0
/// caches, 4 steps each, were bit-identical.)
#[test]
fn no_yarn_keys_keep_the_plain_table() {
    let ctx = common::gpu::ctx();
    for (arch, n_rot, ff) in [("llama", 64u32, true), ("qwen3", 32, false)] {
        let t = Tiny {
            arch,
            n_rot,
            freq_base: 10000.0,
            rope_freqs: ff,
            keys: vec![("rope.scaling.factor", MetaValue::F32(2.0))],
        };
        let (path, file) = temp_file(&t, "table");
        let hp = Hparams::from_gguf(&file).unwrap();
        assert_eq!(hp.rope_scaling, RopeScaling::Linear);
        assert_eq!((hp.rope_ext_factor, hp.rope_attn_factor), (0.0, 1.0));
        assert!(rope_yarn(&hp).is_none());
        let cfg = rope_config(&hp);
        let factors = weights::load(&ctx, &file, &hp, false).unwrap().rope_freqs;
        let params = RunParams {
            n_ctx: 64,
            n_ubatch: 16,
            ..RunParams::default()
        };
        let plan = memory::forward_plan(
            TargetShape {
                hp: &hp,
                tensors: &file.tensors,
            },
            None,
            &params,
            Budget::resolve(None, Some(&ctx)),
            DeviceLimits::from_context(&ctx),
        );
        let w = weights::load(&ctx, &file, &hp, false).unwrap();
        let mut alloc = Allocator::new(&ctx, &plan);
        let fwd = Forward::new(&ctx, hp, w, &params, &mut alloc).unwrap();
        let half = n_rot as usize / 2;
        let table = common::gpu::read_f32(&ctx, &fwd.rope_freqs, half + 1);
        let want: Vec<f32> = (0..half)
            .map(|i| {
                let f = factors.as_ref().map_or(1.0, |f| f64::from(f[i]));
                let e = -2.0 * i as f64 / f64::from(n_rot);
                (f64::from(cfg.freq_scale) * f64::from(cfg.freq_base).powf(e) / f) as f32
            })
            .collect();
        common::gpu::assert_bits_eq(&format!("{arch} table"), &table[..half], &want);
        assert_eq!(
            table[half].to_bits(),
            1f32.to_bits(),
            "{arch}: cos/sin scale"
        );
        std::fs::remove_file(&path).ok();
    }
    common::gpu::assert_clean(&ctx);
}

/// A qwen3 header (no tensors needed by the readers but the embedding rows) with these scaling
/// keys.
fn header(keys: &[(&'static str, MetaValue)]) -> Gguf {
    let t = Tiny {
        arch: "qwen3",
        n_rot: 32,
        freq_base: 1e6,
        rope_freqs: false,
        keys: keys.to_vec(),
    };
    Gguf::parse(&bytes(&t)).unwrap()
}

/// Both readers agree on the YaRN keys and llama.cpp's defaults; unknown types are refused.
#[test]
fn both_readers_read_the_scaling_keys_alike() {
    let f = MetaValue::F32;
    let s = |v: &str| MetaValue::String(v.into());
    // (keys, type, freq_scale, ext_factor, n_ctx_orig, attn_factor, beta_fast, beta_slow)
    type Want = (RopeScaling, f32, f32, u32, f32, f32, f32);
    let cases: Vec<(Vec<(&'static str, MetaValue)>, Want)> = vec![
        (
            vec![],
            (RopeScaling::Linear, 1.0, 0.0, 65536, 1.0, 32.0, 1.0),
        ),
        (
            yarn_keys(4.0, 16384),
            (RopeScaling::Yarn, 0.25, 1.0, 16384, 1.0, 32.0, 1.0),
        ),
        (
            vec![
                ("rope.scaling.type", s("yarn")),
                ("rope.scaling.factor", f(8.0)),
                ("rope.scaling.yarn_ext_factor", f(0.5)),
                ("rope.scaling.attn_factor", f(0.9)),
                // Superseded while YaRN is on (llama.cpp recomputes it).
                ("rope.scaling.yarn_attn_factor", f(3.0)),
                ("rope.scaling.yarn_beta_fast", f(16.0)),
                ("rope.scaling.yarn_beta_slow", f(2.0)),
            ],
            (RopeScaling::Yarn, 0.125, 0.5, 65536, 0.9, 16.0, 2.0),
        ),
        (
            // "Not set": the yarn default.
            vec![
                ("rope.scaling.type", s("yarn")),
                ("rope.scaling.yarn_ext_factor", f(-1.0)),
            ],
            (RopeScaling::Yarn, 1.0, 1.0, 65536, 1.0, 32.0, 1.0),
        ),
        (
            // No YaRN: both attention factors scale cos and sin.
            vec![
                ("rope.scaling.attn_factor", f(0.5)),
                ("rope.scaling.yarn_attn_factor", f(0.5)),
                ("rope.scaling.factor", f(2.0)),
            ],
            (RopeScaling::Linear, 0.5, 0.0, 65536, 0.25, 32.0, 1.0),
        ),
        (
            // Type none: no frequency scale whatever the factor.
            vec![
                ("rope.scaling.type", s("none")),
                ("rope.scaling.factor", f(4.0)),
            ],
            (RopeScaling::None, 1.0, 0.0, 65536, 1.0, 32.0, 1.0),
        ),
    ];
    for (keys, want) in cases {
        let g = header(&keys);
        let a = Hparams::from_gguf(&g).unwrap();
        let b = RefHparams::from_gguf(&g).unwrap();
        let got = (
            a.rope_scaling,
            a.rope_freq_scale,
            a.rope_ext_factor,
            a.rope_n_ctx_orig,
            a.rope_attn_factor,
            a.rope_beta_fast,
            a.rope_beta_slow,
        );
        assert_eq!(got, want, "{keys:?}");
        let y = b.rope_yarn;
        let kind = match b.rope_scaling {
            RefRopeScaling::None => RopeScaling::None,
            RefRopeScaling::Linear => RopeScaling::Linear,
            RefRopeScaling::Yarn => RopeScaling::Yarn,
        };
        let oracle = (
            kind,
            b.rope_freq_scale,
            y.ext_factor,
            y.n_ctx_orig,
            y.attn_factor,
            y.beta_fast,
            y.beta_slow,
        );
        assert_eq!(oracle, want, "oracle: {keys:?}");
    }
    // Unknown types: a typed error naming the key and the value, from both readers.
    let g = header(&[("rope.scaling.type", s("longrope"))]);
    let e = Hparams::from_gguf(&g).unwrap_err();
    assert!(
        matches!(&e, HparamsError::RopeScaling { key, value }
            if key == "qwen3.rope.scaling.type" && value == "longrope"),
        "{e}"
    );
    assert!(e.to_string().contains("'longrope'"), "{e}");
    let e = RefHparams::from_gguf(&g).unwrap_err();
    assert!(
        matches!(&e, MetaError::RopeScaling { value, .. } if value == "longrope"),
        "{e}"
    );
    // Bad numbers and the DeepSeek-style log multiplier are refused by both.
    for keys in [
        vec![
            ("rope.scaling.type", s("yarn")),
            ("rope.scaling.yarn_beta_slow", f(0.0)),
        ],
        vec![
            ("rope.scaling.type", s("yarn")),
            ("rope.scaling.yarn_log_multiplier", f(0.1)),
        ],
        vec![
            ("rope.scaling.type", s("yarn")),
            ("rope.scaling.original_context_length", MetaValue::U32(0)),
        ],
        vec![("rope.scaling.attn_factor", f(f32::NAN))],
    ] {
        let g = header(&keys);
        assert!(
            matches!(Hparams::from_gguf(&g), Err(HparamsError::Invalid { .. })),
            "{keys:?}"
        );
        assert!(
            matches!(RefHparams::from_gguf(&g), Err(MetaError::Invalid { .. })),
            "oracle: {keys:?}"
        );
    }
}
