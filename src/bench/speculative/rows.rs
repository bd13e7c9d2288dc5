//! Result rows of the speculative benchmark: one per prompt (`row: "prompt"`), then one per
//! category (`row: "category"`) and one over all prompts (`row: "all"`), every row with the same
//! fields in the same order (docs/BENCHMARKS.md lists them), and the markdown table `-o md`
//! prints. csv/json/jsonl/sql come from [`crate::bench::output`] (sql into table `spec`).

use serde_json::{json, Map, Value};

use super::{prompts, SpecBench, Tally};
use crate::bench::output::{f64_of, str_of, table, u64_of};
use crate::engine::Engine;

/// What every row repeats about the session.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecSession {
    pub model_filename: String,
    pub model_type: String,
    pub draft_filename: String,
    /// `-n`: tokens generated per prompt and mode at most.
    pub n_predict: usize,
    /// Prompts went through the model's chat template.
    pub chat_template: bool,
    pub backend: String,
    pub adapter: String,
    pub driver: String,
    /// UTC start of the benchmark, RFC 3339.
    pub test_time: String,
}

impl SpecSession {
    /// The session fields of `engine`'s adapter; the rest as given.
    pub fn from_engine(
        engine: &Engine,
        model_type: &str,
        draft_filename: &str,
        n_predict: usize,
        chat_template: bool,
    ) -> SpecSession {
        let info = engine.ctx.info();
        let driver = if info.driver_info.is_empty() {
            info.driver.clone()
        } else {
            format!("{} {}", info.driver, info.driver_info)
        };
        SpecSession {
            model_filename: engine.model_path.display().to_string(),
            model_type: model_type.to_string(),
            draft_filename: draft_filename.to_string(),
            n_predict,
            chat_template,
            backend: info.backend.to_lowercase(),
            adapter: info.name.clone(),
            driver,
            test_time: crate::bench::rfc3339_now(),
        }
    }
}

/// Which rows a [`Tally`] stands for.
enum Kind<'a> {
    Prompt { index: usize, prompt: &'a str },
    Category,
    All,
}

fn record(
    s: &SpecSession,
    n_max: u32,
    kind: Kind,
    category: &str,
    t: &Tally,
) -> Map<String, Value> {
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    let (row, index, prompt) = match kind {
        Kind::Prompt { index, prompt } => ("prompt", json!(index), json!(prompt)),
        Kind::Category => ("category", Value::Null, Value::Null),
        Kind::All => ("all", Value::Null, Value::Null),
    };
    let st = &t.spec;
    put("row", json!(row));
    put("category", json!(category));
    put("prompt_index", index);
    put("prompt", prompt);
    put("n_prompts", json!(t.n_prompts));
    put("n_gen", json!(s.n_predict));
    put("n_max", json!(n_max));
    put("prompt_tokens", json!(t.prompt_tokens));
    put("plain_tokens", json!(t.plain_tokens));
    put("spec_tokens", json!(t.spec_tokens));
    put("plain_decode_ms", json!(t.plain_decode_secs * 1e3));
    put("spec_decode_ms", json!(t.spec_decode_secs * 1e3));
    put("plain_tps", json!(t.plain_tps()));
    put("spec_tps", json!(t.spec_tps()));
    put("speedup", json!(t.speedup()));
    put("cycles", json!(st.cycles));
    put("proposed", json!(st.proposed));
    put("drafted", json!(st.drafted));
    put("accepted", json!(st.accepted));
    put("target_forwards", json!(st.target_forwards));
    put("acceptance_rate", json!(st.acceptance_rate()));
    put("tau", json!(st.tau()));
    put(
        "tokens_per_target_forward",
        json!(t.tokens_per_target_forward()),
    );
    put("slot_acceptance", json!(st.slot_acceptance()));
    put("greedy_match", json!(t.greedy_match));
    put("inject_ms", json!(st.inject_secs * 1e3));
    put("draft_ms", json!(st.draft_secs * 1e3));
    put("verify_ms", json!(st.verify_secs * 1e3));
    put("build_commit", json!(env!("CARGO_PKG_VERSION")));
    put("model_filename", json!(s.model_filename));
    put("model_type", json!(s.model_type));
    put("draft_filename", json!(s.draft_filename));
    put("chat_template", json!(s.chat_template));
    put("backend", json!(s.backend));
    put("adapter", json!(s.adapter));
    put("driver", json!(s.driver));
    put("test_time", json!(s.test_time));
    m
}

/// The rows of a run: every prompt, then every category (in order of first appearance), then
/// all prompts.
pub fn records(s: &SpecSession, bench: &SpecBench) -> Vec<Map<String, Value>> {
    let mut out: Vec<Map<String, Value>> = bench
        .runs
        .iter()
        .enumerate()
        .map(|(index, r)| {
            let kind = Kind::Prompt {
                index,
                prompt: &r.prompt,
            };
            record(s, bench.n_max, kind, &r.category, &Tally::of(r))
        })
        .collect();
    for c in prompts::categories(bench.runs.iter().map(|r| r.category.as_str())) {
        let t = Tally::sum(bench.runs.iter().filter(|r| r.category == c));
        out.push(record(s, bench.n_max, Kind::Category, &c, &t));
    }
    let all = Tally::sum(&bench.runs);
    out.push(record(s, bench.n_max, Kind::All, "all", &all));
    out
}

/// A prompt for a table cell: one line, at most 36 characters, `|` escaped.
fn cell(prompt: &str) -> String {
    let one: String = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = one.chars().take(36).collect();
    if one.chars().count() > 36 {
        out.push('…');
    }
    out.replace('|', "\\|")
}

/// The markdown of `-o md`: a line naming the session, then one table row per prompt followed
/// by the category and overall rows.
pub fn markdown(rows: &[Map<String, Value>]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let mut out = format!(
        "{} + drafter {} on wgpu/{} ({}): greedy, -n {}, n_max {}, bypass off{}\n\n",
        str_of(first, "model_type"),
        str_of(first, "draft_filename"),
        str_of(first, "backend"),
        str_of(first, "adapter"),
        u64_of(first, "n_gen"),
        u64_of(first, "n_max"),
        if first.get("chat_template") == Some(&Value::Bool(true)) {
            ", chat template"
        } else {
            ""
        },
    );
    let head: [(&str, bool); 12] = [
        ("category", false),
        ("prompt", false),
        ("n_prompt", true),
        ("n_gen", true),
        ("plain t/s", true),
        ("spec t/s", true),
        ("speed-up", true),
        ("τ", true),
        ("accept %", true),
        ("tok/fwd", true),
        ("slot accept %", false),
        ("greedy_match", false),
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let prompt = match str_of(r, "row") {
                "prompt" => cell(str_of(r, "prompt")),
                _ => match u64_of(r, "n_prompts") {
                    1 => "(1 prompt)".to_string(),
                    n => format!("({n} prompts)"),
                },
            };
            let (pt, st) = (u64_of(r, "plain_tokens"), u64_of(r, "spec_tokens"));
            let slots: Vec<String> = r
                .get("slot_acceptance")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .map(|v| format!("{:.0}", 100.0 * v.as_f64().unwrap_or(0.0)))
                .collect();
            vec![
                str_of(r, "category").to_string(),
                prompt,
                u64_of(r, "prompt_tokens").to_string(),
                if pt == st {
                    pt.to_string()
                } else {
                    format!("{pt}/{st}")
                },
                format!("{:.2}", f64_of(r, "plain_tps")),
                format!("{:.2}", f64_of(r, "spec_tps")),
                format!("{:.2}", f64_of(r, "speedup")),
                format!("{:.2}", f64_of(r, "tau")),
                format!("{:.1}", 100.0 * f64_of(r, "acceptance_rate")),
                format!("{:.2}", f64_of(r, "tokens_per_target_forward")),
                slots.join(" "),
                r.get("greedy_match")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
                    .to_string(),
            ]
        })
        .collect();
    out.push_str(&table(&head, &body));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::output::{render_as, Format};
    use crate::bench::speculative::PromptRun;
    use crate::engine::GenStats;
    use crate::speculative::SpecStats;

    fn session() -> SpecSession {
        SpecSession {
            model_filename: "m.gguf".into(),
            model_type: "llama 135M Q4_1".into(),
            draft_filename: "d.gguf".into(),
            n_predict: 3,
            chat_template: false,
            backend: "vulkan".into(),
            adapter: "a".into(),
            driver: "d".into(),
            test_time: "2025-01-01T00:00:00Z".into(),
        }
    }

    fn run(category: &str, spec_ids: &[u32]) -> PromptRun {
        let mut s = SpecStats::new(2);
        s.record(2, 1);
        s.cycles = 1;
        s.target_forwards = 1;
        let gs = |ids: &[u32], spec| GenStats {
            prompt_tokens: 4,
            generated_tokens: ids.len(),
            decode_secs: 0.5,
            generated_token_ids: ids.to_vec(),
            spec,
            ..GenStats::default()
        };
        PromptRun {
            category: category.into(),
            prompt: "Say | hi".into(),
            plain: gs(&[1, 2, 3], None),
            spec: gs(spec_ids, Some(s)),
        }
    }

    #[test]
    fn rows_in_every_format() {
        let bench = SpecBench {
            n_max: 2,
            runs: vec![
                run("b", &[1, 2, 3]),
                run("a", &[1, 2, 4]),
                run("b", &[1, 2, 3]),
            ],
        };
        let rows = records(&session(), &bench);
        let kinds: Vec<(&str, &str, bool)> = rows
            .iter()
            .map(|r| {
                (
                    str_of(r, "row"),
                    str_of(r, "category"),
                    r["greedy_match"] == json!(true),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("prompt", "b", true),
                ("prompt", "a", false),
                ("prompt", "b", true),
                ("category", "b", true),
                ("category", "a", false),
                ("all", "all", false)
            ]
        );
        assert_eq!(u64_of(&rows[3], "drafted"), 4);
        assert_eq!(u64_of(&rows[5], "n_prompts"), 3);
        let md = markdown(&rows);
        assert!(md.starts_with("llama 135M Q4_1 + drafter d.gguf"), "{md}");
        assert!(
            md.contains("Say \\| hi") && md.contains("(2 prompts)"),
            "{md}"
        );
        assert!(
            md.contains("| 100 0 ") && md.contains("(1 prompt) "),
            "{md}"
        );
        let sql = render_as(Format::Sql, &rows, "spec");
        assert!(
            sql.starts_with("CREATE TABLE IF NOT EXISTS spec ("),
            "{sql}"
        );
        assert!(
            sql.contains("greedy_match INTEGER") && sql.contains("tau REAL"),
            "{sql}"
        );
        assert_eq!(sql.matches("INSERT INTO spec (").count(), rows.len());
        let csv = render_as(Format::Csv, &rows, "spec");
        assert_eq!(csv.lines().count(), 1 + rows.len());
        assert!(
            csv.starts_with("row,category,prompt_index,prompt,"),
            "{csv}"
        );
    }

    #[test]
    fn cells_are_one_short_line() {
        assert_eq!(cell("a |\n b"), "a \\| b");
        let long = "x".repeat(50);
        assert_eq!(cell(&long).chars().count(), 37);
    }
}
