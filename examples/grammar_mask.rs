//! Mask time per token of the grammar engine over a model's vocabulary (docs/STRUCTURED.md).
//!
//!     cargo run --release --example grammar_mask -- [GGUF] [REPS]
//!
//! Builds the token environment of GGUF's vocabulary (default: the default model), compiles a
//! JSON schema, then walks a valid answer token by token, timing each mask (`fill_mask`) and
//! each commit; prints the environment build, compile and per-token times (mean, median, p99,
//! max) over REPS walks (default 20).

use std::time::Instant;

use flint::gguf::GgufFile;
use flint::grammar::{Constraint, GrammarSpec, Grammars};
use flint::tokenizer::Tokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| flint::engine::DEFAULT_MODEL.to_string());
    let reps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
    let file = GgufFile::open(std::path::Path::new(&path))?;
    let tok = Tokenizer::from_gguf(&file)?;
    let n_vocab = tok.n_vocab();
    let t = Instant::now();
    let g = Grammars::new(&tok, n_vocab)?;
    let env_ms = t.elapsed().as_secs_f64() * 1e3;
    let schema = serde_json::json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "hobbies": {"type": "array", "items": {"type": "string"}, "maxItems": 5}},
        "required": ["name", "age", "email", "hobbies"], "additionalProperties": false});
    let spec = GrammarSpec::JsonSchema(schema);
    let answer = r#"{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "hobbies": ["mathematics", "poetry", "analytical engines"]}"#;
    let ids = tok.encode(answer, false, false)?;
    let mut per_token = Vec::new();
    let mut commit = Vec::new();
    let mut compile_ms = 0.0;
    for _ in 0..reps {
        let t = Instant::now();
        let mut m = g.compile(&spec)?;
        compile_ms += t.elapsed().as_secs_f64() * 1e3;
        let mut mask = vec![0u32; m.mask_words()];
        for &id in &ids {
            let t = Instant::now();
            m.fill_mask(&mut mask)?;
            per_token.push(t.elapsed().as_secs_f64() * 1e6);
            if !flint::grammar::allowed(&mask, id) {
                return Err(format!("token {id} of the answer is outside its mask").into());
            }
            let t = Instant::now();
            m.consume(&[id])?;
            commit.push(t.elapsed().as_secs_f64() * 1e6);
        }
        if !m.is_accepting() {
            return Err("the answer is not accepted".into());
        }
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let at = |q: f64| v[((v.len() as f64 - 1.0) * q) as usize];
        (mean, at(0.5), at(0.99), at(1.0))
    };
    let (mean, med, p99, max) = stats(&mut per_token);
    let (cmean, ..) = stats(&mut commit);
    println!(
        "vocab {n_vocab}: token env {env_ms:.0} ms; compile {:.2} ms; {} tokens × {reps}: \
         mask mean {mean:.1} µs, median {med:.1} µs, p99 {p99:.1} µs, max {max:.1} µs; \
         commit mean {cmean:.1} µs",
        compile_ms / reps as f64,
        ids.len()
    );
    Ok(())
}
