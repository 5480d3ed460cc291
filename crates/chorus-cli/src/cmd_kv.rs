use anyhow::{anyhow, Result};
use bytes::Bytes;
use chorus_apps::kv_op::{KvOp, KvReply};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Exit status: 0 on success; 3 when the key does not exist (`get` prints \"(not found)\" on stderr,
`delete` prints \"absent\"); 1 on errors (cannot reach the cluster, rejected); 2 on usage errors.")]
pub struct Args {
    /// A client config file (`client-<i>.toml` from `chorus keygen`).
    #[arg(long)]
    pub config: PathBuf,
    /// Use ordering even for reads (skip the read-only fast path).
    #[arg(long)]
    pub ordered: bool,
    #[command(subcommand)]
    pub op: Op,
}

#[derive(clap::Subcommand, Debug)]
pub enum Op {
    /// Print the value of KEY.
    Get { key: String },
    /// Set KEY to VALUE.
    Put { key: String, value: String },
    /// Remove KEY.
    Delete { key: String },
    /// Print up to LIMIT entries (default 100) with keys >= START.
    Scan {
        #[arg(default_value = "")]
        start: String,
        /// Entries at most (default 100); `--limit N` works too.
        #[arg(value_name = "LIMIT")]
        limit_pos: Option<u32>,
        #[arg(long, conflicts_with = "limit_pos")]
        limit: Option<u32>,
    },
}

pub fn run(a: Args) -> Result<()> {
    let c = chorus_node::node_config::load_client(&a.config)?;
    // One identity per process: a second one would steal this one's replies.
    let _held = chorus_node::node_config::lock_identity(&c.key_path, c.id)?;
    let (op, read_only) = match &a.op {
        Op::Get { key } => (KvOp::get(key.clone()), true),
        Op::Put { key, value } => (KvOp::put(key.clone(), value.clone()), false),
        Op::Delete { key } => (KvOp::delete(key.clone()), false),
        Op::Scan {
            start,
            limit_pos,
            limit,
        } => (
            KvOp::scan(start.clone(), limit_pos.or(*limit).unwrap_or(100)),
            true,
        ),
    };
    let client = chorus_client::BlockingClient::connect(
        Arc::new(c.cluster),
        c.id,
        c.identity,
        chorus_client::ClientOptions::default(),
    )
    .map_err(|e| anyhow!("{e}"))?;
    let result: Bytes = if read_only && !a.ordered {
        client.invoke_read_only(op)
    } else {
        client.invoke(op)
    }
    .map_err(|e| anyhow!("{e}"))?;
    match KvReply::decode(&result).map_err(|e| anyhow!("{e}"))? {
        KvReply::Value(Some(v)) => println!("{}", String::from_utf8_lossy(&v)),
        KvReply::Value(None) => {
            eprintln!("(not found)");
            return Err(not_found());
        }
        KvReply::Ok => println!("OK"),
        KvReply::Existed(true) => println!("existed"),
        KvReply::Existed(false) => {
            println!("absent");
            return Err(not_found());
        }
        KvReply::Entries { entries, more } => {
            for (k, v) in entries {
                println!("{}\t{}", String::from_utf8_lossy(&k), String::from_utf8_lossy(&v));
            }
            if more {
                eprintln!("(more)");
            }
        }
        KvReply::Error(e) => return Err(anyhow!("service error: {e}")),
    }
    Ok(())
}

/// Exit code 3 (not clap's usage code 2): the answer was "no such key".
fn not_found() -> anyhow::Error {
    crate::exit::Exit {
        code: crate::exit::NOT_FOUND,
        message: String::new(),
    }
    .into()
}
