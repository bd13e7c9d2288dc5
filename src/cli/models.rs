//! `flint models`: list the model store (name, size, path; Hub downloads as `USER/REPO/FILE`, a
//! split model once with its shard count); `--known` adds the models `flint pull` can fetch by
//! a short name (docs/MODELS.md).

use crate::store;
use crate::Result;

#[derive(Debug, clap::Args)]
pub struct ModelsArgs {
    /// Also list the known models (`flint pull NAME`) and whether each is in the store.
    #[arg(long)]
    pub known: bool,
}

pub fn run(args: &ModelsArgs) -> Result<()> {
    let dir = store::models_dir()?;
    let stored = store::list()?;
    println!("store: {}", dir.display());
    if stored.is_empty() {
        println!("(empty: `flint pull NAME` fetches a model)");
    } else {
        let w = stored
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        println!("{:<w$}  {:>10}  PATH", "NAME", "SIZE");
        for s in &stored {
            let shards = match s.files {
                1 => String::new(),
                n => format!("  ({n} shards)"),
            };
            println!(
                "{:<w$}  {:>10}  {}{shards}",
                s.name,
                size(s.bytes),
                s.path.display()
            );
        }
    }
    if args.known {
        println!();
        for e in store::manifest()? {
            let have = stored.iter().any(|s| s.name == e.name);
            println!(
                "{}  {}  {}",
                e.name,
                e.file,
                if have { "(in the store)" } else { "" }
            );
        }
    }
    Ok(())
}

fn size(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / MIB)
    } else {
        format!("{bytes} B")
    }
}
