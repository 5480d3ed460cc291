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
    /// Ordering mode: pbft | cop | rcc | dispel | sarek.
    #[arg(long, default_value = "cop")]
    pub mode: OrderingMode,
    /// COP pillars (lanes); forced to 1 for pbft.
    #[arg(long, default_value_t = 4)]
    pub pillars: u32,
    /// sarek: state partitions K (one lane each); overrides --pillars.
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Replicas (3f+1).
    #[arg(long, default_value_t = 4)]
    pub n: usize,
    /// Number of seeds to run.
    #[arg(long, default_value_t = 100)]
    pub seeds: u64,
    /// First seed (default 0; with --minutes, a time-based one).
    #[arg(long)]
    pub seed: Option<u64>,
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
    /// Every request of a correct client must complete within this many
    /// virtual milliseconds after the later of its issue and the end of the fault window.
    #[arg(long, default_value_t = 30000)]
    pub liveness_ms: u64,
    /// Byzantine clients when a Byzantine client kind is drawn.
    #[arg(long, default_value_t = 2)]
    pub byzantine_clients: u32,
    /// Long-run mode: keep running fresh seeds (from --seed, or from a
    /// time-based seed when --seed is not given) for this many wall-clock
    /// minutes, stopping at the first violation; --seeds is ignored.
    #[arg(long)]
    pub minutes: Option<f64>,
    /// Executor: sequential | parallel.
    #[arg(long, default_value = "sequential")]
    pub executor: String,
    /// Service: a registered name with a workload generator (built in: kv | kv-mispredicting | null).
    #[arg(long, default_value = "kv")]
    pub service: String,
    /// Do not require every correct replica to end active in one view of
    /// every lane.
    #[arg(long)]
    pub no_view_check: bool,
    /// Do not require every live correct replica to end having executed as
    /// far as the furthest one.
    #[arg(long)]
    pub no_catch_up_check: bool,
    /// RCC: require every other instance to keep deciding at ≥ 80 % of its
    /// earlier rate while one instance is halted (noisy on random seeds).
    #[arg(long)]
    pub wait_free_check: bool,
    /// Leader rotation in cop mode: fixed | block-wise | random (drawn per seed).
    #[arg(long, default_value = "random")]
    pub rotation: String,
    /// How clients authenticate requests: mac-vector | signature | random
    /// (drawn per seed, a quarter sign).
    #[arg(long, default_value = "random")]
    pub client_auth: String,
    /// How replicas authenticate PBFT prepares: signature (prepared
    /// certificates in view changes) | mac (channel MACs; Castro & Liskov's
    /// view change without signed prepares).
    #[arg(long, default_value = "signature")]
    pub prepare_auth: String,
    /// Correct clients send a new request to their lane's primary alone and
    /// to every replica when its replies are late (PBFT §4.1; pbft, rcc, and cop
    /// with the fixed rotation), as the client library does by default.
    /// `--leader-first false`: every request to every replica.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_first: bool,
    /// Correct clients ask only f + 1 designated replicas for replies while
    /// every replica answers, as the client library does by default.
    /// `--few-replies false`: every replica replies.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub few_replies: bool,
    /// One-way latency of every replica-to-replica link in ms (a WAN
    /// profile; default: drawn per link between 0.5 and 5 ms).
    #[arg(long)]
    pub latency_ms: Option<u64>,
    /// Run each replica's hub and lane groups apart, their messages
    /// arriving this many µs later, as between a replica's threads
    /// (docs/lane-split.md step B2; default: they run as one).
    #[arg(long)]
    pub pillar_hop_us: Option<u64>,
    /// With `--pillar-hop-us`: each hub–group message is up to this many
    /// µs later still (seeded; per channel in order).
    #[arg(long, default_value_t = 0)]
    pub pillar_jitter_us: u64,
    /// dispel: concurrent epochs allowed (Dispel §4.3; default 8).
    #[arg(long)]
    pub epochs: Option<u64>,
    /// kv: fraction of two-key `PutAll`s across SAREK partitions (SAREK
    /// §V's cross-border requests; sarek's partitions, else 4), in every
    /// mode, the rest single-key operations.
    #[arg(long)]
    pub cross_partition: Option<f64>,
    /// --perf: requests per batch at most (default: the runtime's 256).
    #[arg(long)]
    pub batch_max: Option<u32>,
    /// --perf: crash replica R at T virtual ms for good, as `R@T` (Dispel
    /// §5.6); prints the throughput before and after and the longest pause.
    #[arg(long)]
    pub perf_crash: Option<String>,
    /// Resource model (issue 15): charge CPU and NIC time in virtual time
    /// and report throughput and latency (needs `--faults none`).
    #[arg(long)]
    pub perf: bool,
    /// --perf: cores per replica.
    #[arg(long, default_value_t = 2)]
    pub cores: u32,
    /// --perf: all replicas share this many cores (this machine: 2).
    #[arg(long)]
    pub shared_cores: Option<u32>,
    /// --perf: COP §4, each lane's consensus on its pillar's core (today's
    /// runtime runs all consensus on one core thread).
    #[arg(long)]
    pub consensus_on_pillars: bool,
    /// --perf: NIC bandwidth per replica and direction, Mbit/s (0: unlimited).
    #[arg(long, default_value_t = 10_000)]
    pub nic_mbit: u64,
    /// --perf: CPU prices, `key=ns,...` over the calibrated defaults
    /// (recv_ns, send_ns, per_kib_ns, sign_ns, verify_ns,
    /// per_batched_request_ns, admit_ns, execute_ns, schedule_ns, timer_ns,
    /// client_reply_ns).
    #[arg(long, default_value = "")]
    pub cost: String,
    /// --perf: one-way latency of every replica-to-replica link, µs.
    #[arg(long, default_value_t = 50)]
    pub link_us: u64,
    /// --perf: also write results.json, results.csv (appended, a row per
    /// seed) and plot.png here, in `chorus bench`'s format, so simulated and
    /// measured runs plot side by side.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// --perf: a label for the rows written to --out.
    #[arg(long, default_value = "")]
    pub label: String,
    /// --perf: one-way client-to-replica latency, µs (default: --link-us).
    #[arg(long)]
    pub client_link_us: Option<u64>,
    /// --perf: CBASE's parallel executor with this many worker threads per
    /// replica (1: the sequential executor).
    #[arg(long, default_value_t = 1)]
    pub exec_workers: u32,
    /// `sleep` service: its time per operation in µs, charged in virtual
    /// time by --perf (the simulator never sleeps for real).
    #[arg(long, default_value_t = 1000)]
    pub sleep_us: u64,
    /// `sleep` service: parallelism factor (keys); 0 = unlimited.
    #[arg(long, default_value_t = 1)]
    pub buckets: u32,
    /// --perf: replicas and clients spread round-robin over regions:
    /// `europe` (Dispel §5 Table 1: Frankfurt, Ireland, London, Paris),
    /// `world10` (ten AWS regions on four continents, 2017 round trips).
    #[arg(long)]
    pub regions: Option<String>,
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
    let first_seed = match (a.seed, a.minutes) {
        (Some(s), _) => s,
        (None, Some(_)) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs() * 1_000),
        (None, None) => 0,
    };
    if a.partitions.is_some() && a.mode != OrderingMode::Sarek {
        bail!("--partitions is for --mode sarek (cop uses --pillars)");
    }
    let mut opts = SimOptions::new(a.mode, a.partitions.unwrap_or(a.pillars), a.n)
        .with_faults(faults)
        .with_seeds(first_seed, a.seeds);
    opts.swarm = !a.no_swarm;
    opts.check_views = !a.no_view_check;
    opts.check_catch_up = !a.no_catch_up_check;
    opts.check_wait_free = a.wait_free_check;
    opts.clients = a.clients;
    opts.requests_per_client = a.requests;
    opts.client_window = a.window;
    opts.pool_max_requests = a.pool;
    opts.byzantine = a.byzantine;
    opts.fault_window_ms = a.fault_window_ms;
    opts.liveness_timeout_ms = a.liveness_ms;
    opts.byzantine_clients = a.byzantine_clients;
    opts.executor = executor;
    opts.service = a.service.clone();
    opts.service_options.sleep_us = a.sleep_us;
    opts.service_options.buckets = a.buckets;
    opts.registry = Arc::new(crate::registry().clone());
    opts.program = crate::program_name();
    opts.rotation = chorus_sim::options::parse_rotation(&a.rotation).map_err(anyhow::Error::msg)?;
    opts.client_auth = chorus_sim::options::parse_client_auth(&a.client_auth).map_err(anyhow::Error::msg)?;
    opts.prepare_auth =
        chorus_sim::options::parse_prepare_auth(&a.prepare_auth).map_err(anyhow::Error::msg)?;
    opts.leader_first = a.leader_first;
    opts.few_replies = a.few_replies;
    opts.latency_ms = a.latency_ms;
    opts.pillar_hop_us = a.pillar_hop_us;
    opts.pillar_jitter_us = a.pillar_jitter_us;
    opts.epochs = a.epochs;
    opts.cross_partition = a.cross_partition;
    opts.batch_max = a.batch_max;
    opts.perf_crash = a
        .perf_crash
        .as_deref()
        .map(chorus_sim::options::parse_perf_crash)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    if a.perf {
        opts.perf = Some(chorus_sim::perf::PerfModel {
            cores: a.cores.max(1),
            shared_cores: a.shared_cores,
            consensus_on_pillars: a.consensus_on_pillars,
            nic_mbit: a.nic_mbit,
            link_latency_us: a.link_us,
            client_link_us: a.client_link_us,
            regions: match a.regions.as_deref() {
                None => None,
                Some("europe") => Some(chorus_sim::perf::europe()),
                Some("world10") => Some(chorus_sim::perf::world10()),
                Some(other) => bail!("--regions: unknown profile {other:?} (known: europe, world10)"),
            },
            exec_workers: a.exec_workers.max(1),
            service_wait_us: if a.service == "sleep" { a.sleep_us } else { 0 },
            costs: chorus_sim::perf::CpuCosts::for_service(&a.service)
                .with_overrides(&a.cost)
                .map_err(|e| anyhow::anyhow!("--cost: {e}"))?,
        });
    }
    opts.validate().map_err(anyhow::Error::msg)?;
    if let Some(minutes) = a.minutes {
        return long_run(&opts, minutes, a.verbose);
    }
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
    if let (Some(dir), Some(model)) = (&a.out, &opts.perf) {
        write_perf(dir, &a, model, &summary)?;
    }
    if !summary.ok() {
        bail!("{} seed(s) violated an invariant", summary.failures.len());
    }
    Ok(())
}

/// `--minutes M`: fresh seeds until the budget is spent or one fails.
fn long_run(opts: &SimOptions, minutes: f64, verbose: bool) -> Result<()> {
    if !(minutes > 0.0 && minutes <= 24.0 * 60.0) {
        bail!("--minutes must be in (0, 1440]");
    }
    let budget = std::time::Duration::from_secs_f64(minutes * 60.0);
    eprintln!(
        "long run: {minutes} min from seed {} ({})",
        opts.first_seed,
        opts.describe()
    );
    let mut done = 0u64;
    let out = chorus_sim::run_for(opts, budget, |r| {
        done += 1;
        if verbose {
            eprintln!("{r}");
        } else if done.is_multiple_of(10) {
            eprint!("\r  {done} seeds (last {})", r.seed);
            let _ = std::io::stderr().flush();
        }
    });
    eprintln!();
    println!("{}", out.summary);
    let last = opts.first_seed + out.summary.seeds_run.saturating_sub(1);
    println!(
        "long run: {} seeds ({}..={last}) in {:.1} s wall, {} events, {:.0} events/s",
        out.summary.seeds_run,
        opts.first_seed,
        out.wall.as_secs_f64(),
        out.summary.events,
        out.events_per_second()
    );
    if let Some(r) = out.failure {
        println!("first violation at seed {}; replay: {}", r.seed, r.replay);
        bail!("seed {} violated an invariant", r.seed);
    }
    Ok(())
}

/// `--perf --out DIR`: the model's runs as `chorus bench` results (virtual
/// time; CPU and memory columns empty).
fn write_perf(
    dir: &std::path::Path,
    a: &Args,
    model: &chorus_sim::perf::PerfModel,
    summary: &chorus_sim::SimSummary,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let label = format!(
        "model {}cores{}{}",
        model.shared_cores.map_or(model.cores, |c| c),
        if model.shared_cores.is_some() {
            " shared"
        } else {
            ""
        },
        if model.consensus_on_pillars {
            " on-pillars"
        } else {
            ""
        }
    );
    let results: Vec<crate::bench_run::RunResult> = summary
        .perf
        .iter()
        .map(|p| crate::bench_run::RunResult {
            name: format!("sim {:?} p{}", a.mode, a.partitions.unwrap_or(a.pillars)).to_lowercase(),
            label: if a.label.is_empty() {
                label.clone()
            } else {
                a.label.clone()
            },
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            cores: model.shared_cores.unwrap_or(model.cores) as usize,
            client_threads: 0,
            prepare_auth: a.prepare_auth.clone(),
            leader_first: a.leader_first,
            few_replies: a.few_replies,
            n: a.n,
            mode: format!("{:?}", a.mode).to_lowercase(),
            pillars: a.partitions.unwrap_or(a.pillars),
            executor: if model.exec_workers > 1 {
                "model parallel".into()
            } else {
                "model sequential".into()
            },
            workers: model.exec_workers as usize,
            service: a.service.clone(),
            workload: "sim".into(),
            clients: a.clients as usize,
            in_flight: a.window as usize,
            offered_rate: 0,
            arrivals: String::new(),
            batch: 0,
            request_bytes: 0,
            value_bytes: 0,
            buckets: if a.service == "sleep" { a.buckets } else { 0 },
            duration_s: p.accepted as f64 / p.throughput.max(1e-9),
            ops: p.accepted as u64,
            errors: 0,
            shed: 0,
            throughput_ops: p.throughput,
            p50_ms: p.p50_us as f64 / 1e3,
            p95_ms: 0.0,
            p99_ms: p.p99_us as f64 / 1e3,
            max_ms: 0.0,
            commit_p50_ms: 0.0,
            commit_p99_ms: 0.0,
            pacing_late_p50_ms: 0.0,
            pacing_late_p99_ms: 0.0,
            replica_cpu_s: Vec::new(),
            replica_peak_rss_mib: Vec::new(),
            timeline: Vec::new(),
            killed: None,
        })
        .collect();
    for r in &results {
        crate::bench_out::append_csv(&dir.join("results.csv"), r)?;
    }
    crate::bench_out::write_json(&dir.join("results.json"), &results)?;
    crate::bench_plot::plot(&dir.join("plot.png"), &results, None)?;
    println!("model results: {}", dir.join("results.csv").display());
    Ok(())
}
