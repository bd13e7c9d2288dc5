//! Load-time shape checks (`flint::model::shapes`) on files written to be wrong: one tensor's
//! shape changed per case (the LM head's rows off the vocabulary, `ffn_down` transposed, a
//! DeltaNet projection too narrow, …) and one metadata value per width case (a huge
//! `head_count × key_length`, zero KV heads), each refused with its own error naming the
//! tensor (or the keys) and both shapes. The untouched files pass: a tiny llama, every preset
//! (drafters included), random drafters in both formats, and the real SmolLM2 model and its
//! drafter. All on the GGUF header, no device; one case goes through `flint generate`, which
//! must refuse the file before running it.

use crate::common;

use flint::gguf::{GgmlType, Gguf, GgufError, GgufFile, GgufWriter, MetaValue};
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::model::presets::{preset, PRESETS};
use flint::model::shapes::{check_drafter_shapes, check_shapes};
use flint::model::{DrafterMeta, Hparams, HparamsError};

/// d 64, 4 query / 2 KV heads of 16, FFN 128, vocabulary 96, 2 layers, separate LM head,
/// q/k/v biases and llama-3 rope factors (so the optional tensors are checked too). `edit`
/// may change any tensor's shape as it is added.
fn tiny_llama(edit: impl Fn(&str, Vec<u64>) -> Vec<u64>) -> GgufWriter {
    let (d, nh, nkv, hd, ff, nv) = (64u64, 4u64, 2u64, 16u64, 128u64, 96u64);
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("llama".into()));
    for (k, v) in [
        ("block_count", 2),
        ("embedding_length", d),
        ("attention.head_count", nh),
        ("attention.head_count_kv", nkv),
        ("feed_forward_length", ff),
        ("vocab_size", nv),
        ("context_length", 64),
        ("attention.key_length", hd),
        ("attention.value_length", hd),
    ] {
        w.set(&format!("llama.{k}"), MetaValue::U32(v as u32));
    }
    w.set(
        "llama.attention.layer_norm_rms_epsilon",
        MetaValue::F32(1e-5),
    );
    {
        let mut add = |name: &str, shape: &[u64]| {
            w.add_tensor_shape(name, &edit(name, shape.to_vec()), GgmlType::F32)
                .unwrap();
        };
        add("token_embd.weight", &[d, nv]);
        add("output_norm.weight", &[d]);
        add("output.weight", &[d, nv]);
        add("rope_freqs.weight", &[hd / 2]);
        for il in 0..2 {
            let n = |s: &str| format!("blk.{il}.{s}");
            add(&n("attn_norm.weight"), &[d]);
            add(&n("attn_q.weight"), &[d, nh * hd]);
            add(&n("attn_k.weight"), &[d, nkv * hd]);
            add(&n("attn_v.weight"), &[d, nkv * hd]);
            add(&n("attn_q.bias"), &[nh * hd]);
            add(&n("attn_k.bias"), &[nkv * hd]);
            add(&n("attn_v.bias"), &[nkv * hd]);
            add(&n("attn_output.weight"), &[nh * hd, d]);
            add(&n("ffn_norm.weight"), &[d]);
            add(&n("ffn_gate.weight"), &[d, ff]);
            add(&n("ffn_up.weight"), &[d, ff]);
            add(&n("ffn_down.weight"), &[ff, d]);
        }
    }
    w
}

fn parsed(w: &GgufWriter) -> Gguf {
    Gguf::parse(&w.to_bytes().unwrap()).unwrap()
}

fn llama() -> Gguf {
    parsed(&tiny_llama(|_, s| s))
}

fn preset_gguf(name: &str) -> Gguf {
    Gguf::parse(&preset(name).unwrap().unwrap()).unwrap()
}

/// `g` with tensor `name`'s shape replaced by `shape` (the header only: data is never read).
fn reshaped(mut g: Gguf, name: &str, shape: &[u64]) -> Gguf {
    let t = g
        .tensors
        .iter_mut()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    t.shape = shape.to_vec();
    g
}

/// `g` with metadata `key` set to `v`.
fn with_u32(mut g: Gguf, key: &str, v: u32) -> Gguf {
    g.metadata.set(key, MetaValue::U32(v));
    g
}

/// Reads the hyperparameters and checks the shapes, as a load does.
fn check(g: &Gguf) -> Result<(), HparamsError> {
    let hp = Hparams::from_gguf(g)?;
    check_shapes(g, &hp)
}

fn check_drafter(g: &Gguf) -> Result<(), HparamsError> {
    let meta = DrafterMeta::from_gguf(g)?;
    check_drafter_shapes(g, &meta)
}

/// `result` is [`HparamsError::TensorShape`] for `tensor`, `expected` and `found`, and its
/// message names all three.
fn assert_shape(result: Result<(), HparamsError>, tensor: &str, expected: &[u64], found: &[u64]) {
    let err = match result {
        Err(e @ HparamsError::TensorShape { .. }) => e,
        other => panic!("{tensor}: expected a TensorShape error, got {other:?}"),
    };
    let msg = err.to_string();
    let HparamsError::TensorShape {
        tensor: t,
        expected: e,
        found: f,
    } = err
    else {
        unreachable!()
    };
    assert_eq!(
        (t.as_str(), e.as_slice(), f.as_slice()),
        (tensor, expected, found)
    );
    for part in [
        tensor.to_string(),
        format!("{expected:?}"),
        format!("{found:?}"),
    ] {
        assert!(msg.contains(&part), "'{msg}' does not name {part}");
    }
}

/// `result` is [`HparamsError::Overflow`] whose message names every one of `names`.
fn assert_overflow(result: Result<(), HparamsError>, names: &[&str]) {
    let err = match result {
        Err(e @ HparamsError::Overflow { .. }) => e,
        other => panic!("expected an Overflow error, got {other:?}"),
    };
    let msg = err.to_string();
    for n in names {
        assert!(msg.contains(n), "'{msg}' does not name {n}");
    }
}

#[test]
fn untouched_files_pass() {
    check(&llama()).unwrap();
    for name in PRESETS {
        let g = preset_gguf(name);
        let arch = g.metadata.architecture().unwrap();
        if arch == "dflash" || arch == "dspark" {
            check_drafter(&g).unwrap_or_else(|e| panic!("{name}: {e}"));
        } else {
            check(&g).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

#[test]
fn the_real_model_passes() {
    let path = common::model_path();
    let file = GgufFile::open(&path).unwrap();
    check(&file).unwrap();
    // Its default drafter, where the checkout has it.
    let drafter = path.with_file_name("SmolLM2-135M-Instruct.dspark-Q8_0.gguf");
    if drafter.exists() {
        check_drafter(&GgufFile::open(&drafter).unwrap()).unwrap();
    }
}

#[test]
fn random_drafters_pass() {
    let target = preset_gguf("qwen35-tiny-f32");
    let variants = [
        InitOptions::default(),
        InitOptions {
            legacy: true,
            log_snr: true,
            own_embd: true,
            layers: 2,
            ..InitOptions::default()
        },
        InitOptions {
            rank: 0,
            confidence: false,
            no_vocab: true,
            ..InitOptions::default()
        },
    ];
    for opts in variants {
        let g = parsed(&random_drafter(&target, &opts).unwrap());
        check_drafter(&g).unwrap_or_else(|e| panic!("{opts:?}: {e}"));
    }
}

#[test]
fn llama_tensors_off_the_hyperparameters_are_refused() {
    // (tensor, wrong shape, the shape the hyperparameters give)
    let cases: [(&str, &[u64], &[u64]); 14] = [
        ("output.weight", &[64, 95], &[64, 96]),
        ("output.weight", &[96, 64], &[64, 96]),
        ("token_embd.weight", &[64, 100], &[64, 96]),
        ("output_norm.weight", &[32], &[64]),
        ("rope_freqs.weight", &[16], &[8]),
        ("blk.0.attn_norm.weight", &[64, 2], &[64]),
        ("blk.0.attn_q.weight", &[64, 32], &[64, 64]),
        ("blk.0.attn_k.weight", &[64, 64], &[64, 32]),
        ("blk.1.attn_v.weight", &[32, 64], &[64, 32]),
        ("blk.1.attn_output.weight", &[32, 64], &[64, 64]),
        ("blk.0.attn_q.bias", &[32], &[64]),
        ("blk.1.ffn_gate.weight", &[64, 64], &[64, 128]),
        ("blk.0.ffn_up.weight", &[128, 64], &[64, 128]),
        ("blk.1.ffn_down.weight", &[64, 128], &[128, 64]),
    ];
    for (tensor, wrong, expected) in cases {
        assert_shape(
            check(&reshaped(llama(), tensor, wrong)),
            tensor,
            expected,
            wrong,
        );
    }
}

#[test]
fn trailing_ones_are_the_same_shape() {
    check(&reshaped(llama(), "blk.0.ffn_norm.weight", &[64, 1])).unwrap();
}

#[test]
fn a_missing_tensor_is_named() {
    let mut g = llama();
    g.tensors.retain(|t| t.name != "blk.1.ffn_down.weight");
    match check(&g) {
        Err(HparamsError::Metadata(GgufError::MissingTensor { name })) => {
            assert_eq!(name, "blk.1.ffn_down.weight")
        }
        other => panic!("expected a missing tensor, got {other:?}"),
    }
}

#[test]
fn qwen35_tensors_off_the_hyperparameters_are_refused() {
    // d 64; DeltaNet layers 0-2, 4-6: conv channels 2·32 + 128 = 192, 4 v heads of 32;
    // gated attention in layers 3 and 7: q and its gate, 2 · 4 heads of 32.
    let cases: [(&str, &[u64], &[u64]); 13] = [
        ("output.weight", &[64, 511], &[64, 512]),
        ("blk.0.attn_qkv.weight", &[64, 191], &[64, 192]),
        ("blk.1.attn_gate.weight", &[64, 64], &[64, 128]),
        ("blk.2.ssm_beta.weight", &[64, 2], &[64, 4]),
        ("blk.4.ssm_alpha.weight", &[4, 64], &[64, 4]),
        ("blk.5.ssm_conv1d.weight", &[192, 4], &[4, 192]),
        ("blk.6.ssm_dt.bias", &[8], &[4]),
        ("blk.0.ssm_a", &[2], &[4]),
        ("blk.1.ssm_norm.weight", &[16], &[32]),
        ("blk.2.ssm_out.weight", &[64, 128], &[128, 64]),
        ("blk.3.attn_q.weight", &[64, 128], &[64, 256]),
        ("blk.7.attn_k_norm.weight", &[16], &[32]),
        ("blk.7.post_attention_norm.weight", &[128], &[64]),
    ];
    for (tensor, wrong, expected) in cases {
        let g = reshaped(preset_gguf("qwen35-tiny-f32"), tensor, wrong);
        assert_shape(check(&g), tensor, expected, wrong);
    }
}

#[test]
fn drafter_tensors_off_their_metadata_are_refused() {
    // Qwen3-0.6B's drafter: d 1024, 3 taps of 1024, Markov rank 256, vocabulary 151936.
    let cases: [(&str, &[u64], &[u64]); 4] = [
        ("fc.weight", &[2048, 1024], &[3072, 1024]),
        ("markov_w2.weight", &[256, 151935], &[256, 151936]),
        ("conf_proj.weight", &[1024, 1], &[1280]),
        ("blk.1.ffn_up.weight", &[1024, 1024], &[1024, 3072]),
    ];
    for (tensor, wrong, expected) in cases {
        let g = reshaped(preset_gguf("qwen3-0.6b-dspark-q8_0"), tensor, wrong);
        assert_shape(check_drafter(&g), tensor, expected, wrong);
    }
}

#[test]
fn huge_widths_are_refused_not_wrapped() {
    let key = |k: &str| format!("llama.{k}");
    // 4 heads × 2^30 = 2^32.
    let g = with_u32(llama(), &key("attention.key_length"), 1 << 30);
    assert_overflow(
        check(&g),
        &[
            "llama.attention.head_count × llama.attention.key_length",
            "4 × 1073741824",
        ],
    );
    // 2 KV heads × 2^31 = 2^32 (the query width, 4 × 16, fits).
    let g = with_u32(llama(), &key("attention.value_length"), 1 << 31);
    assert_overflow(
        check(&g),
        &[
            "llama.attention.head_count_kv",
            "llama.attention.value_length",
        ],
    );
    // 2^27 tokens × d 64 = 2^33.
    let g = with_u32(llama(), &key("vocab_size"), 1 << 27);
    assert_overflow(check(&g), &["vocabulary", "llama.embedding_length"]);
    let g = with_u32(llama(), &key("feed_forward_length"), 1 << 27);
    assert_overflow(check(&g), &["llama.feed_forward_length"]);
}

#[test]
fn huge_deltanet_widths_are_refused_not_wrapped() {
    let key = |k: &str| format!("qwen35.{k}");
    // 2^28 q/k heads × 16 = 2^32.
    let mut g = preset_gguf("qwen35-tiny-f32");
    for (k, v) in [
        ("ssm.group_count", 1 << 28),
        ("ssm.time_step_rank", 1 << 28),
        ("ssm.inner_size", 1 << 28),
    ] {
        g = with_u32(g, &key(k), v);
    }
    assert_overflow(
        check(&g),
        &["qwen35.ssm.group_count", "qwen35.ssm.state_size"],
    );
    // 2^22 heads of 256: q, k and v 2^30 each: 3 · 2^30 channels × 4 taps = 3 · 2^32.
    let mut g = preset_gguf("qwen35-tiny-f32");
    for (k, v) in [
        ("ssm.group_count", 1 << 22),
        ("ssm.state_size", 256),
        ("ssm.time_step_rank", 1 << 22),
        ("ssm.inner_size", 1 << 30),
    ] {
        g = with_u32(g, &key(k), v);
    }
    assert_overflow(check(&g), &["conv1d channels", "qwen35.ssm.conv_kernel"]);
}

#[test]
fn zero_kv_heads_are_refused() {
    for (k, v) in [
        ("llama.attention.head_count_kv", 0),
        ("llama.attention.head_count", 0),
        ("llama.attention.head_count_kv", 3),
    ] {
        match check(&with_u32(llama(), k, v)) {
            Err(e @ HparamsError::Invalid { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("llama.attention.head_count_kv"), "{msg}");
            }
            other => panic!("{k} = {v}: expected Invalid, got {other:?}"),
        }
    }
    let g = with_u32(
        preset_gguf("qwen35-tiny-f32"),
        "qwen35.ssm.time_step_rank",
        0,
    );
    assert!(matches!(check(&g), Err(HparamsError::Invalid { .. })));
}

/// `flint generate` on a complete file (random weights) whose LM head has one row too few
/// exits with the shape error (bad input file: 3) before running anything.
#[test]
fn generate_refuses_a_wrongly_shaped_file() {
    let dir = common::temp_dir("shapes");
    let path = dir.path().join("bad-lm-head.gguf");
    let header = tiny_llama(|name, s| {
        if name == "output.weight" {
            vec![64, 95]
        } else {
            s
        }
    })
    .to_bytes()
    .unwrap();
    let mut out = std::fs::File::create(&path).unwrap();
    flint::model::random_weights::write_random(&header, &mut out, 1).unwrap();
    drop(out);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["generate", "-m"])
        .arg(&path)
        .args(["-p", "hi", "-n", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "stderr: {stderr}");
    for part in ["output.weight", "[64, 96]", "[64, 95]"] {
        assert!(
            stderr.contains(part),
            "stderr does not name {part}: {stderr}"
        );
    }
}
