use anyhow::Result;
use chorus_core::{LeaderRotation, OrderingMode, ProtocolParams};
use chorus_node::keygen::{keygen_in, KeygenOptions};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output directory.
    #[arg(long, default_value = "cluster")]
    pub out: PathBuf,
    /// Number of replicas (3f+1).
    #[arg(long, default_value_t = 4)]
    pub n: usize,
    /// Number of client identities.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Host of each replica, comma separated (the last one repeats).
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1")]
    pub hosts: Vec<String>,
    /// First port; replica i uses base + 100·i + (pillar | 90 clients | 91 metrics).
    #[arg(long, default_value_t = 7000)]
    pub base_port: u16,
    /// Ordering mode: pbft | cop | rcc | dispel | sarek.
    #[arg(long, default_value = "cop")]
    pub mode: OrderingMode,
    /// COP pillars (1 in pbft mode).
    #[arg(long, default_value_t = 2)]
    pub pillars: u32,
    /// sarek: state partitions K (one lane each); overrides --pillars.
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Leader rotation: fixed | block-wise.
    #[arg(long, value_enum, default_value = "fixed")]
    pub leader: LeaderArg,
    /// Requests per batch at most.
    #[arg(long, default_value_t = 256)]
    pub batch: u32,
    /// Service: a registered name (built in: kv | kv-mispredicting | null | sleep | token).
    #[arg(long, default_value = "kv")]
    pub service: String,
    /// Service options, `key=value,...`: e.g. the token genesis
    /// `token_accounts=1000,token_balance=1000000,token_seed=0`.
    #[arg(long, default_value = "")]
    pub service_options: String,
    /// Executor: sequential | parallel.
    #[arg(long, default_value = "sequential")]
    pub executor: String,
    /// Worker threads of the parallel executor.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// fsync policy: always | batch | off.
    #[arg(long, default_value = "batch")]
    pub fsync: String,
    /// Positions between checkpoints.
    #[arg(long, default_value_t = 128)]
    pub checkpoint_interval: u64,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum LeaderArg {
    Fixed,
    BlockWise,
}

pub fn params_from(a: &Args) -> ProtocolParams {
    let pillars = if a.mode == OrderingMode::Pbft {
        1
    } else if a.mode == OrderingMode::Sarek {
        a.partitions.unwrap_or(a.pillars)
    } else {
        a.pillars
    };
    ProtocolParams {
        mode: a.mode,
        pillars,
        leader_rotation: match a.leader {
            LeaderArg::Fixed => LeaderRotation::Fixed,
            LeaderArg::BlockWise => LeaderRotation::BlockWise,
        },
        batch_max_requests: a.batch,
        checkpoint_interval: a.checkpoint_interval,
        ..ProtocolParams::default()
    }
}

pub fn run(a: Args) -> Result<()> {
    let opts = KeygenOptions {
        out: a.out.clone(),
        n: a.n,
        clients: a.clients,
        hosts: a.hosts.clone(),
        base_port: a.base_port,
        params: params_from(&a),
        service: a.service.clone(),
        service_options: a.service_options.clone(),
        executor: a.executor.clone(),
        workers: a.workers,
        fsync: a.fsync.clone(),
        sleep_us: 1000,
        sleep_buckets: 1,
    };
    let cluster = keygen_in(crate::registry(), &opts)?;
    println!(
        "wrote {} replicas and {} clients to {} (mode {:?}, {} lanes, f = {})",
        cluster.n(),
        cluster.clients.len(),
        a.out.display(),
        cluster.params.mode,
        cluster.lanes(),
        cluster.f()
    );
    Ok(())
}
