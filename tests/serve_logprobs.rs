//! Log-probabilities from `flint serve` (issue 52) on the default model, against the CPU oracle
//! (`flint::reference`: an f32 forward over the dequantized weights, f16 K/V as the server's
//! cache), never against flint's own output:
//! - `echo_and_generated_logprobs_match_the_reference`: `/v1/completions` with `echo`,
//!   `logprobs: 5` and a few generated tokens: every echoed prompt token (the first `null`) and
//!   every generated one has the reference's log-probability within [`BOUND`], and its top 5
//!   the reference's top 5 except where the reference's 5th and 6th are nearer than twice
//!   the bound; `max_tokens: 0` gives the prompt alone; streamed chunks carry the same entries.
//! - `lm_eval_multiple_choice_agrees_with_the_reference`: lm-eval's `local-completions`
//!   loglikelihood requests (token ids, `echo`, `logprobs: 1`, `max_tokens: 1`,
//!   `[ctxlen:-1]`) on a small task written here: each item's chosen answer (largest summed
//!   continuation log-probability) and `is_greedy` agree with the same scoring of the
//!   reference's log-probabilities.
//! - `chat_and_llama_shapes`: chat `logprobs`/`top_logprobs` and llama-server's `n_probs` /
//!   `post_sampling_probs`: the entries spell the answer, greedy tokens are their row's best,
//!   values match the legacy route's reference-checked ones for the same tokens; after
//!   sampling with `top_k` 3, three candidates summing to 1; several prompts in one body get
//!   the choices they get alone.
//! - `dspark_logprobs_equal_the_plain_run`: with the trained drafter (`--spec-no-bypass`, so
//!   verify rows carry the tokens), the log-probabilities equal a run without it.

use crate::client;
use crate::harness;

use std::sync::OnceLock;

use client::http;
use flint::gguf::{GgmlType, GgufFile};
use flint::reference::forward::{Capture, RefModel, Rows};
use flint::tokenizer::Tokenizer;
use harness::{serial, Server};
use serde_json::{json, Value};

/// Largest |flint - reference| of a log-probability allowed (nats). Measured worst on these
/// prompts: 0.0012 (docs/SERVER.md, "Log-probabilities"); the bound is about 8 times that.
const BOUND: f64 = 0.01;

fn reference() -> &'static (RefModel, Tokenizer) {
    static M: OnceLock<(RefModel, Tokenizer)> = OnceLock::new();
    M.get_or_init(|| {
        let file = GgufFile::open(&harness::model()).expect("open the model");
        let tok = Tokenizer::from_gguf(&file).expect("tokenizer");
        (RefModel::load(&file).expect("load the model"), tok)
    })
}

/// The reference's log-softmax of every row of `ids` (`[ids.len(), n_vocab]`, f64): row `i`
/// predicts token `i + 1`.
fn ref_logprobs(ids: &[u32]) -> Vec<Vec<f64>> {
    let (m, _) = reference();
    let mut cache = m.new_cache(GgmlType::F16).expect("cache");
    let capture = Capture {
        rows: Rows::All,
        ..Capture::default()
    };
    let out = m
        .forward(&mut cache, ids, 0, &capture)
        .expect("reference forward");
    let n_vocab = out.logits.len() / ids.len();
    out.logits
        .chunks_exact(n_vocab)
        .map(|row| {
            let mx = row
                .iter()
                .fold(f64::NEG_INFINITY, |a, &v| a.max(f64::from(v)));
            let s: f64 = row.iter().map(|&v| (f64::from(v) - mx).exp()).sum();
            let lse = mx + s.ln();
            row.iter().map(|&v| f64::from(v) - lse).collect()
        })
        .collect()
}

/// The `k` best ids of a row, best first.
fn top_ids(row: &[f64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

fn post(addr: &str, path: &str, body: &Value) -> Value {
    let (code, text) = http(addr, "POST", path, &[], Some(&body.to_string())).expect("request");
    assert_eq!(code, 200, "{path} {body}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A legacy token string as the server writes it.
fn token_text(tok: &Tokenizer, id: u32) -> String {
    let b = tok.token_to_piece(id, true).expect("piece");
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => {
            let hex: String = b.iter().map(|x| format!("\\x{x:02x}")).collect();
            format!("bytes:{hex}")
        }
    }
}

const PROMPTS: &[&str] = &[
    "The capital of France is Paris. The capital of Germany is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "Once upon a time, in a small village by the sea, there lived",
];

/// Checks one `/v1/completions` choice (`echo`, `logprobs: 5`) of prompt `ids` against the
/// reference; returns the largest error seen.
fn check_choice(ids: &[u32], lp: &Value, n_gen: usize) -> f64 {
    let (_, tok) = reference();
    let tokens = lp["tokens"].as_array().expect("tokens");
    let lps = lp["token_logprobs"].as_array().expect("token_logprobs");
    let tops = lp["top_logprobs"].as_array().expect("top_logprobs");
    assert_eq!(tokens.len(), ids.len() + n_gen, "{lp}");
    assert!(
        lps[0].is_null() && tops[0].is_null(),
        "the first token: {lp}"
    );
    // The whole sequence: the prompt's ids and the generated tokens (ids from the reference's
    // vocabulary by their text, checked to spell the same).
    let gen_text: Vec<&str> = tokens[ids.len()..]
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let all_text: String = tokens
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect::<String>();
    let gen_ids = tok.encode(&gen_text.concat(), false, true).expect("encode");
    let mut seq = ids.to_vec();
    seq.extend(&gen_ids);
    if seq.len() != tokens.len() {
        // A re-tokenization that differs: check the prompt part only.
        seq.truncate(ids.len());
    }
    let rows = ref_logprobs(&seq[..seq.len() - 1]);
    let mut worst = 0.0f64;
    for i in 1..seq.len() {
        assert_eq!(
            tokens[i].as_str().unwrap(),
            token_text(tok, seq[i]),
            "{all_text:?}"
        );
        let got = lps[i].as_f64().expect("a logprob");
        let want = rows[i - 1][seq[i] as usize];
        let err = (got - want).abs();
        worst = worst.max(err);
        assert!(err <= BOUND, "token {i} ({:?}): {got} vs {want}", tokens[i]);
        // Top 5: the reference's, unless its 5th and 6th are nearer than twice the bound.
        let top = tops[i].as_object().expect("a dict");
        let want_top = top_ids(&rows[i - 1], 6);
        let gap = rows[i - 1][want_top[4]] - rows[i - 1][want_top[5]];
        let chosen_in = want_top[..5].contains(&(seq[i] as usize));
        assert!(
            top.len() == 5 || (top.len() == 6 && !chosen_in) || gap < 2.0 * BOUND,
            "{top:?}"
        );
        if gap >= 2.0 * BOUND {
            for &w in &want_top[..5] {
                let t = token_text(tok, w as u32);
                let v = top.get(&t).and_then(Value::as_f64);
                let v = v.unwrap_or_else(|| panic!("token {i}: {t:?} missing from {top:?}"));
                assert!((v - rows[i - 1][w]).abs() <= BOUND, "{t:?}: {v}");
            }
        }
    }
    worst
}

#[test]
fn echo_and_generated_logprobs_match_the_reference() {
    let _g = serial();
    let (_, tok) = reference();
    let s = Server::start(&["-c", "512"]);
    let mut worst = 0.0f64;
    for p in PROMPTS {
        let ids = tok.encode(p, true, false).expect("encode");
        let body = json!({"prompt": ids, "echo": true, "logprobs": 5, "max_tokens": 6,
                          "temperature": 0, "ignore_eos": true});
        let v = post(&s.addr, "/v1/completions", &body);
        let c = &v["choices"][0];
        let text = c["text"].as_str().unwrap();
        assert!(
            text.starts_with(&tok.decode(&ids, true).unwrap()),
            "{text:?}"
        );
        worst = worst.max(check_choice(&ids, &c["logprobs"], 6));
        let offsets = c["logprobs"]["text_offset"].as_array().unwrap();
        assert_eq!(offsets[0], json!(0));

        // The prompt alone.
        let body = json!({"prompt": ids, "echo": true, "logprobs": 5, "max_tokens": 0});
        let v = post(&s.addr, "/v1/completions", &body);
        assert_eq!(v["usage"]["completion_tokens"], json!(0), "{v}");
        worst = worst.max(check_choice(&ids, &v["choices"][0]["logprobs"], 0));

        // Streamed: the chunks' entries, joined, are the whole answer's.
        let body = json!({"prompt": ids, "echo": true, "logprobs": 5, "max_tokens": 6,
                          "temperature": 0, "ignore_eos": true, "stream": true});
        let (code, text) = http(
            &s.addr,
            "POST",
            "/v1/completions",
            &[],
            Some(&body.to_string()),
        )
        .unwrap();
        assert_eq!(code, 200, "{text}");
        let mut joined = json!({"tokens": [], "token_logprobs": []});
        for line in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let Ok(ev) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let lp = &ev["choices"][0]["logprobs"];
            for key in ["tokens", "token_logprobs"] {
                if let Some(a) = lp[key].as_array() {
                    joined[key]
                        .as_array_mut()
                        .unwrap()
                        .extend(a.iter().cloned());
                }
            }
        }
        assert_eq!(joined["tokens"], c["logprobs"]["tokens"]);
        assert_eq!(joined["token_logprobs"], c["logprobs"]["token_logprobs"]);
    }
    eprintln!("largest |flint - reference| log-probability: {worst:.5}");
    s.stop();
}

/// An item: a context and its choices, the first one right.
const TASK: &[(&str, &[&str])] = &[
    ("The sun rises in the", &[" east", " west", " north"]),
    (
        "Water freezes at zero degrees",
        &[" Celsius", " Kelvin", " Newton"],
    ),
    ("A cat says", &[" meow", " moo", " quack"]),
    ("Two plus two equals", &[" four", " seven", " eleven"]),
    ("The opposite of hot is", &[" cold", " loud", " green"]),
    ("Paris is the capital of", &[" France", " Japan", " Brazil"]),
];

/// lm-eval's score of one request: the sum of the continuation's log-probabilities
/// (`token_logprobs[ctxlen:-1]`) and whether each was its row's best.
fn lm_eval_score(lps: &[f64], tops: &[f64]) -> (f64, bool) {
    let greedy = lps.iter().zip(tops).all(|(t, m)| t >= m);
    (lps.iter().sum(), greedy)
}

/// How near a reference row is to changing whether `token` is its best: the gap between the
/// token and the best other one.
fn greedy_margin(row: &[f64], token: usize) -> f64 {
    let other = row
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != token)
        .fold(f64::NEG_INFINITY, |m, (_, &v)| m.max(v));
    (row[token] - other).abs()
}

#[test]
fn lm_eval_multiple_choice_agrees_with_the_reference() {
    let _g = serial();
    let (_, tok) = reference();
    let s = Server::start(&["-c", "512"]);
    for (context, choices) in TASK {
        let ctx_ids = tok.encode(context, true, false).unwrap();
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for cont in *choices {
            let cont_ids = tok.encode(cont, false, false).unwrap();
            let mut ids = ctx_ids.clone();
            ids.extend(&cont_ids);
            // lm-eval's `local-completions` loglikelihood payload (a batch of one).
            let body = json!({"model": "m", "prompt": [ids], "temperature": 0, "max_tokens": 1,
                              "logprobs": 1, "seed": 1234, "echo": true});
            let v = post(&s.addr, "/v1/completions", &body);
            let lp = &v["choices"][0]["logprobs"];
            let n = ctx_ids.len();
            let end = lp["token_logprobs"].as_array().unwrap().len() - 1;
            assert_eq!(end, ids.len(), "the generated token comes last: {lp}");
            let lps: Vec<f64> = lp["token_logprobs"].as_array().unwrap()[n..end]
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            let tops: Vec<f64> = lp["top_logprobs"].as_array().unwrap()[n..end]
                .iter()
                .map(|d| {
                    d.as_object()
                        .unwrap()
                        .values()
                        .filter_map(Value::as_f64)
                        .fold(f64::MIN, f64::max)
                })
                .collect();
            got.push(lm_eval_score(&lps, &tops));
            let rows = ref_logprobs(&ids[..ids.len() - 1]);
            let ref_lps: Vec<f64> = (n..ids.len())
                .map(|i| rows[i - 1][ids[i] as usize])
                .collect();
            let ref_tops: Vec<f64> = (n..ids.len())
                .map(|i| rows[i - 1].iter().copied().fold(f64::MIN, f64::max))
                .collect();
            want.push(lm_eval_score(&ref_lps, &ref_tops));
            let near =
                (n..ids.len()).any(|i| greedy_margin(&rows[i - 1], ids[i] as usize) <= 2.0 * BOUND);
            if !near {
                assert_eq!(
                    got.last().map(|g| g.1),
                    want.last().map(|w| w.1),
                    "{context:?}{cont:?}"
                );
            }
        }
        let best = |s: &[(f64, bool)]| {
            (0..s.len())
                .max_by(|&a, &b| s[a].0.total_cmp(&s[b].0))
                .unwrap()
        };
        let (g, w) = (best(&got), best(&want));
        let mut sorted: Vec<f64> = want.iter().map(|x| x.0).collect();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let margin = sorted[0] - sorted[1];
        eprintln!("{context:?}: flint {got:?}, reference {want:?}");
        if margin > 2.0 * BOUND * 4.0 {
            assert_eq!(g, w, "{context:?}: flint {got:?}, reference {want:?}");
        }
        for (a, b) in got.iter().zip(&want) {
            assert!(
                (a.0 - b.0).abs() <= 4.0 * BOUND,
                "{context:?}: {a:?} vs {b:?}"
            );
        }
    }
    s.stop();
}

/// Concatenated `bytes` of chat entries, as text.
fn spelled(entries: &[Value]) -> String {
    let bytes: Vec<u8> = entries
        .iter()
        .flat_map(|e| {
            e["bytes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u8)
        })
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The `data:` events of a streamed answer, parsed.
fn events(addr: &str, path: &str, body: &Value) -> Vec<Value> {
    let (code, text) = http(addr, "POST", path, &[], Some(&body.to_string())).unwrap();
    assert_eq!(code, 200, "{text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

#[test]
fn chat_and_llama_shapes() {
    let _g = serial();
    let s = Server::start(&["-c", "512"]);
    let messages = json!([{"role": "user", "content": "Name three colors."}]);
    let body = json!({"messages": messages, "max_tokens": 12, "temperature": 0,
                      "logprobs": true, "top_logprobs": 3});
    let v = post(&s.addr, "/v1/chat/completions", &body);
    let content = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let entries = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(spelled(&entries), content);
    for e in &entries {
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3, "{e}");
        let vals: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(
            vals.windows(2).all(|w| w[0] >= w[1]) && vals[0] <= 0.0,
            "{e}"
        );
        // Greedy: the token is its row's best.
        assert_eq!(e["token"], top[0]["token"], "{e}");
        assert_eq!(e["logprob"], top[0]["logprob"], "{e}");
    }
    // The same tokens through the legacy route (whose values are held to the reference).
    let (code, rendered) = http(
        &s.addr,
        "POST",
        "/apply-template",
        &[],
        Some(&json!({"messages": messages}).to_string()),
    )
    .unwrap();
    assert_eq!(code, 200, "{rendered}");
    let prompt: Value = serde_json::from_str(&rendered).unwrap();
    let body = json!({"prompt": prompt["prompt"], "parse_special": true, "max_tokens": 12,
                      "temperature": 0, "logprobs": 3});
    let legacy = post(&s.addr, "/v1/completions", &body);
    let lps = legacy["choices"][0]["logprobs"]["token_logprobs"]
        .as_array()
        .unwrap();
    let got: Vec<&Value> = entries.iter().map(|e| &e["logprob"]).collect();
    assert_eq!(got, lps.iter().take(got.len()).collect::<Vec<_>>());
    // Streamed chat: the chunks' entries are the answer's.
    let mut body = json!({"messages": messages, "max_tokens": 12, "temperature": 0,
                          "logprobs": true, "top_logprobs": 3, "stream": true});
    let streamed: Vec<Value> = events(&s.addr, "/v1/chat/completions", &body)
        .iter()
        .filter_map(|ev| ev["choices"][0]["logprobs"]["content"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(streamed, entries);

    // llama-server's n_probs, plain, post-sampling and streamed.
    body = json!({"prompt": "The capital of France is", "n_predict": 8, "temperature": 0,
                  "n_probs": 3});
    let v = post(&s.addr, "/completion", &body);
    let probs = v["completion_probabilities"].as_array().unwrap().clone();
    assert_eq!(
        probs.len() as u64,
        v["tokens_predicted"].as_u64().unwrap(),
        "{v}"
    );
    let text: String = probs.iter().map(|p| p["token"].as_str().unwrap()).collect();
    assert_eq!(text, v["content"].as_str().unwrap());
    for p in &probs {
        assert_eq!(p["id"], p["top_logprobs"][0]["id"], "{p}");
        assert_eq!(p["top_logprobs"].as_array().unwrap().len(), 3);
    }
    // Greedy after sampling: the chosen token alone, probability 1.
    body["post_sampling_probs"] = json!(true);
    let post_v = post(&s.addr, "/completion", &body);
    for (a, b) in probs
        .iter()
        .zip(post_v["completion_probabilities"].as_array().unwrap())
    {
        assert_eq!(a["id"], b["id"]);
        assert_eq!(b["prob"], json!(1.0), "{b}");
    }
    // Sampled with top_k 3: the sampler's distribution, three candidates summing to 1, the
    // chosen one among them.
    let sampled = json!({"prompt": "The capital of France is", "n_predict": 8,
                         "temperature": 0.8, "top_k": 3, "top_p": 1.0, "min_p": 0.0,
                         "seed": 7, "n_probs": 5, "post_sampling_probs": true});
    let v = post(&s.addr, "/completion", &sampled);
    for p in v["completion_probabilities"].as_array().unwrap() {
        let top = p["top_probs"].as_array().unwrap();
        assert!(!top.is_empty() && top.len() <= 3, "{p}");
        let sum: f64 = top.iter().map(|t| t["prob"].as_f64().unwrap()).sum();
        assert!((sum - 1.0).abs() < 1e-4, "{p}");
        assert!(
            top.iter()
                .any(|t| t["id"] == p["id"] && t["prob"] == p["prob"]),
            "{p}"
        );
    }
    body["post_sampling_probs"] = json!(false);
    body["stream"] = json!(true);
    let streamed: Vec<Value> = events(&s.addr, "/completion", &body)
        .iter()
        .filter_map(|ev| ev["completion_probabilities"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(streamed, probs);

    // Several prompts: one choice each, the same as alone.
    let body = json!({"prompt": ["The sky is", "Grass is"], "max_tokens": 3, "temperature": 0,
                      "logprobs": 1});
    let v = post(&s.addr, "/v1/completions", &body);
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2, "{v}");
    for (i, p) in ["The sky is", "Grass is"].iter().enumerate() {
        assert_eq!(choices[i]["index"], json!(i));
        let one = json!({"prompt": p, "max_tokens": 3, "temperature": 0, "logprobs": 1});
        let alone = post(&s.addr, "/v1/completions", &one);
        assert_eq!(choices[i]["logprobs"], alone["choices"][0]["logprobs"]);
    }
    s.stop();
}

#[test]
fn dspark_logprobs_equal_the_plain_run() {
    let _g = serial();
    let (_, tok) = reference();
    let drafter = harness::model().with_file_name("SmolLM2-135M-Instruct.dspark-Q8_0.gguf");
    assert!(
        drafter.exists(),
        "{}: run `bash models/fetch.sh dspark-smollm2-135m-q8_0`",
        drafter.display()
    );
    let ids = tok.encode(PROMPTS[0], true, false).unwrap();
    let body = json!({"prompt": ids, "echo": true, "logprobs": 5, "max_tokens": 24,
                      "temperature": 0, "ignore_eos": true});
    let s = Server::start(&["-c", "512"]);
    let plain = post(&s.addr, "/v1/completions", &body);
    s.stop();
    let d = drafter.to_str().unwrap();
    let s = Server::start(&["-c", "512", "-md", d, "--spec-no-bypass"]);
    let spec = post(&s.addr, "/v1/completions", &body);
    let (_, m) = http(&s.addr, "GET", "/metrics", &[], None).unwrap();
    s.stop();
    let accepted = m
        .lines()
        .find_map(|l| l.strip_prefix("flint_spec_accepted_tokens_total "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(accepted > 0.0, "no draft was accepted: {m}");
    let (a, b) = (
        &plain["choices"][0]["logprobs"],
        &spec["choices"][0]["logprobs"],
    );
    assert_eq!(a["tokens"], b["tokens"]);
    let (la, lb) = (
        a["token_logprobs"].as_array().unwrap(),
        b["token_logprobs"].as_array().unwrap(),
    );
    let worst = la
        .iter()
        .zip(lb)
        .skip(1)
        .map(|(x, y)| (x.as_f64().unwrap() - y.as_f64().unwrap()).abs())
        .fold(0.0f64, f64::max);
    eprintln!("largest |drafter - plain| log-probability: {worst:e} ({accepted} drafts accepted)");
    assert_eq!(
        la, lb,
        "with the drafter the values must be the target's, as without it"
    );
    assert_eq!(a["top_logprobs"], b["top_logprobs"]);
}
