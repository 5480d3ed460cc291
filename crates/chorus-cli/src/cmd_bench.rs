//! `chorus bench`: start a local cluster (or target a running one), drive it
//! with closed-loop or fixed-rate clients, and report throughput, latency,
//! CPU and memory as JSON, CSV and a PNG plot. `--sweep` runs a parameter list
//! in one invocation so results are ratios measured side by side.

use crate::bench_run::{run_one, RunResult};
use crate::workload::{KeyDist, Ycsb};
use anyhow::{bail, Context, Result};
use chorus_core::{OrderingMode, PrepareAuth};
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Benchmark a running cluster: its directory from `chorus keygen` (cluster.toml, client keys).
    /// Without it a local cluster of separate processes is started per run.
    #[arg(long)]
    pub target: Option<PathBuf>,
    /// Replicas of the local cluster (3f+1).
    #[arg(long, default_value_t = 4)]
    pub n: usize,
    /// Ordering mode: pbft | cop | rcc | dispel.
    #[arg(long, default_value = "cop")]
    pub mode: OrderingMode,
    /// COP pillars (forced to 1 for pbft).
    #[arg(long, default_value_t = 2)]
    pub pillars: u32,
    /// Executor: sequential | parallel.
    #[arg(long, default_value = "sequential")]
    pub executor: String,
    /// Worker threads of the parallel executor.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Service: kv | kv-mispredicting (sarek re-prediction: a `PutAll`
    /// declares its first key only) | null | sleep | token (signed transfers;
    /// `--records` accounts, `--conflict-rate` = share of transfers to the hot account).
    #[arg(long, default_value = "kv")]
    pub service: String,
    /// sleep: service time per operation in microseconds.
    #[arg(long, default_value_t = 1000)]
    pub sleep_us: u64,
    /// sleep: parallelism factor (independent buckets).
    #[arg(long, default_value_t = 1)]
    pub buckets: u32,
    /// kv: YCSB workload A–F, or U (100% update).
    #[arg(long, value_enum, default_value = "a")]
    pub workload: Ycsb,
    /// kv: records loaded before measuring.
    #[arg(long, default_value_t = 10_000)]
    pub records: u64,
    /// kv: value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_bytes: usize,
    /// null: request payload in bytes.
    #[arg(long, default_value_t = 0)]
    pub request_bytes: usize,
    /// Key distribution.
    #[arg(long, value_enum, default_value = "uniform")]
    pub distribution: KeyDist,
    /// Fraction of operations sent to one hot key / bucket (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub conflict_rate: f64,
    /// kv: fraction of operations (0..1) that are two-key `PutAll`s whose
    /// keys lie in different SAREK partitions (the paper's cross-border
    /// requests, SAREK §V). Partitions are those of `--mode sarek
    /// --pillars K`; other modes get the same operations, keys split as for
    /// 4 partitions, so runs compare side by side.
    #[arg(long, default_value_t = 0.0)]
    pub cross_partition: f64,
    /// Send reads through ordering instead of the read-only fast path.
    #[arg(long)]
    pub ordered_reads: bool,
    /// Client identities (each its own connection to every replica).
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Requests each client keeps in flight (closed loop).
    #[arg(long, default_value_t = 16)]
    pub in_flight: usize,
    /// Offered load in ops/s over all clients (open loop); 0 = closed loop.
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Open loop: when requests arrive. uniform = every 1/rate seconds
    /// (clients in turn); poisson = exponential gaps of mean 1/rate
    /// (bursts as independent users make them).
    #[arg(long, value_enum, default_value = "uniform")]
    pub arrivals: crate::pacer::Arrivals,
    /// Requests per batch at most.
    #[arg(long, default_value_t = 256)]
    pub batch: u32,
    /// Batch delay in milliseconds.
    #[arg(long, default_value_t = 1)]
    pub batch_delay_ms: u64,
    /// Undecided proposals per lane above which a leader proposes only full
    /// batches (`proposal_depth` in cluster.toml).
    #[arg(long, default_value_t = 2)]
    pub proposal_depth: u32,
    /// How the local replicas authenticate PBFT prepares: signature | mac
    /// (channel MACs; Castro & Liskov's view change over claims).
    #[arg(long, default_value = "signature", value_parser = |v: &str| v.parse::<PrepareAuth>())]
    pub prepare_auth: PrepareAuth,
    /// fsync policy of the local replicas: always | batch | off.
    #[arg(long, default_value = "off")]
    pub fsync: String,
    /// Clients send a new request to their lane's primary only and to every
    /// replica when its replies are late (PBFT §4.1; pbft, rcc, and cop with the
    /// fixed rotation; `ClientOptions::leader_first`). `--leader-first
    /// false`: every request to every replica.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_first: bool,
    /// Clients ask only f + 1 designated replicas to reply while every
    /// replica answers (`ClientOptions::few_replies`). `--few-replies
    /// false`: every replica replies to every request.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub few_replies: bool,
    /// Threads of the load generator (this process); 0 = a quarter of this
    /// machine's cores, at least 2, so the local replicas keep the rest.
    /// Two fixed threads capped a 16-core machine at ~65k ops/s with both
    /// at ~80 % while no replica thread was busy (BENCHMARKS.md, 16 cores).
    #[arg(long, default_value_t = 0)]
    pub client_threads: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Warm-up seconds (not measured).
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// Run a list of values of one parameter side by side, e.g. `pillars=1,2,4`.
    /// Parameters: pillars, workers, buckets, clients, in-flight, batch, proposal-depth, rate, value-bytes,
    /// request-bytes, conflict-rate, cross-partition, executor, mode, service, workload,
    /// prepare-auth, leader-first, few-replies.
    #[arg(long)]
    pub sweep: Option<String>,
    /// Where results go: results.json (all runs), results.csv (a row per run), plot.png.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// SIGKILL this local replica during the measurement (a failure run).
    #[arg(long)]
    pub kill_replica: Option<usize>,
    /// Measured seconds after which `--kill-replica` is killed.
    #[arg(long, default_value_t = 5.0)]
    pub kill_at: f64,
    /// A label stored with each result.
    #[arg(long, default_value = "")]
    pub label: String,
}

impl Args {
    /// `--client-threads`, with 0 resolved against this machine's cores.
    pub fn load_threads(&self) -> usize {
        match self.client_threads {
            0 => {
                let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
                (cores / 4).max(2)
            }
            t => t,
        }
    }

    fn set(&mut self, key: &str, v: &str) -> Result<()> {
        let num = || -> Result<u64> {
            v.parse::<u64>()
                .with_context(|| format!("{key}={v} is not a number"))
        };
        match key {
            "pillars" => self.pillars = num()? as u32,
            "workers" => self.workers = num()? as usize,
            "buckets" => self.buckets = num()? as u32,
            "clients" => self.clients = num()? as usize,
            "in-flight" | "in_flight" => self.in_flight = num()? as usize,
            "batch" => self.batch = num()? as u32,
            "proposal-depth" | "proposal_depth" => self.proposal_depth = num()? as u32,
            "rate" => self.rate = num()?,
            "value-bytes" => self.value_bytes = num()? as usize,
            "request-bytes" => self.request_bytes = num()? as usize,
            "conflict-rate" => self.conflict_rate = v.parse().with_context(|| format!("{key}={v}"))?,
            "cross-partition" => self.cross_partition = v.parse().with_context(|| format!("{key}={v}"))?,
            "executor" => self.executor = v.into(),
            "service" => self.service = v.into(),
            "mode" => self.mode = v.parse().map_err(anyhow::Error::msg)?,
            "prepare-auth" => self.prepare_auth = v.parse().map_err(anyhow::Error::msg)?,
            "leader-first" | "leader_first" => {
                self.leader_first = v
                    .parse()
                    .with_context(|| format!("{key}={v} is not true or false"))?
            }
            "few-replies" | "few_replies" => {
                self.few_replies = v
                    .parse()
                    .with_context(|| format!("{key}={v} is not true or false"))?
            }
            "workload" => {
                self.workload = <Ycsb as clap::ValueEnum>::from_str(v, true).map_err(anyhow::Error::msg)?
            }
            other => bail!("cannot sweep over {other:?}; see --help for the parameter list"),
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<()> {
        let entry = crate::registry().get(&self.service).map_err(anyhow::Error::msg)?;
        if !["kv", "kv-mispredicting", "null", "sleep", "token"].contains(&self.service.as_str())
            && entry.workload.is_none()
        {
            bail!(
                "--service {:?} has no workload generator to drive it with",
                self.service
            );
        }
        if !["sequential", "parallel"].contains(&self.executor.as_str()) {
            bail!(
                "--executor must be sequential or parallel, not {:?}",
                self.executor
            );
        }
        if !["always", "batch", "off"].contains(&self.fsync.as_str()) {
            bail!("--fsync must be always, batch or off");
        }
        if self.clients == 0 || self.in_flight == 0 || self.duration == 0 || self.proposal_depth == 0 {
            bail!("--clients, --in-flight, --proposal-depth and --duration must be positive");
        }
        if !(0.0..=1.0).contains(&self.conflict_rate) {
            bail!("--conflict-rate must be between 0 and 1");
        }
        if !(0.0..=1.0).contains(&self.cross_partition) {
            bail!("--cross-partition must be between 0 and 1");
        }
        if self.cross_partition > 0.0 && self.service != "kv" {
            bail!("--cross-partition is for --service kv");
        }
        if self.n != 1 && self.n < 4 {
            bail!("--n must be 1 or at least 4 (3f+1)");
        }
        Ok(())
    }
}

pub fn run(a: Args) -> Result<()> {
    a.validate()?;
    let runs: Vec<(String, Args)> = match &a.sweep {
        None => vec![(String::new(), a.clone())],
        Some(spec) => {
            let (key, values) = spec
                .split_once('=')
                .context("--sweep must look like name=v1,v2,...")?;
            let mut runs = Vec::new();
            for v in values.split(',').map(str::trim).filter(|v| !v.is_empty()) {
                let mut r = a.clone();
                r.set(key.trim(), v)?;
                r.validate()?;
                runs.push((format!("{}={v}", key.trim()), r));
            }
            if runs.is_empty() {
                bail!("--sweep {spec:?} lists no values");
            }
            runs
        }
    };
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.load_threads())
        .enable_all()
        .build()?;
    let mut results: Vec<RunResult> = Vec::new();
    for (name, r) in &runs {
        eprintln!("== run {}", if name.is_empty() { "(single)" } else { name });
        let res = rt.block_on(async {
            tokio::select! {
                r = run_one(r, name) => r,
                _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
            }
        })?;
        println!("{}", res.one_line());
        crate::bench_out::append_csv(&a.out.join("results.csv"), &res)?;
        results.push(res);
    }
    crate::bench_out::write_json(&a.out.join("results.json"), &results)?;
    let plot = a.out.join("plot.png");
    crate::bench_plot::plot(&plot, &results, a.sweep.as_deref())?;
    if results.len() > 1 {
        // Throughput over time, one line per run (e.g. per mode with a kill).
        let tl = a.out.join("timeline.png");
        crate::bench_plot::plot_timelines(&tl, &results, a.sweep.as_deref().unwrap_or(""))?;
        println!("wrote {}", tl.display());
    }
    println!(
        "\nwrote {}, {} and {}",
        a.out.join("results.json").display(),
        a.out.join("results.csv").display(),
        plot.display()
    );
    if results.len() > 1 {
        let base = results[0].throughput_ops;
        println!(
            "\n{:<24} {:>12} {:>8} {:>9} {:>9} {:>11} {:>11}",
            "run", "ops/s", "ratio", "p50 ms", "p99 ms", "commit p50", "commit p99"
        );
        for r in &results {
            println!(
                "{:<24} {:>12.0} {:>8.2} {:>9.2} {:>9.2} {:>11.2} {:>11.2}",
                r.name,
                r.throughput_ops,
                if base > 0.0 { r.throughput_ops / base } else { 0.0 },
                r.p50_ms,
                r.p99_ms,
                r.commit_p50_ms,
                r.commit_p99_ms
            );
        }
    }
    Ok(())
}
