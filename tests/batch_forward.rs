//! Batched steps on the real test model: sequences of mixed prompt lengths, admitted at
//! different steps, their prompts cut into chunks beside the others' decode rows
//! (`engine::batching::plan_step`), each greedy sequence gives exactly the tokens it gives alone
//! through the single-sequence engine (a different attention path for decode rows: split-KV and
//! reduce on GPUs, and the stacked q | k | v RoPE epilogue). Held for f16 and q8_0 caches.

use crate::common;

use flint::engine::batching::{plan_step, Work};
use flint::engine::{Engine, EngineOptions};
use flint::gguf::GgmlType;
use flint::model::forward::batch::Segment;

const N_PREDICT: usize = 12;

const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "Write a haiku about the sea.",
    "1, 2, 3, 4, 5,",
    "In a distant galaxy, far beyond the reach of the brightest telescopes ever built by \
     humans, there lived a small robot who dreamed of painting the stars. Every night it \
     climbed the tallest hill and",
    "def fibonacci(n):",
    "Q: What is the boiling point of water at sea level?\nA:",
    "Once upon a time",
    "The three primary colors are red, yellow and blue. Mixing red and yellow gives orange; \
     mixing yellow and blue gives green; mixing blue and red gives",
];

fn opts(type_kv: GgmlType) -> EngineOptions {
    EngineOptions {
        model: common::model_path(),
        n_ctx: 256,
        n_ubatch: 24,
        type_k: type_kv,
        type_v: type_kv,
        ..EngineOptions::default()
    }
}

/// Each prompt alone, greedy, through the single-sequence engine.
fn alone(type_kv: GgmlType, prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let mut eng = Engine::load(&opts(type_kv), 1).unwrap();
    prompts
        .iter()
        .map(|p| {
            eng.reset(0).unwrap();
            let stats = common::generate(&mut eng, p, N_PREDICT, None, false);
            stats.generated_token_ids
        })
        .collect()
}

/// Every prompt through batched steps: sequence s is admitted at step 2·s, prompts run in
/// chunks under the 24-row budget beside the decode rows, greedy from the step's argmax.
fn batched(type_kv: GgmlType, prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let n = prompts.len();
    let mut eng = Engine::load(&opts(type_kv), n as u32).unwrap();
    let eog = |t: u32| eng.tok.is_eog(t);
    let eog_ids: Vec<bool> = (0..eng.fwd.hp().n_vocab).map(eog).collect();
    let mut fed = vec![0usize; n]; // prompt rows run
    let mut next: Vec<Option<u32>> = vec![None; n]; // token to run next (decoding)
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut done = vec![false; n];
    let mut step = 0;
    while done.iter().any(|d| !d) {
        let work: Vec<Work> = (0..n)
            .filter(|&s| step >= 2 * s && !done[s])
            .map(|s| Work {
                seq: s,
                prompt_left: prompts[s].len() - fed[s],
            })
            .collect();
        let rows = plan_step(&work, eng.fwd.max_rows() as usize);
        let mut segs = Vec::new();
        let mut logits_of = Vec::new();
        for &(s, m) in &rows {
            let (tokens, logits) = if fed[s] < prompts[s].len() {
                let part = &prompts[s][fed[s]..fed[s] + m];
                (part, fed[s] + m == prompts[s].len())
            } else {
                (std::slice::from_ref(next[s].as_ref().unwrap()), true)
            };
            segs.push(Segment {
                seq: s,
                tokens,
                n_logits: u32::from(logits),
            });
            if logits {
                logits_of.push(s);
            }
        }
        step += 1;
        if segs.is_empty() {
            continue;
        }
        eng.step(&segs).unwrap();
        for &(s, m) in &rows {
            if fed[s] < prompts[s].len() {
                fed[s] += m;
            }
        }
        let ids = eng.fwd.argmax(&eng.ctx).unwrap();
        assert_eq!(ids.len(), logits_of.len());
        for (&s, &t) in logits_of.iter().zip(&ids) {
            if eog_ids[t as usize] {
                done[s] = true;
                continue;
            }
            out[s].push(t);
            next[s] = Some(t);
            if out[s].len() >= N_PREDICT {
                done[s] = true;
            }
        }
    }
    out
}

fn check(type_kv: GgmlType, n: usize) {
    let tok = flint::tokenizer::Tokenizer::from_gguf(
        &flint::gguf::GgufFile::open(&common::model_path()).unwrap(),
    )
    .unwrap();
    let prompts: Vec<Vec<u32>> = PROMPTS[..n]
        .iter()
        .map(|p| tok.encode(p, true, false).unwrap())
        .collect();
    let lens: Vec<usize> = prompts.iter().map(Vec::len).collect();
    let want = alone(type_kv, &prompts);
    let got = batched(type_kv, &prompts);
    for (s, (w, g)) in want.iter().zip(&got).enumerate() {
        assert!(!w.is_empty(), "sequence {s} generated nothing alone");
        assert_eq!(
            g, w,
            "sequence {s} ({} prompt tokens): batched vs alone",
            lens[s]
        );
    }
    eprintln!("{n} sequences, prompts of {lens:?} tokens: batched = alone ({type_kv:?} caches)");
}

#[test]
fn eight_sequences_batched_give_their_tokens_alone_f16() {
    check(GgmlType::F16, 8);
}

#[test]
fn four_sequences_batched_give_their_tokens_alone_q8_0() {
    check(GgmlType::Q8_0, 4);
}

/// `flint bench -npl`: llama-batched-bench's fields in json and csv, each derived figure
/// consistent with the measured times (N_KV = B·(PP + TG), S_PP = B·PP / T_PP, …), and the
/// batching gain relative to the B = 1 row of the same run.
#[test]
fn bench_npl_rows_in_json_and_csv() {
    let run = |fmt: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flint"))
            .args(["bench", "-m"])
            .arg(common::model_path())
            .args([
                "-npp", "8", "-ntg", "4", "-npl", "1,2", "-r", "1", "-o", fmt,
            ])
            .env("XDG_RUNTIME_DIR", std::env::temp_dir())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let rows: serde_json::Value = serde_json::from_str(&run("json")).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
    for r in rows {
        let (pp, tg, b) = (f(r, "pp"), f(r, "tg"), f(r, "pl"));
        assert_eq!(f(r, "n_kv"), b * (pp + tg));
        let close =
            |a: f64, e: f64| assert!((a - e).abs() <= 1e-9 * e.abs().max(1.0), "{a} vs {e}");
        close(f(r, "speed_pp"), b * pp / f(r, "t_pp"));
        close(f(r, "speed_tg"), b * tg / f(r, "t_tg"));
        close(f(r, "t"), f(r, "t_pp") + f(r, "t_tg"));
        close(f(r, "speed"), f(r, "n_kv") / f(r, "t"));
    }
    let gain = f(&rows[1], "speed_tg_over_b1");
    let want = f(&rows[1], "speed_tg") / f(&rows[0], "speed_tg");
    assert!((gain - want).abs() < 1e-9 * want, "{gain} vs {want}");
    let csv = run("csv");
    let header = csv.lines().next().unwrap();
    for k in [
        "pp", "tg", "pl", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg", "t", "speed",
    ] {
        assert!(
            header.split(',').any(|h| h == k),
            "{k} missing from {header}"
        );
    }
    assert_eq!(csv.lines().count(), 3, "{csv}");
}
