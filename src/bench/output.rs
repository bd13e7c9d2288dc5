//! Result rows as llama-bench writes them: `md` (its table), `csv` (header + rows), `json` (an
//! array of objects), `jsonl` (one object a line) and `sql` (`CREATE TABLE IF NOT EXISTS test`
//! plus one `INSERT` a row, for `sqlite3`). Field names and order are the rows' own.

use serde_json::{Map, Value};

use crate::{Error, Result};

/// An output format (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Md,
    Csv,
    Json,
    Jsonl,
    Sql,
}

impl Format {
    pub fn parse(s: &str) -> Result<Format> {
        Ok(match s {
            "md" => Format::Md,
            "csv" => Format::Csv,
            "json" => Format::Json,
            "jsonl" => Format::Jsonl,
            "sql" => Format::Sql,
            _ => {
                return Err(Error::Usage(format!(
                    "-o {s}: formats are md, csv, json, jsonl, sql"
                )))
            }
        })
    }
}

/// Renders `rows` in `format` (sql into llama-bench's table `test`).
pub fn render(format: Format, rows: &[Map<String, Value>]) -> String {
    render_as(format, rows, "test")
}

/// Renders `rows` in `format`; sql creates and fills `sql_table`.
pub fn render_as(format: Format, rows: &[Map<String, Value>], sql_table: &str) -> String {
    match format {
        Format::Md => markdown(rows),
        Format::Csv => csv(rows),
        Format::Json => {
            let arr = Value::Array(rows.iter().cloned().map(Value::Object).collect());
            serde_json::to_string_pretty(&arr).unwrap_or_default() + "\n"
        }
        Format::Jsonl => rows
            .iter()
            .map(|r| serde_json::to_string(r).unwrap_or_default() + "\n")
            .collect(),
        Format::Sql => sql(rows, sql_table),
    }
}

/// A scalar as text; arrays as space-separated values (llama-bench's csv/sql `samples_*`).
fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(text).collect::<Vec<_>>().join(" "),
        other => other.to_string(),
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv(rows: &[Map<String, Value>]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let mut out = first
        .keys()
        .map(|k| csv_field(k))
        .collect::<Vec<_>>()
        .join(",");
    out.push('\n');
    for r in rows {
        let line: Vec<String> = r.values().map(|v| csv_field(&text(v))).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

fn sql_type(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "INTEGER",
        Value::Number(n) if n.is_f64() => "REAL",
        Value::Number(_) => "INTEGER",
        _ => "TEXT",
    }
}

/// The SQL type of a column: the first non-null value's, REAL for flint's derived figures.
fn column_type(rows: &[Map<String, Value>], key: &str) -> &'static str {
    if matches!(
        key,
        "gbps" | "bandwidth_pct" | "compare_avg_ts" | "compare_ratio"
    ) {
        return "REAL";
    }
    rows.iter()
        .filter_map(|r| r.get(key))
        .find(|v| !v.is_null())
        .map_or("TEXT", sql_type)
}

fn sql_value(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => i32::from(*b).to_string(),
        Value::Number(n) => n.to_string(),
        other => format!("'{}'", text(other).replace('\'', "''")),
    }
}

fn sql(rows: &[Map<String, Value>], table: &str) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let keys: Vec<&String> = first.keys().collect();
    let mut out = format!("CREATE TABLE IF NOT EXISTS {table} (\n");
    let cols: Vec<String> = keys
        .iter()
        .map(|k| format!("  {k} {}", column_type(rows, k)))
        .collect();
    out.push_str(&cols.join(",\n"));
    out.push_str("\n);\n\n");
    let names = keys
        .iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    for r in rows {
        let vals: Vec<String> = keys
            .iter()
            .map(|k| sql_value(r.get(*k).unwrap_or(&Value::Null)))
            .collect();
        out.push_str(&format!(
            "INSERT INTO {table} ({names}) VALUES ({});\n",
            vals.join(", ")
        ));
    }
    out
}

/// `92.12 MiB` / `4.58 GiB` (llama-bench's size column).
pub fn fmt_size(bytes: u64) -> String {
    let b = bytes as f64;
    if b < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} MiB", b / 1024.0 / 1024.0)
    } else {
        format!("{:.2} GiB", b / 1024.0 / 1024.0 / 1024.0)
    }
}

/// `134.52 M` / `8.03 B` (llama-bench's params column).
pub fn fmt_params(n: u64) -> String {
    let p = n as f64;
    if p < 1e9 {
        format!("{:.2} M", p / 1e6)
    } else {
        format!("{:.2} B", p / 1e9)
    }
}

/// Field `k` of a result row (0 or "" when absent).
pub(crate) fn u64_of(r: &Map<String, Value>, k: &str) -> u64 {
    r.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// Field `k` of a result row (0 or "" when absent).
pub(crate) fn f64_of(r: &Map<String, Value>, k: &str) -> f64 {
    r.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

/// Field `k` of a result row (0 or "" when absent).
pub(crate) fn str_of<'a>(r: &'a Map<String, Value>, k: &str) -> &'a str {
    r.get(k).and_then(Value::as_str).unwrap_or("")
}

/// The test name of a row: `pp512`, `tg128`, `pp512+tg128`, `… @ d4096`.
pub fn row_test_name(r: &Map<String, Value>) -> String {
    super::TestSpec {
        n_prompt: u64_of(r, "n_prompt") as u32,
        n_gen: u64_of(r, "n_gen") as u32,
        n_depth: u64_of(r, "n_depth") as u32,
    }
    .name()
}

/// llama-bench's markdown table; the backend column reads `wgpu/<api>` (flint has no `ngl`:
/// every layer runs on the device), and non-default KV types and ubatch get columns.
fn markdown(rows: &[Map<String, Value>]) -> String {
    let show_kv = rows
        .iter()
        .any(|r| str_of(r, "type_k") != "f16" || str_of(r, "type_v") != "f16");
    let show_ub = rows.iter().any(|r| u64_of(r, "n_ubatch") != 512);
    let mut head: Vec<(&str, bool)> = vec![
        ("model", false),
        ("size", true),
        ("params", true),
        ("backend", false),
    ];
    if show_ub {
        head.push(("n_ubatch", true));
    }
    if show_kv {
        head.push(("type_k", false));
        head.push(("type_v", false));
    }
    head.push(("test", true));
    head.push(("t/s", true));
    let mut body: Vec<Vec<String>> = Vec::new();
    for r in rows {
        let mut line = vec![
            str_of(r, "model_type").to_string(),
            fmt_size(u64_of(r, "model_size")),
            fmt_params(u64_of(r, "model_n_params")),
            format!("wgpu/{}", str_of(r, "backend")),
        ];
        if show_ub {
            line.push(u64_of(r, "n_ubatch").to_string());
        }
        if show_kv {
            line.push(str_of(r, "type_k").to_string());
            line.push(str_of(r, "type_v").to_string());
        }
        line.push(row_test_name(r));
        line.push(format!(
            "{:.2} ± {:.2}",
            f64_of(r, "avg_ts"),
            f64_of(r, "stddev_ts")
        ));
        body.push(line);
    }
    table(&head, &body)
}

/// A markdown table with columns padded to width; `true` right-aligns a column.
pub fn table(head: &[(&str, bool)], body: &[Vec<String>]) -> String {
    let widths: Vec<usize> = head
        .iter()
        .enumerate()
        .map(|(i, (h, _))| {
            body.iter()
                .map(|l| l.get(i).map_or(0, |c| c.chars().count()))
                .chain([h.chars().count(), 3])
                .max()
                .unwrap_or(3)
        })
        .collect();
    let pad = |s: &str, w: usize, right: bool| {
        let n = w.saturating_sub(s.chars().count());
        if right {
            format!("{}{s}", " ".repeat(n))
        } else {
            format!("{s}{}", " ".repeat(n))
        }
    };
    let mut out = String::new();
    let cells: Vec<String> = head
        .iter()
        .zip(&widths)
        .map(|((h, r), &w)| pad(h, w, *r))
        .collect();
    out.push_str(&format!("| {} |\n", cells.join(" | ")));
    let rules: Vec<String> = head
        .iter()
        .zip(&widths)
        .map(|((_, r), &w)| {
            if *r {
                format!("{}:", "-".repeat(w - 1))
            } else {
                "-".repeat(w)
            }
        })
        .collect();
    out.push_str(&format!("| {} |\n", rules.join(" | ")));
    for line in body {
        let cells: Vec<String> = line
            .iter()
            .zip(head.iter().zip(&widths))
            .map(|(c, ((_, r), &w))| pad(c, w, *r))
            .collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row() -> Map<String, Value> {
        let v = json!({"model_type": "llama 135M Q4_1", "model_size": 96_576_768u64,
            "model_n_params": 134_515_008u64, "backend": "vulkan", "n_ubatch": 512,
            "type_k": "f16", "type_v": "f16", "n_prompt": 512, "n_gen": 0, "n_depth": 0,
            "avg_ts": 12.5, "stddev_ts": 0.25, "samples_ns": [1, 2], "note": "a,\"b\"",
            "gbps": null});
        v.as_object().unwrap().clone()
    }

    #[test]
    fn formats() {
        let rows = vec![row()];
        let md = render(Format::Md, &rows);
        assert!(md.contains("| llama 135M Q4_1 |"), "{md}");
        assert!(md.contains("92.10 MiB") && md.contains("134.52 M"), "{md}");
        assert!(md.contains("pp512") && md.contains("12.50 ± 0.25"), "{md}");
        let csv = render(Format::Csv, &rows);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].contains(",1 2,\"a,\"\"b\"\"\","), "{csv}");
        let sql = render(Format::Sql, &rows);
        assert!(
            sql.contains("gbps REAL") && sql.contains("avg_ts REAL"),
            "{sql}"
        );
        assert!(
            sql.contains("n_prompt INTEGER") && sql.contains("'1 2'"),
            "{sql}"
        );
        assert_eq!(render(Format::Jsonl, &rows).lines().count(), 1);
        assert!(Format::parse("xml").is_err());
    }
}
