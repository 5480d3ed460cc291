//! `chorus demo`: a local 4-replica cluster as separate processes doing real
//! work (key-value by default, or any registered service with a workload
//! generator); one replica is SIGKILLed mid-run and restarted, and the demo
//! shows it catch up to the same state digest.

use crate::load::{self, LoadStats, Percentiles};
use crate::procs::{free_base_port, tail, Cluster};
use crate::status_query::{query, wait_ready};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use chorus_apps::kv_op::{KvOp, KvReply};
use chorus_core::{ClientId, ClusterConfig, Identity, OrderingMode, ProtocolParams};
use chorus_node::keygen::{keygen_in, KeygenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Ordering mode: pbft | cop | rcc | dispel | sarek.
    #[arg(long, default_value = "cop")]
    pub mode: OrderingMode,
    /// COP pillars.
    #[arg(long, default_value_t = 2)]
    pub pillars: u32,
    /// sarek: state partitions K (one lane and preferred leader each);
    /// overrides --pillars.
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Requests each client keeps in flight.
    #[arg(long, default_value_t = 8)]
    pub in_flight: usize,
    /// Seconds of each phase (healthy, one replica killed, restarted).
    #[arg(long, default_value_t = 8)]
    pub phase_secs: u64,
    /// Which replica to kill.
    #[arg(long, default_value_t = 3)]
    pub victim: u32,
    /// Cluster directory (default: a fresh temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the cluster directory (logs, data) afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Port of the live dashboard the demo serves on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub dashboard_port: u16,
    /// Do not serve the dashboard.
    #[arg(long)]
    pub no_dashboard: bool,
    /// Service: kv, or any registered service with a workload generator.
    #[arg(long, default_value = "kv")]
    pub service: String,
    /// Executor: sequential | parallel.
    #[arg(long, default_value = "sequential")]
    pub executor: String,
    /// Worker threads of the parallel executor.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
}

struct PhaseRow {
    name: &'static str,
    secs: f64,
    ops: u64,
    lat: Percentiles,
}

pub fn run(a: Args) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        tokio::select! {
            r = demo(&a) => r,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("\ninterrupted: stopping every replica the demo started");
                Err(anyhow!("interrupted"))
            }
        }
    })
}

async fn demo(a: &Args) -> Result<()> {
    let n = 4;
    if a.victim as usize >= n {
        bail!("--victim must be below {n}");
    }
    // kv has its own workload here (with a read-back of acknowledged writes).
    let app = if a.service == "kv" {
        None
    } else {
        let registry = crate::registry();
        let entry = registry.get(&a.service).map_err(anyhow::Error::msg)?;
        let workload = entry.workload.clone().ok_or_else(|| {
            anyhow!(
                "service {:?} has no workload generator to demo it with",
                a.service
            )
        })?;
        let local = registry
            .build(&a.service, &chorus_apps::ServiceOptions::default())
            .map_err(anyhow::Error::msg)?;
        Some((workload, local))
    };
    if a.partitions.is_some() && a.mode != OrderingMode::Sarek {
        bail!("--partitions is for --mode sarek (cop uses --pillars)");
    }
    let pillars = if a.mode == OrderingMode::Pbft {
        1
    } else {
        a.partitions.unwrap_or(a.pillars)
    };
    let (dir, _tmp) = match &a.dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempfile::Builder::new().prefix("chorus-demo-").tempdir()?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let base_port = free_base_port(n, pillars)?;
    let params = ProtocolParams {
        mode: a.mode,
        pillars,
        checkpoint_interval: 64 * pillars as u64,
        batch_max_requests: 128,
        batch_delay_ms: 1,
        view_change_timeout_ms: 1_000,
        ..ProtocolParams::default()
    };
    let cluster_cfg = keygen_in(
        crate::registry(),
        &KeygenOptions {
            out: dir.clone(),
            n,
            // The workers, the probe, and the dashboard's own identity (replies
            // go to an identity's newest connection, so none may share one).
            clients: a.clients + 2,
            hosts: vec!["127.0.0.1".into()],
            base_port,
            params,
            service: a.service.clone(),
            service_options: String::new(),
            executor: a.executor.clone(),
            workers: a.workers,
            fsync: "batch".into(),
            sleep_us: 1000,
            sleep_buckets: 1,
        },
    )?;
    let config = Arc::new(cluster_cfg);
    println!(
        "Chorus demo: {n} replicas (f = {}), mode {}, {} pillar(s), {} service, {} executor, {} clients x {} in flight",
        config.f(),
        format!("{:?}", a.mode).to_lowercase(),
        pillars,
        a.service,
        a.executor,
        a.clients,
        a.in_flight
    );
    println!("cluster directory: {}", dir.display());

    let mut cluster = Cluster::new(dir.clone(), n);
    for i in 0..n {
        cluster.start(i)?;
    }
    let keys = client_keys(&dir, a.clients + 2)?;
    let probe_id = ClientId(a.clients as u64);
    let probe_key = keys[a.clients].clone();
    wait_ready(&config, probe_id, &probe_key, &mut cluster, &[0, 1, 2, 3]).await?;
    println!("all replicas up");
    if !a.no_dashboard {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", a.dashboard_port))
            .await
            .context("binding the dashboard port")?;
        let url = format!("http://{}/", listener.local_addr()?);
        crate::cmd_dashboard::start(
            config.clone(),
            ClientId(a.clients as u64 + 1),
            keys[a.clients + 1].clone(),
            listener,
            format!("chorus demo in {}", dir.display()),
            1000,
        );
        println!("live dashboard: {url}");
    }
    println!();

    let stats = load::shared();
    let mut workers = Vec::new();
    for (c, key) in keys.iter().enumerate().take(a.clients) {
        let client = chorus_client::Client::connect(
            config.clone(),
            ClientId(c as u64),
            key.clone(),
            chorus_client::ClientOptions::default(),
        )
        .await
        .map_err(|e| anyhow!("client {c}: {e}"))?;
        let client = Arc::new(client);
        for slot in 0..a.in_flight {
            workers.push(match &app {
                None => tokio::spawn(worker(client.clone(), c, slot, stats.clone())),
                Some((w, local)) => tokio::spawn(app_worker(
                    client.clone(),
                    (w.clone(), local.clone()),
                    (c, slot),
                    stats.clone(),
                )),
            });
        }
    }

    let mut rows = Vec::new();
    let phase = Duration::from_secs(a.phase_secs);
    rows.push(run_phase("healthy", phase, &stats, &mut cluster).await?);
    println!("  >>> SIGKILL replica {}", a.victim);
    cluster.kill(a.victim as usize);
    rows.push(run_phase("1 replica killed", phase, &stats, &mut cluster).await?);
    println!("  >>> restarting replica {}", a.victim);
    cluster.start(a.victim as usize)?;
    rows.push(run_phase("restarted", phase, &stats, &mut cluster).await?);
    stats.stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(10), w).await;
    }

    println!("\nwaiting for every replica to reach the same state ...");
    let reports = wait_converged(&config, probe_id, &probe_key, Duration::from_secs(30)).await;

    // Every acknowledged write must be readable (ordered reads, so they see
    // everything acknowledged before).
    let probe = chorus_client::Client::connect(
        config.clone(),
        probe_id,
        probe_key.clone(),
        chorus_client::ClientOptions::default(),
    )
    .await
    .map_err(|e| anyhow!("probe client: {e}"))?;
    let latest: Vec<(Bytes, Bytes)> = stats.acked.lock().clone().into_iter().collect();
    let sample: Vec<_> = latest.iter().take(200).collect();
    let mut lost = 0;
    for (k, v) in &sample {
        let r = probe
            .invoke(KvOp::get((*k).clone()))
            .await
            .map_err(|e| anyhow!("read-back: {e}"))?;
        if KvReply::decode(&r).ok() != Some(KvReply::Value(Some((*v).clone()))) {
            lost += 1;
        }
    }

    println!("\n=== summary ===");
    println!(
        "{:<18} {:>7} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "phase", "secs", "ops", "ops/s", "p50 ms", "p99 ms", "max ms"
    );
    for r in &rows {
        println!(
            "{:<18} {:>7.1} {:>10} {:>10.0} {:>9.2} {:>9.2} {:>9.2}",
            r.name,
            r.secs,
            r.ops,
            r.ops as f64 / r.secs,
            r.lat.p50_ms,
            r.lat.p99_ms,
            r.lat.max_ms
        );
    }
    println!(
        "\n{:<8} {:>10} {:>10} {:>10} {:>9}  state digest",
        "replica", "executed", "stable", "views", "diverged"
    );
    let mut digests = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        match r {
            Ok(s) => {
                println!(
                    "{:<8} {:>10} {:>10} {:>10} {:>9}  {}",
                    format!("r{i}"),
                    s.executed_seq,
                    s.core.stable_seq,
                    format!("{:?}", s.core.views),
                    s.core.state_divergences,
                    s.state_digest
                );
                digests.push((s.executed_seq, s.state_digest.clone()));
            }
            Err(e) => println!("{:<8} unreachable: {e:#}", format!("r{i}")),
        }
    }
    let all_equal = digests.len() == n && digests.windows(2).all(|w| w[0] == w[1]);
    // Every replica in the same view on every lane: a replica left alone in
    // a higher view votes in no quorum, so the cluster would have no fault
    // margin left although the digests agree.
    let views: Vec<_> = reports
        .iter()
        .filter_map(|r| r.as_ref().ok().map(|s| s.core.views.clone()))
        .collect();
    let same_views = views.len() == n && views.windows(2).all(|w| w[0] == w[1]);
    if app.is_none() {
        println!(
            "\nacknowledged writes checked: {} of {} distinct keys, lost: {lost}",
            sample.len(),
            latest.len()
        );
    }
    println!(
        "replica {} killed with SIGKILL, restarted, caught up: {}",
        a.victim,
        if all_equal {
            "yes — all 4 state digests equal"
        } else {
            "NO — digests differ"
        }
    );
    println!(
        "all replicas in the same view on every lane: {}",
        if same_views { "yes" } else { "NO — views differ" }
    );
    if let Some((i, st)) = cluster.exited() {
        println!(
            "replica {i} exited on its own ({st}); last log lines:\n{}",
            tail(&cluster.log_path(i), 20)
        );
    }
    drop(cluster);
    if a.keep {
        if let Some(t) = _tmp {
            let _ = t.keep();
        }
    }
    if !all_equal || lost > 0 || !same_views {
        bail!("demo found a problem: digests equal = {all_equal}, same views = {same_views}, lost writes = {lost}");
    }
    Ok(())
}

fn client_keys(dir: &std::path::Path, count: usize) -> Result<Vec<Identity>> {
    (0..count)
        .map(|i| {
            let text = std::fs::read_to_string(dir.join(format!("keys/client-{i}.key")))?;
            let k: chorus_node::node_config::KeyFile = toml::from_str(&text)?;
            k.to_identity()
        })
        .collect()
}

async fn worker(client: Arc<chorus_client::Client>, c: usize, slot: usize, stats: Arc<LoadStats>) {
    let mut i: u64 = 0;
    while !stats.stop.load(Ordering::Relaxed) {
        i += 1;
        // Each (client, slot) writes its own 64 keys; a fifth of the operations read.
        let key = Bytes::from(format!("user{c:03}-{slot:02}-{:02}", i % 64));
        let started = Instant::now();
        if i.is_multiple_of(5) {
            match client.invoke_read_only(KvOp::get(key)).await {
                Ok(_) => stats.record(started),
                Err(_) => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        } else {
            let value = Bytes::from(format!("value-{c}-{slot}-{i}"));
            match client.invoke(KvOp::put(key.clone(), value.clone())).await {
                Ok(_) => {
                    stats.record(started);
                    stats.remember_ack(key, value);
                }
                Err(_) => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    stats.forget_key(key);
                }
            }
        }
    }
}

/// A registered service's workload: each (client, slot) draws from its own
/// seeded RNG; read-only operations take the fast path.
async fn app_worker(
    client: Arc<chorus_client::Client>,
    (workload, local): (chorus_apps::WorkloadFn, Arc<dyn chorus_exec::Service>),
    (c, slot): (usize, usize),
    stats: Arc<LoadStats>,
) {
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64((c * 1_000 + slot) as u64);
    let mut i: u64 = 0;
    while !stats.stop.load(Ordering::Relaxed) {
        i += 1;
        let op = workload(&mut rng, ClientId(c as u64), i * 1_000 + slot as u64);
        let started = Instant::now();
        let r = if local.is_read_only(&op) {
            client.invoke_read_only(op).await
        } else {
            client.invoke(op).await
        };
        match r {
            Ok(_) => stats.record(started),
            Err(_) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

async fn run_phase(
    name: &'static str,
    len: Duration,
    stats: &LoadStats,
    cluster: &mut Cluster,
) -> Result<PhaseRow> {
    let start = Instant::now();
    let start_ops = stats.committed.load(Ordering::Relaxed);
    let mut last_ops = start_ops;
    let mut last = Instant::now();
    let _ = stats.take_phase();
    while start.elapsed() < len {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let ops = stats.committed.load(Ordering::Relaxed);
        let w = stats.take_window();
        let rate = (ops - last_ops) as f64 / last.elapsed().as_secs_f64();
        last_ops = ops;
        last = Instant::now();
        eprint!(
            "\r  [{name:<16}] {:>5.1}s  ops/s {:>8.0}  p50 {:>7.2} ms  p99 {:>7.2} ms  committed {:>8}  errors {}   ",
            start.elapsed().as_secs_f64(),
            rate,
            w.p50_ms,
            w.p99_ms,
            ops,
            stats.errors.load(Ordering::Relaxed)
        );
        let _ = std::io::stderr().flush();
        if let Some((i, st)) = cluster.exited() {
            eprintln!();
            bail!(
                "replica {i} exited unexpectedly ({st}); log:\n{}",
                tail(&cluster.log_path(i), 30)
            );
        }
    }
    eprintln!();
    Ok(PhaseRow {
        name,
        secs: start.elapsed().as_secs_f64(),
        ops: stats.committed.load(Ordering::Relaxed) - start_ops,
        lat: stats.take_phase(),
    })
}

async fn wait_converged(
    config: &ClusterConfig,
    id: ClientId,
    key: &Identity,
    limit: Duration,
) -> Vec<Result<chorus_node::status::StatusReport>> {
    let deadline = Instant::now() + limit;
    loop {
        let mut reports = Vec::new();
        for r in config.replica_ids() {
            reports.push(query(config, id, key, r).await.context("status query"));
        }
        // Converged: same position, state and views (lanes may still be
        // settling a view change when the load stops).
        let keys: Vec<_> = reports
            .iter()
            .filter_map(|r| {
                r.as_ref()
                    .ok()
                    .map(|s| (s.executed_seq, s.state_digest.clone(), s.core.views.clone()))
            })
            .collect();
        let converged = keys.len() == reports.len() && keys.windows(2).all(|w| w[0] == w[1]);
        if converged || Instant::now() > deadline {
            return reports;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
