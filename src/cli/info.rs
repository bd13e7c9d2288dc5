//! `flint info MODEL.gguf [--json]`: what gguf-dump shows. Header, architecture, metadata (long
//! arrays summarised unless `--full`), a tensor table (name, type, shape, bytes, offset, and the
//! layout where one type id has two: Q2_0's "g64 (mainline)" or "g128 (PrismML legacy)") and
//! totals by type.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Map, Value};

use crate::gguf::{summarize, GgufFile, MetaArray, MetaValue};
use crate::Result;

/// `writeln!` into a `String` (which cannot fail).
macro_rules! w {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

/// Write to stdout; a closed pipe (`flint info … | head`) is not an error.
pub(crate) fn write_stdout(text: &str) -> Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(crate::Error::Io {
            context: "writing to stdout".to_string(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// Arrays longer than this are summarised.
const SHOWN_ITEMS: usize = 8;

/// Arguments of `flint info`.
#[derive(Debug, clap::Args)]
pub struct InfoArgs {
    /// The GGUF file.
    pub model: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print arrays in full (text and JSON) instead of their first elements.
    #[arg(long)]
    pub full: bool,
}

pub fn run(args: &InfoArgs) -> Result<()> {
    let file = GgufFile::open(&args.model)?;
    if args.json {
        let v = to_json(&file, args.full);
        let text = serde_json::to_string_pretty(&v).unwrap_or_default();
        write_stdout(&(text + "\n"))
    } else {
        write_stdout(&render_text(&file, args.full))
    }
}

/// Tensor count, elements and bytes per type, in type order.
fn totals(file: &GgufFile) -> BTreeMap<crate::gguf::GgmlType, (u64, u64, u64)> {
    let mut by_type = BTreeMap::new();
    for t in &file.tensors {
        let e = by_type.entry(t.ty).or_insert((0u64, 0u64, 0u64));
        e.0 += 1;
        e.1 += t.n_elements();
        e.2 += t.n_bytes;
    }
    by_type
}

fn render_text(file: &GgufFile, full: bool) -> String {
    let mut out = String::new();
    let g = &file.gguf;
    let max = if full { usize::MAX } else { SHOWN_ITEMS };
    w!(
        out,
        "{}: GGUF v{}, {} bytes",
        file.path.display(),
        g.version,
        file.file_len()
    );
    w!(
        out,
        "architecture: {}",
        g.metadata.architecture().unwrap_or("(none)")
    );
    if let Some(line) = hybrid_layers(g) {
        w!(out, "{line}");
    }
    w!(
        out,
        "alignment {}, data offset {}, data size {}{}",
        g.alignment,
        g.data_offset,
        g.data_size,
        if g.shape_only {
            " (shape only: no tensor data in this file)"
        } else {
            ""
        }
    );
    out.push('\n');
    w!(out, "metadata ({} keys):", g.metadata.len());
    let width = g.metadata.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, value) in g.metadata.iter() {
        w!(
            out,
            "  {key:<width$}  {:<14} {}",
            value.type_name(),
            summarize(value, max)
        );
    }
    out.push('\n');
    w!(out, "tensors ({}):", g.tensors.len());
    let nw = g
        .tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    // The layout column only where a tensor has a layout note.
    let layouts = g.tensors.iter().any(|t| t.ty.layout_note().is_some());
    let header = format!(
        "  {:>4}  {:<nw$}  {:<7} {:<24} {:>12} {:>12}",
        "#", "name", "type", "shape", "bytes", "offset"
    );
    w!(
        out,
        "{}",
        if layouts { header + "  layout" } else { header }
    );
    for (i, t) in g.tensors.iter().enumerate() {
        let row = format!(
            "  {:>4}  {:<nw$}  {:<7} {:<24} {:>12} {:>12}",
            i,
            t.name,
            t.ty.name(),
            format!("{:?}", t.shape),
            t.n_bytes,
            t.offset
        );
        match t.ty.layout_note() {
            Some(note) => w!(out, "{row}  {note}"),
            None => w!(out, "{row}"),
        }
    }
    out.push('\n');
    let by_type = totals(file);
    let n_params: u64 = by_type.values().map(|v| v.1).sum();
    let n_bytes: u64 = by_type.values().map(|v| v.2).sum();
    w!(
        out,
        "totals: {} tensors, {} parameters, {} bytes ({:.2} MiB, {:.3} bits/weight)",
        g.tensors.len(),
        n_params,
        n_bytes,
        n_bytes as f64 / (1024.0 * 1024.0),
        if n_params > 0 {
            n_bytes as f64 * 8.0 / n_params as f64
        } else {
            0.0
        }
    );
    for (ty, (count, elements, bytes)) in by_type {
        let note = ty
            .layout_note()
            .map(|n| format!("  {n}"))
            .unwrap_or_default();
        w!(
            out,
            "  {:<7} {count:>5} tensors {elements:>12} elements {bytes:>12} bytes{note}",
            ty.name()
        );
    }
    out
}

fn to_json(file: &GgufFile, full: bool) -> Value {
    let g = &file.gguf;
    let mut metadata = Map::new();
    for (key, value) in g.metadata.iter() {
        metadata.insert(key.to_string(), value_json(value, full));
    }
    let tensors: Vec<Value> = g
        .tensors
        .iter()
        .map(|t| {
            let mut v = json!({
                "name": t.name,
                "type": t.ty.name(),
                "shape": t.shape,
                "bytes": t.n_bytes,
                "offset": t.offset,
            });
            // Only where the id has two layouts, so other tensors read as gguf-py's.
            if let (Some(note), Some(obj)) = (t.ty.layout_note(), v.as_object_mut()) {
                obj.insert("layout".to_string(), json!(note));
            }
            v
        })
        .collect();
    let mut by_type = Map::new();
    for (ty, (count, elements, bytes)) in totals(file) {
        let mut v = json!({"tensors": count, "elements": elements, "bytes": bytes});
        if let (Some(note), Some(obj)) = (ty.layout_note(), v.as_object_mut()) {
            obj.insert("layout".to_string(), json!(note));
        }
        by_type.insert(ty.name().to_string(), v);
    }
    json!({
        "file": file.path.display().to_string(),
        "file_bytes": file.file_len(),
        "version": g.version,
        "architecture": g.metadata.architecture().ok(),
        "alignment": g.alignment,
        "data_offset": g.data_offset,
        "data_size": g.data_size,
        "shape_only": g.shape_only,
        "metadata": metadata,
        "tensors": tensors,
        "totals": {
            "tensors": g.tensors.len(),
            "parameters": g.tensors.iter().map(|t| t.n_elements()).sum::<u64>(),
            "bytes": g.tensors.iter().map(|t| t.n_bytes).sum::<u64>(),
            "by_type": by_type,
        },
    })
}

/// A metadata value as JSON. Arrays longer than [`SHOWN_ITEMS`] become
/// `{"type": "array[T]", "len": N, "head": [first items]}` unless `full`.
fn value_json(v: &MetaValue, full: bool) -> Value {
    match v {
        MetaValue::String(s) => json!(s),
        MetaValue::Bool(b) => json!(b),
        MetaValue::F32(x) => json!(x),
        MetaValue::F64(x) => json!(x),
        MetaValue::Array(a) => array_json(a, full),
        other => match other.as_i128() {
            Some(i) => i64::try_from(i)
                .map(|x| json!(x))
                .unwrap_or_else(|_| json!(i as u64)),
            None => Value::Null,
        },
    }
}

fn array_json(a: &MetaArray, full: bool) -> Value {
    let take = if full { usize::MAX } else { SHOWN_ITEMS };
    let items: Vec<Value> = match a {
        MetaArray::U8(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::I8(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::U16(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::I16(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::U32(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::I32(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::F32(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::Bool(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::String(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::U64(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::I64(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::F64(v) => v.iter().take(take).map(|x| json!(x)).collect(),
        MetaArray::Array(v) => v.iter().take(take).map(|x| array_json(x, full)).collect(),
    };
    if items.len() == a.len() {
        Value::Array(items)
    } else {
        json!({"type": format!("array[{}]", a.elem_type()), "len": a.len(), "head": items})
    }
}

/// A hybrid model's layer pattern (`layers: 64 main-pass (48 Gated DeltaNet, 16 attention at 3,
/// 7, …), 1 MTP skipped`), or `None` for other files or unreadable hyperparameters.
fn hybrid_layers(g: &crate::gguf::Gguf) -> Option<String> {
    let hp = crate::model::Hparams::from_gguf(g).ok()?;
    let h = hp.hybrid.as_ref()?;
    let attn = hp.kv_layers();
    let shown: Vec<String> = attn.iter().take(4).map(|l| l.to_string()).collect();
    let more = if attn.len() > 4 { ", …" } else { "" };
    let mtp = if h.n_nextn > 0 {
        format!(", {} MTP skipped", h.n_nextn)
    } else {
        String::new()
    };
    Some(format!(
        "layers: {} main-pass ({} Gated DeltaNet, {} attention at {}{more}){mtp}",
        hp.n_layer,
        h.n_recurrent(),
        attn.len(),
        shown.join(", ")
    ))
}
