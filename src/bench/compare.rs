//! `--compare FILE`: read a llama-bench result (`-o json`: an array; `-o jsonl`: one object a
//! line) and match its tests to ours by (n_prompt, n_gen, n_depth).

use serde_json::{Map, Value};

use super::output::{row_test_name, table};
use crate::{Error, Result};

/// One test of the other run.
#[derive(Debug, Clone, PartialEq)]
pub struct Peer {
    pub n_prompt: u64,
    pub n_gen: u64,
    pub n_depth: u64,
    pub avg_ts: f64,
    pub model_type: String,
    pub backends: String,
}

fn peer(v: &Value) -> Option<Peer> {
    let o = v.as_object()?;
    let u = |k: &str| o.get(k).and_then(Value::as_u64);
    let s = |k: &str| {
        o.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Some(Peer {
        n_prompt: u("n_prompt")?,
        n_gen: u("n_gen")?,
        n_depth: u("n_depth").unwrap_or(0),
        avg_ts: o.get("avg_ts").and_then(Value::as_f64)?,
        model_type: s("model_type"),
        backends: s("backends"),
    })
}

/// Parses llama-bench json (an array) or jsonl text; objects without the test fields are
/// skipped, malformed JSON is an error.
pub fn parse(text: &str) -> Result<Vec<Peer>> {
    let bad =
        |e: serde_json::Error| Error::Usage(format!("--compare: not llama-bench json/jsonl: {e}"));
    let trimmed = text.trim_start();
    let values: Vec<Value> = if trimmed.starts_with('[') {
        match serde_json::from_str(trimmed).map_err(bad)? {
            Value::Array(a) => a,
            _ => Vec::new(),
        }
    } else {
        trimmed
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(bad))
            .collect::<Result<_>>()?
    };
    Ok(values.iter().filter_map(peer).collect())
}

/// The peer test matching a row of ours, if any.
pub fn matching<'a>(peers: &'a [Peer], row: &Map<String, Value>) -> Option<&'a Peer> {
    let u = |k: &str| row.get(k).and_then(Value::as_u64).unwrap_or(0);
    peers
        .iter()
        .find(|p| p.n_prompt == u("n_prompt") && p.n_gen == u("n_gen") && p.n_depth == u("n_depth"))
}

/// Adds `compare_avg_ts` and `compare_ratio` (ours / theirs) to the rows that have a match.
pub fn annotate(peers: &[Peer], rows: &mut [Map<String, Value>]) {
    for row in rows.iter_mut() {
        if let Some(p) = matching(peers, row) {
            let ours = row.get("avg_ts").and_then(Value::as_f64).unwrap_or(0.0);
            let ratio = if p.avg_ts > 0.0 { ours / p.avg_ts } else { 0.0 };
            row.insert("compare_avg_ts".into(), Value::from(p.avg_ts));
            row.insert("compare_ratio".into(), Value::from(ratio));
        }
    }
}

/// A markdown table: test | flint t/s | llama.cpp t/s | ratio, for every row with a match.
pub fn render(peers: &[Peer], rows: &[Map<String, Value>]) -> String {
    let mut body = Vec::new();
    for row in rows {
        let Some(p) = matching(peers, row) else {
            continue;
        };
        let ours = row.get("avg_ts").and_then(Value::as_f64).unwrap_or(0.0);
        let ratio = if p.avg_ts > 0.0 { ours / p.avg_ts } else { 0.0 };
        body.push(vec![
            row_test_name(row),
            format!("{ours:.2}"),
            format!("{:.2}", p.avg_ts),
            format!("{ratio:.3}"),
        ]);
    }
    if body.is_empty() {
        return "compare: no test of the file matches (n_prompt, n_gen, n_depth) of this run\n"
            .into();
    }
    let backend = peers
        .iter()
        .map(|p| p.backends.as_str())
        .find(|b| !b.is_empty())
        .unwrap_or("other");
    let theirs = format!("{backend} t/s");
    table(
        &[
            ("test", true),
            ("flint t/s", true),
            (theirs.as_str(), true),
            ("flint / other", true),
        ],
        &body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const JSON: &str = r#"[
      {"model_type": "llama ?B Q4_1", "backends": "CPU", "n_prompt": 512, "n_gen": 0,
       "n_depth": 0, "avg_ts": 200.0},
      {"model_type": "llama ?B Q4_1", "backends": "CPU", "n_prompt": 0, "n_gen": 128,
       "avg_ts": 95.5},
      {"unrelated": true}
    ]"#;

    #[test]
    fn parses_json_and_jsonl() {
        let a = parse(JSON).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].n_depth, 0);
        assert_eq!(a[1].avg_ts, 95.5);
        let jsonl = "{\"n_prompt\": 0, \"n_gen\": 16, \"n_depth\": 32, \"avg_ts\": 4.0}\n\n\
                     {\"n_prompt\": 16, \"n_gen\": 0, \"n_depth\": 0, \"avg_ts\": 8}\n";
        let b = parse(jsonl).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].n_gen, b[0].n_depth), (16, 32));
        assert_eq!(b[1].avg_ts, 8.0);
        assert!(parse("{not json").is_err());
        assert!(parse("[1, 2").is_err());
    }

    #[test]
    fn matches_and_ratios() {
        let peers = parse(JSON).unwrap();
        let mut rows = vec![
            json!({"n_prompt": 0, "n_gen": 128, "n_depth": 0, "avg_ts": 9.55})
                .as_object()
                .unwrap()
                .clone(),
            json!({"n_prompt": 0, "n_gen": 128, "n_depth": 4096, "avg_ts": 1.0})
                .as_object()
                .unwrap()
                .clone(),
        ];
        annotate(&peers, &mut rows);
        let r = rows[0]["compare_ratio"].as_f64().unwrap();
        assert!((r - 0.1).abs() < 1e-12);
        assert!(rows[1].get("compare_ratio").is_none());
        let t = render(&peers, &rows);
        assert!(
            t.contains("tg128") && t.contains("95.50") && t.contains("0.100"),
            "{t}"
        );
        assert!(!t.contains("d4096"), "{t}");
    }
}
