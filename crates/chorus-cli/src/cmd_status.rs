use crate::status_query::query;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A client config file (`client-<i>.toml` from `chorus keygen`).
    #[arg(long)]
    pub config: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let c = chorus_node::node_config::load_client(&a.config)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        if !a.json {
            println!(
                "{:<8} {:<5} {:>5} {:>10} {:>10} {:>10} {:>8} {:>6} {:>7}  state digest",
                "replica", "mode", "lanes", "delivered", "executed", "stable", "views", "peers", "clients"
            );
        }
        for r in c.cluster.replica_ids() {
            match query(&c.cluster, c.id, &c.identity, r).await {
                Ok(s) if a.json => println!("{}", serde_json::to_string(&s)?),
                Ok(s) => println!(
                    "{:<8} {:<5} {:>5} {:>10} {:>10} {:>10} {:>8} {:>6} {:>7}  {}",
                    r.to_string(),
                    s.mode,
                    s.lanes,
                    s.core.next_delivery,
                    s.executed_seq,
                    s.core.stable_seq,
                    format!("{:?}", s.core.views),
                    s.peer_connections,
                    s.client_connections,
                    &s.state_digest[..16.min(s.state_digest.len())]
                ),
                Err(e) => println!("{:<8} unreachable: {e:#}", r.to_string()),
            }
        }
        Ok(())
    })
}
