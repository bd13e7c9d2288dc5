//! Log-SNR conditioned drafters (PrismML GIDD), vocabulary-less drafters and drafters with
//! legacy weight types, on the real model with random-weight drafters (`flint dspark init`):
//! the device drafter against the CPU oracle (the same bounds as `tests/spec_dspark.rs`), the
//! oracle's conditioning rows against an f64 recomputation from the file, and malformed
//! drafters refused at load with errors naming the values, by both the device loader and the
//! oracle.

use crate::common;

use flint::engine::{DraftOptions, Engine, EngineOptions};
use flint::gguf::{GgmlType, GgufFile, MetaArray, MetaValue};
use flint::model::drafter_init::{random_drafter, InitOptions};
use flint::reference::dspark::{RefDraft, RefDrafter};
use flint::speculative::dspark::{Draft, Dspark};

/// The device-vs-oracle bound of `tests/spec_dspark.rs` (max |logit diff| over 1 + max |logit|).
const LOGIT_TOL: f32 = 1e-5;
/// The confidence bound of `tests/spec_dspark.rs`.
const CONF_TOL: f32 = 1e-5;
/// The oracle's f32 conditioning rows against their f64 recomputation here (f32 angles),
/// relative to max(|value|, 1).
const ROW_TOL: f64 = 1e-5;

fn write(
    dir: &std::path::Path,
    name: &str,
    opts: &InitOptions,
    edit: &[(&str, MetaValue)],
) -> std::path::PathBuf {
    let target = GgufFile::open(&common::model_path()).unwrap();
    let mut w = random_drafter(&target, opts).unwrap();
    for (k, v) in edit {
        w.set(k, v.clone());
    }
    let path = dir.join(name);
    w.write_file(&path).unwrap();
    path
}

fn engine(path: &std::path::Path) -> Result<Engine, flint::Error> {
    let mut d = DraftOptions::new(path.to_path_buf());
    d.inject_chunk = 16;
    Engine::load(
        &EngineOptions {
            model: common::model_path(),
            n_ctx: 256,
            n_ubatch: 512,
            draft: Some(d),
            ..EngineOptions::default()
        },
        1,
    )
}

fn compare(what: &str, gpu_logits: &[f32], gpu: &Draft, r: &RefDraft) {
    let max_ref = r.logits.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = gpu_logits
        .iter()
        .zip(&r.logits)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    let rel = err / (1.0 + max_ref);
    let conf = gpu
        .conf
        .iter()
        .zip(&r.conf)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    eprintln!(
        "{what}: max |logit diff| {err:.2e} (max |logit| {max_ref:.2}, relative {rel:.2e}), \
         max |confidence diff| {conf:.2e}"
    );
    assert!(rel <= LOGIT_TOL, "{what}: relative logit error {rel}");
    assert!(conf <= CONF_TOL, "{what}: confidence error {conf}");
    assert_eq!(gpu.tokens, r.tokens, "{what}: drafts differ");
}

/// The conditioning rows `[γ, d]` recomputed in f64 from the drafter file.
fn rows_f64(file: &GgufFile, legacy: bool, gamma: usize, d: usize) -> Vec<f64> {
    let p = if legacy { "dspark." } else { "" };
    let t = |n: &str| {
        let name = format!("{p}{n}");
        common::dspark::tensor_f32(file.bytes(), &name)
    };
    let (w1, b1, w2, b2) = (
        t("log_snr_fc1.weight"),
        t("log_snr_fc1.bias"),
        t("log_snr_fc2.weight"),
        t("log_snr_fc2.bias"),
    );
    let (min, max) = (-9f32, 9f32);
    let mut out = Vec::new();
    for j in 0..gamma {
        let s = if j == 0 { max } else { min };
        // The angle t·f in f32, as PrismML's graph computes it (t up to 1000 rad: one f32 ulp
        // there is 6e-5, far above f64's); its sine and the MLP in f64.
        let tt = (s - min) / (max - min) * 1000.0;
        let mut feat = vec![0f64; 128];
        for i in 0..64 {
            let f = (-(10000f32).ln() * i as f32 / 64.0).exp();
            let angle = f64::from(tt * f);
            feat[i] = angle.sin();
            feat[64 + i] = angle.cos();
        }
        let h: Vec<f64> = (0..d)
            .map(|r| {
                let z: f64 = (0..128)
                    .map(|i| f64::from(w1[r * 128 + i]) * feat[i])
                    .sum::<f64>()
                    + f64::from(b1[r]);
                z / (1.0 + (-z).exp())
            })
            .collect();
        out.extend((0..d).map(|r| {
            (0..d).map(|i| f64::from(w2[r * d + i]) * h[i]).sum::<f64>() + f64::from(b2[r])
        }));
    }
    out
}

/// Prefill 40 prompt tokens through the target in chunks of 16, injecting into the device
/// drafter and the oracle; then draft greedily and with a forced chain, and compare.
fn check(eng: &mut Engine, ds: &mut Dspark, rd: &mut RefDrafter, what: &str) {
    let text = "The history of the printing press begins in the fifteenth century, when \
                Johannes Gutenberg combined movable metal type, oil-based inks and a wooden \
                press adapted from wine making. Within fifty years presses operated in more \
                than two hundred cities across Europe.";
    let mut tokens = eng.tok.encode(text, true, true).unwrap();
    tokens.truncate(40);
    let n = tokens.len();
    let taps = common::drive::prefill(eng, ds, &tokens, 16);
    let positions: Vec<u32> = (0..n as u32).collect();
    rd.inject(&taps, &positions).unwrap();
    let anchor = eng.fwd.argmax(&eng.ctx).unwrap()[0];
    let p0 = n as u32;
    let gpu = ds.draft(&eng.ctx, anchor, p0, None).unwrap();
    let logits = ds.logits(&eng.ctx).unwrap();
    let r = rd.draft(anchor, p0).unwrap();
    compare(&format!("{what} greedy"), &logits, &gpu, &r);
    let mut forced = |j: usize, _: &[f32]| 100 + j as u32;
    let gpu = ds.draft(&eng.ctx, anchor, p0, Some(&mut forced)).unwrap();
    let logits = ds.logits(&eng.ctx).unwrap();
    let r = rd.draft_with(anchor, p0, |j, _| 100 + j as u32).unwrap();
    compare(&format!("{what} forced"), &logits, &gpu, &r);
    // The conditioning matters: without its rows the oracle's block differs.
    if let Some(rows) = rd.weights.log_snr.take() {
        let plain = rd.draft(anchor, p0).unwrap();
        let moved = plain
            .hidden
            .iter()
            .zip(&r.hidden)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        eprintln!("{what}: the log-SNR rows move the final hidden state by up to {moved:.3e}");
        assert!(
            moved > 1e-3,
            "{what}: log-SNR rows change nothing ({moved})"
        );
        rd.weights.log_snr = Some(rows);
    }
}

#[test]
fn log_snr_drafters_match_the_oracle_in_both_formats() {
    let tmp = common::temp_dir("spec-logsnr");
    let target = GgufFile::open(&common::model_path()).unwrap();
    let cases = [
        // (what, options)
        (
            "dflash, log-SNR, the target's vocabulary",
            InitOptions {
                log_snr: true,
                seed: 21,
                ..InitOptions::default()
            },
        ),
        (
            "legacy, log-SNR, no vocabulary, own Q4_1 embeddings, Q2_0-g128 fc, BF16 Markov, Q4_1",
            InitOptions {
                log_snr: true,
                legacy: true,
                no_vocab: true,
                own_embd: true,
                ty: GgmlType::Q4_1,
                fc_ty: Some(GgmlType::Q2_0_G128),
                embd_ty: Some(GgmlType::Q4_1),
                markov_ty: Some(GgmlType::BF16),
                seed: 22,
                ..InitOptions::default()
            },
        ),
        (
            "dflash, log-SNR, no vocabulary, own Q2_0 embeddings, Q2_0 fc",
            InitOptions {
                log_snr: true,
                no_vocab: true,
                own_embd: true,
                ty: GgmlType::F16,
                fc_ty: Some(GgmlType::Q2_0),
                embd_ty: Some(GgmlType::Q2_0),
                seed: 23,
                ..InitOptions::default()
            },
        ),
    ];
    for (i, (what, opts)) in cases.iter().enumerate() {
        let path = write(tmp.path(), &format!("d{i}.gguf"), opts, &[]);
        let mut eng = engine(&path).unwrap();
        let mut slot = common::drive::take(&mut eng);
        let ds = slot.as_dspark().unwrap();
        assert!(ds.meta.log_snr.is_some(), "{what}");
        let dfile = GgufFile::open(&path).unwrap();
        let mut rd = RefDrafter::load(&dfile, &target, GgmlType::F16).unwrap();
        // The oracle's rows against the f64 formula.
        let (gamma, d) = (opts.block as usize, rd.meta.hp.n_embd as usize);
        let want = rows_f64(&dfile, opts.legacy, gamma, d);
        let got = rd.weights.log_snr.clone().unwrap();
        let worst = got.iter().zip(&want).fold(0f64, |m, (&g, &w)| {
            m.max((f64::from(g) - w).abs() / w.abs().max(1.0))
        });
        eprintln!("{what}: oracle log-SNR rows vs f64: worst relative error {worst:.2e}");
        assert!(worst <= ROW_TOL, "{what}: {worst}");
        assert_ne!(got[..d], got[d..2 * d], "anchor and masked rows differ");
        check(&mut eng, ds, &mut rd, what);
    }
}

/// A load error names every one of `want`.
fn refused(what: &str, err: String, want: &[&str]) {
    eprintln!("{what}: {err}");
    for w in want {
        assert!(err.contains(w), "{what}: no '{w}' in: {err}");
    }
}

#[test]
fn malformed_drafters_are_refused_naming_the_values() {
    let tmp = common::temp_dir("spec-logsnr-bad");
    let target = GgufFile::open(&common::model_path()).unwrap();
    let base = InitOptions {
        log_snr: true,
        no_vocab: true,
        rank: 0,
        seed: 31,
        ..InitOptions::default()
    };
    let i32s = |v: &[i32]| MetaValue::Array(MetaArray::I32(v.to_vec()));
    // (what, metadata edits, what both errors must name)
    type Case<'a> = (&'a str, Vec<(&'a str, MetaValue)>, &'a [&'a str]);
    let cases: [Case; 4] = [
        (
            "vocabulary mismatch",
            vec![("dflash.vocab_size", MetaValue::U32(49153))],
            &["49153", "49152"],
        ),
        (
            "taps past the target's layers",
            vec![("dflash.target_layers", i32s(&[1, 10, 20, 31]))],
            &["31", "30"],
        ),
        (
            "log-SNR range with max <= min",
            vec![("dflash.max_log_snr", MetaValue::F32(-9.0))],
            &["-9", "max"],
        ),
        (
            "fc width that does not match the taps",
            vec![("dflash.target_layers", i32s(&[1, 10, 20]))],
            &["2304", "1728"],
        ),
    ];
    for (i, (what, edit, wants)) in cases.iter().enumerate() {
        let path = write(tmp.path(), &format!("bad{i}.gguf"), &base, edit);
        let err = engine(&path).err().expect(what).to_string();
        refused(&format!("{what} (device)"), err, wants);
        let dfile = GgufFile::open(&path).unwrap();
        let err = RefDrafter::load(&dfile, &target, GgmlType::F16)
            .expect_err(what)
            .to_string();
        refused(&format!("{what} (oracle)"), err, wants);
    }
}

#[test]
fn dspark_init_writes_log_snr_and_vocabulary_less_drafters() {
    let tmp = common::temp_dir("spec-logsnr-cli");
    let out = tmp.path().join("d.gguf");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["dspark", "init", "-m"])
        .arg(common::model_path())
        .arg("-o")
        .arg(&out)
        .args([
            "--log-snr",
            "--legacy",
            "--no-vocab",
            "--fc-type",
            "q2_0-g128",
        ])
        .args(["--markov-type", "bf16", "--type", "q4_1", "--seed", "4"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&run.stdout).to_string() + &String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{text}");
    assert!(
        text.contains("log-SNR -9..9") && text.contains("tokenizer none"),
        "{text}"
    );
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(f.metadata.str("tokenizer.ggml.model").unwrap(), "none");
    assert!(!f.metadata.contains("tokenizer.ggml.tokens"));
    let ty = |n: &str| f.tensor(n).unwrap().ty;
    assert_eq!(ty("dspark.fc.weight"), GgmlType::Q2_0_G128);
    assert_eq!(ty("dspark.markov_head_a.weight"), GgmlType::BF16);
    assert_eq!(ty("blk.0.attn_q.weight"), GgmlType::Q4_1);
    assert_eq!(ty("dspark.log_snr_fc2.weight"), GgmlType::Q4_1);
    let meta = flint::model::DrafterMeta::from_gguf(&f).unwrap();
    assert_eq!(meta.hp.n_vocab, 49152);
    // A width that is not whole 128-element blocks is refused, naming it.
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["dspark", "init", "-m"])
        .arg(common::model_path())
        .arg("-o")
        .arg(tmp.path().join("bad.gguf"))
        .args(["--own-embd", "--embd-type", "q2_0-g128"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(
        err.contains("token_embd.weight") && err.contains("576"),
        "{err}"
    );
}

#[test]
fn both_formats_condition_the_same() {
    let target = std::fs::read(common::model_path()).unwrap();
    let opts = InitOptions {
        log_snr: true,
        seed: 41,
        ..InitOptions::default()
    };
    let dflash = common::dspark::init(&target, &opts);
    let legacy = common::dspark::init(
        &target,
        &InitOptions {
            legacy: true,
            no_vocab: true,
            ..opts.clone()
        },
    );
    let (a, b) = (
        common::dspark::load(&dflash, &target).unwrap(),
        common::dspark::load(&legacy, &target).unwrap(),
    );
    assert_eq!(a.weights.log_snr, b.weights.log_snr, "conditioning rows");
    assert_eq!(a.draft(7, 0).unwrap(), b.draft(7, 0).unwrap(), "drafts");
}
