//! `flint rm NAME`: remove a model from the model store: a name `flint models` lists (every
//! shard of a split model), `USER/REPO:QUANT`, or `USER/REPO` for all of a repository's files
//! (docs/MODELS.md).

use crate::store;
use crate::Result;

#[derive(Debug, clap::Args)]
pub struct RmArgs {
    /// The model's name in `flint models`, USER/REPO[:QUANT], or USER/REPO (all its files).
    pub name: String,
}

pub fn run(args: &RmArgs) -> Result<()> {
    for p in store::remove(&args.name)? {
        println!("removed {}", p.display());
    }
    Ok(())
}
