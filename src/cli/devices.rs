//! placeholder
#[derive(Debug, clap::Args)]
pub struct DevicesArgs { #[arg(long)] pub json: bool }
pub fn run(_json: bool) -> crate::Result<()> { Ok(()) }
