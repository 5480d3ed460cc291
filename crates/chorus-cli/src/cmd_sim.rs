//! `chorus sim`: deterministic simulations of every ordering mode under network
//! faults, crashes, Byzantine replicas and Byzantine clients, with invariant
//! checkers after every seed. A failure prints a command that replays it.

use anyhow::{bail, Result};
use chorus_core::OrderingMode;
use chorus_sim::{ExecutorChoice, FaultSet, SimOptions};
use std::io::Write;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Ordering mode: pbft | cop.
    #[arg(long, default_value = "cop")]
    pub mode: OrderingMode,
    /// COP pillars (lanes); forced to 1 for pbft.
    #[arg(long, default_value_t = 4)]
    pub pillars: u32,
    /// Replicas (3f+1).
    #[arg(long, default_value_t = 4)]
    pub n: usize,
    /// Number of seeds to run.
    #[arg(long, default_value_t = 100)]
    pub seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Fault kinds: all | none | network | byzantine | comma-separated kinds.
    #[arg(long, default_value = "all")]
    pub faults: String,
    /// Enable every listed fault kind in every seed (default: each seed draws a random subset).
    #[arg(long)]
    pub no_swarm: bool,
    /// Correct clients.
    #[arg(long, default_value_t = 3)]
    pub clients: u32,
    /// Requests per correct client.
    #[arg(long, default_value_t = 12)]
    pub requests: u32,
    /// Requests each correct client keeps in flight.
    #[arg(long, default_value_t = 3)]
    pub window: u32,
    /// Requests a replica's pool holds (small values stress back-pressure and
    /// the pool's memory of ordered requests).
    #[arg(long, default_value_t = 512)]
    pub pool: u32,
    /// Byzantine replicas when a Byzantine kind is drawn (default f; more than f must produce violations).
    #[arg(long)]
    pub byzantine: Option<usize>,
    /// Virtual milliseconds during which faults are injected before the network heals.
    #[arg(long, default_value_t = 3000)]
    pub fault_window_ms: u64,
    /// Executor: sequential | parallel.
    #[arg(long, default_value = "sequential")]
    pub executor: String,
    /// Service: kv | null.
    #[arg(long, default_value = "kv")]
    pub service: String,
    /// Leader rotation in cop mode: fixed | block-wise | random (drawn per seed).
    #[arg(long, default_value = "random")]
    pub rotation: String,
    /// Print a line per seed.
    #[arg(long)]
    pub verbose: bool,
}

pub fn run(a: Args) -> Result<()> {
    let faults: FaultSet = a.faults.parse().map_err(|e| anyhow::anyhow!("--faults: {e}"))?;
    let executor = match a.executor.as_str() {
        "sequential" => ExecutorChoice::Sequential,
        "parallel" => ExecutorChoice::Custom {
            name: "parallel".into(),
            factory: Arc::new(|service, max_inflight| {
                Box::new(chorus_parallel::ParallelExecutor::new(
                    service,
                    2,
                    256,
                    max_inflight,
                ))
            }),
        },
        other => bail!("unknown executor {other:?}"),
    };
    let mut opts = SimOptions::new(a.mode, a.pillars, a.n)
        .with_faults(faults)
        .with_seeds(a.seed, a.seeds);
    opts.swarm = !a.no_swarm;
    opts.clients = a.clients;
    opts.requests_per_client = a.requests;
    opts.client_window = a.window;
    opts.pool_max_requests = a.pool;
    opts.byzantine = a.byzantine;
    opts.fault_window_ms = a.fault_window_ms;
    opts.executor = executor;
    opts.service = a.service.clone();
    opts.rotation = chorus_sim::options::parse_rotation(&a.rotation).map_err(anyhow::Error::msg)?;
    opts.validate().map_err(anyhow::Error::msg)?;
    let started = std::time::Instant::now();
    let mut done = 0u64;
    let total = a.seeds;
    let summary = chorus_sim::run_many_progress(&opts, |r| {
        done += 1;
        if a.verbose {
            eprintln!("{r}");
        } else if done.is_multiple_of(10) || done == total {
            eprint!("\r  {done}/{total} seeds");
            let _ = std::io::stderr().flush();
        }
    });
    eprintln!();
    println!("{summary}");
    println!("wall time: {:.1} s", started.elapsed().as_secs_f64());
    if !summary.ok() {
        bail!("{} seed(s) violated an invariant", summary.failures.len());
    }
    Ok(())
}
