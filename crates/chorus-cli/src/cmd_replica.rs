use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The replica's config file (`replica-<i>.toml` from `chorus keygen`).
    #[arg(long)]
    pub config: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let loaded = chorus_node::node_config::load_node(&a.config)?;
    chorus_node::runtime::run_replica_in(crate::registry(), loaded)
}
