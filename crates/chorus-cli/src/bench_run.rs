//! One benchmark run: cluster up, load, warm-up, measurement, cluster down.

use crate::cmd_bench::Args;
use crate::load::{self, LoadStats};
use crate::procs::{cpu_seconds, free_base_port, peak_rss_mib, Cluster};
use crate::status_query::wait_ready;
use crate::workload::{Generator, WorkloadSpec};
use anyhow::{anyhow, bail, Context, Result};
use chorus_apps::kv_op::KvOp;
use chorus_core::{ClientId, ClusterConfig, Identity, OrderingMode, ProtocolParams};
use chorus_node::keygen::{keygen_in, KeygenOptions};
use rand::SeedableRng;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests one open-loop client may have outstanding; beyond it new
/// arrivals are shed and counted (the offered rate exceeds capacity).
const OPEN_LOOP_OUTSTANDING_MAX: u64 = 4_096;

#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub name: String,
    pub label: String,
    pub unix_time: u64,
    pub cores: usize,
    /// Threads of the load generator (0 in simulated rows).
    pub client_threads: usize,
    /// How the replicas authenticated prepares (`signature` or `mac`).
    pub prepare_auth: String,
    /// Clients sent new requests to the primary first (`--leader-first`).
    pub leader_first: bool,
    /// Clients asked f + 1 replicas only for replies (`--few-replies`).
    pub few_replies: bool,
    pub n: usize,
    pub mode: String,
    pub pillars: u32,
    pub executor: String,
    pub workers: usize,
    pub service: String,
    pub workload: String,
    pub clients: usize,
    pub in_flight: usize,
    pub offered_rate: u64,
    /// Open loop: `uniform` or `poisson` (`--arrivals`); empty when closed.
    pub arrivals: String,
    pub batch: u32,
    pub request_bytes: usize,
    pub value_bytes: usize,
    pub buckets: u32,
    pub duration_s: f64,
    pub ops: u64,
    pub errors: u64,
    pub shed: u64,
    pub throughput_ops: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Submit to the first replica's reply (committed and executed there);
    /// the columns above are submit to the accepted (f+1 matching) reply.
    pub commit_p50_ms: f64,
    pub commit_p99_ms: f64,
    /// Open loop: how late the generator sent requests after their intended
    /// times (the latencies above count from the intended times); 0 when
    /// closed loop.
    pub pacing_late_p50_ms: f64,
    pub pacing_late_p99_ms: f64,
    /// CPU seconds each local replica used during the measurement.
    pub replica_cpu_s: Vec<f64>,
    /// Peak RSS of each local replica over its lifetime.
    pub replica_peak_rss_mib: Vec<f64>,
    /// (second, ops/s) samples of the measurement.
    pub timeline: Vec<(f64, f64)>,
    /// `--kill-replica`: which replica was SIGKILLed, and when (measured seconds).
    pub killed: Option<(usize, f64)>,
}

impl RunResult {
    pub fn one_line(&self) -> String {
        format!(
            "{:<20} {:>10.0} ops/s  p50 {:>7.2} ms  p95 {:>7.2} ms  p99 {:>7.2} ms  max {:>8.2} ms  commit p50 {:>7.2} ms  p99 {:>7.2} ms  errors {}  shed {}{}{}",
            if self.name.is_empty() { "run" } else { &self.name },
            self.throughput_ops,
            self.p50_ms,
            self.p95_ms,
            self.p99_ms,
            self.max_ms,
            self.commit_p50_ms,
            self.commit_p99_ms,
            self.errors,
            self.shed,
            self.pacing(),
            self.resources(),
        )
    }

    /// Open loop only: the generator's own lateness, which the latencies
    /// above include (they count from the intended send times).
    fn pacing(&self) -> String {
        if self.offered_rate == 0 {
            return String::new();
        }
        format!(
            "  {} arrivals, sent late p50 {:.3} ms  p99 {:.3} ms",
            self.arrivals, self.pacing_late_p50_ms, self.pacing_late_p99_ms
        )
    }

    /// CPU and RSS of the replicas, measured only for a local cluster
    /// (`--target` replicas run elsewhere): omitted when unmeasured instead of
    /// printing empty lists (issue 14 item 4).
    fn resources(&self) -> String {
        if self.replica_cpu_s.is_empty() && self.replica_peak_rss_mib.is_empty() {
            return String::new();
        }
        format!(
            "  cpu/replica {:?} s  rss {:?} MiB",
            self.replica_cpu_s
                .iter()
                .map(|c| (c * 10.0).round() / 10.0)
                .collect::<Vec<_>>(),
            self.replica_peak_rss_mib
                .iter()
                .map(|c| c.round())
                .collect::<Vec<_>>(),
        )
    }
}

fn read_identity(dir: &Path, i: usize) -> Result<Identity> {
    let path = dir.join(format!("keys/client-{i}.key"));
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let k: chorus_node::node_config::KeyFile = toml::from_str(&text)?;
    k.to_identity()
}

pub async fn run_one(a: &Args, name: &str) -> Result<RunResult> {
    let pillars = if a.mode == OrderingMode::Pbft {
        1
    } else {
        a.pillars
    };
    if a.kill_replica.is_some() && a.target.is_some() {
        bail!("--kill-replica needs the local cluster (no --target)");
    }
    if a.kill_replica.is_some_and(|r| r >= a.n) {
        bail!("--kill-replica must be below --n");
    }
    let mut _tmp = None;
    let mut cluster_procs: Option<Cluster> = None;
    let (dir, config): (PathBuf, ClusterConfig) = match &a.target {
        Some(dir) => {
            let text = std::fs::read_to_string(dir.join("cluster.toml"))
                .with_context(|| format!("reading {}/cluster.toml", dir.display()))?;
            let config: ClusterConfig = toml::from_str(&text)?;
            config.validate()?;
            check_target_service(dir, &a.service)?;
            (dir.clone(), config)
        }
        None => {
            let t = tempfile::Builder::new().prefix("chorus-bench-").tempdir()?;
            let dir = t.path().to_path_buf();
            _tmp = Some(t);
            let params = ProtocolParams {
                mode: a.mode,
                pillars,
                batch_max_requests: a.batch,
                batch_delay_ms: a.batch_delay_ms,
                proposal_depth: a.proposal_depth,
                prepare_auth: a.prepare_auth,
                checkpoint_interval: 128 * pillars as u64,
                window_slots: 512,
                ..ProtocolParams::default()
            };
            let config = keygen_in(
                crate::registry(),
                &KeygenOptions {
                    out: dir.clone(),
                    n: a.n,
                    clients: a.clients + 1,
                    hosts: vec!["127.0.0.1".into()],
                    base_port: free_base_port(a.n, pillars)?,
                    params,
                    service: a.service.clone(),
                    service_options: crate::workload_token::service_options(&a.service, a.records),
                    executor: a.executor.clone(),
                    workers: a.workers,
                    fsync: a.fsync.clone(),
                    sleep_us: a.sleep_us,
                    sleep_buckets: a.buckets,
                },
            )?;
            let mut c = Cluster::new(dir.clone(), a.n);
            for i in 0..a.n {
                c.start(i)?;
            }
            cluster_procs = Some(c);
            (dir, config)
        }
    };
    if config.clients.len() < a.clients {
        bail!(
            "the cluster lists {} clients, --clients asks for {}",
            config.clients.len(),
            a.clients
        );
    }
    let config = Arc::new(config);
    let probe = read_identity(&dir, 0)?;
    match cluster_procs.as_mut() {
        Some(c) => {
            wait_ready(
                &config,
                ClientId(0),
                &probe,
                c,
                &(0..a.n as u32).collect::<Vec<_>>(),
            )
            .await?
        }
        None => {
            for r in config.replica_ids() {
                crate::status_query::query(&config, ClientId(0), &probe, r)
                    .await
                    .with_context(|| format!("cluster at {} is not reachable", dir.display()))?;
            }
        }
    }

    let spec = WorkloadSpec {
        service: a.service.clone(),
        ycsb: a.workload,
        records: a.records,
        value_bytes: a.value_bytes,
        request_bytes: a.request_bytes,
        dist: a.distribution,
        conflict_rate: a.conflict_rate,
        buckets: a.buckets,
        cross_partition: a.cross_partition,
        partitions: if a.mode == chorus_core::OrderingMode::Sarek {
            a.pillars
                .clamp(2, u32::from(chorus_exec::partitioned::predict::MAX_PARTITIONS)) as u16
        } else {
            4
        },
    };
    let mut clients = Vec::new();
    // One identity per process (see `lock_identity`): held until the run ends.
    let mut _held = Vec::new();
    for i in 0..a.clients {
        let key = dir.join(format!("keys/client-{i}.key"));
        _held.push(chorus_node::node_config::lock_identity(&key, ClientId(i as u64))?);
        let c = chorus_client::Client::connect(
            config.clone(),
            ClientId(i as u64),
            read_identity(&dir, i)?,
            chorus_client::ClientOptions {
                leader_first: a.leader_first,
                few_replies: a.few_replies,
                ..chorus_client::ClientOptions::default()
            },
        )
        .await
        .map_err(|e| anyhow!("client {i}: {e}"))?;
        clients.push(Arc::new(c));
    }
    if a.service == "kv" {
        preload(&clients, a.records, a.value_bytes).await?;
    }

    let stats = load::shared();
    let shed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    let mut pacer_thread = None;
    if a.rate == 0 {
        for (i, c) in clients.iter().enumerate() {
            for s in 0..a.in_flight {
                let g = Generator::new(spec.clone(), i as u64);
                tasks.push(tokio::spawn(closed_loop(
                    c.clone(),
                    g,
                    stats.clone(),
                    (i * 1000 + s) as u64,
                    a.ordered_reads,
                )));
            }
        }
    } else {
        let gens = (0..clients.len())
            .map(|i| Generator::new(spec.clone(), i as u64))
            .collect();
        let st = stats.clone();
        let (arrivals, pacer) = crate::pacer::spawn(clients.len(), a.rate as f64, a.arrivals, move || {
            st.stop.load(Ordering::Relaxed)
        })
        .context("starting the open-loop pacer thread")?;
        pacer_thread = Some(pacer);
        tasks.push(tokio::spawn(open_loop(
            clients.clone(),
            gens,
            arrivals,
            stats.clone(),
            a.ordered_reads,
            shed.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_secs(a.warmup)).await;
    let pids: Vec<u32> = cluster_procs
        .as_ref()
        .map(|c| (0..a.n).filter_map(|i| c.pid(i)).collect())
        .unwrap_or_default();
    let cpu0: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p).unwrap_or(0.0)).collect();
    let _ = stats.take_phase();
    let _ = stats.take_commit_phase();
    let _ = stats.take_pacing();
    let errors0 = stats.errors.load(Ordering::Relaxed);
    let _ = stats.take_error_kinds();
    let shed0 = shed.load(Ordering::Relaxed);
    let ops0 = stats.committed.load(Ordering::Relaxed);
    let start = Instant::now();
    let mut timeline = Vec::new();
    let mut last = ops0;
    let mut last_t = Instant::now();
    let mut killed = None;
    // Finer samples when a kill is to be seen in the timeline.
    let tick = if a.kill_replica.is_some() {
        Duration::from_millis(250)
    } else {
        Duration::from_secs(1)
    };
    while start.elapsed() < Duration::from_secs(a.duration) {
        tokio::time::sleep(tick).await;
        if let (Some(victim), None, Some(c)) = (a.kill_replica, killed, cluster_procs.as_mut()) {
            if start.elapsed().as_secs_f64() >= a.kill_at {
                c.kill(victim);
                killed = Some((victim, start.elapsed().as_secs_f64()));
                eprintln!("\n  SIGKILL replica {victim}");
            }
        }
        let now = stats.committed.load(Ordering::Relaxed);
        timeline.push((
            start.elapsed().as_secs_f64(),
            (now - last) as f64 / last_t.elapsed().as_secs_f64(),
        ));
        eprint!(
            "\r  {:>4.0}s  {:>9.0} ops/s   ",
            start.elapsed().as_secs_f64(),
            timeline.last().map(|t| t.1).unwrap_or(0.0)
        );
        last = now;
        last_t = Instant::now();
        if let Some(c) = cluster_procs.as_mut() {
            if let Some((i, st)) = c.exited() {
                bail!(
                    "replica {i} exited during the run ({st}):\n{}",
                    crate::procs::tail(&c.log_path(i), 30)
                );
            }
        }
    }
    eprintln!();
    for (text, count) in stats.take_error_kinds() {
        eprintln!("  error ({count}×, the first of its kind): {text}");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let ops = stats.committed.load(Ordering::Relaxed) - ops0;
    let lat = stats.take_phase();
    let commit = stats.take_commit_phase();
    let pacing = stats.take_pacing();
    let cpu1: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p).unwrap_or(0.0)).collect();
    let rss: Vec<f64> = pids.iter().map(|p| peak_rss_mib(*p).unwrap_or(0.0)).collect();
    stats.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    if let Some(p) = pacer_thread {
        // It sees `stop` within one arrival interval, or its queue's
        // receiver gone with the aborted task.
        tokio::task::spawn_blocking(move || p.join())
            .await
            .ok()
            .and_then(|r| r.ok())
            .ok_or_else(|| anyhow!("the open-loop pacer thread panicked"))?;
    }
    drop(cluster_procs);
    Ok(RunResult {
        name: name.to_string(),
        label: a.label.clone(),
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        client_threads: a.load_threads(),
        prepare_auth: config.params.prepare_auth.name().into(),
        leader_first: a.leader_first,
        few_replies: a.few_replies,
        n: config.n(),
        mode: format!("{:?}", config.params.mode).to_lowercase(),
        pillars: config.params.pillars,
        executor: a.executor.clone(),
        workers: a.workers,
        service: a.service.clone(),
        workload: format!("{:?}", a.workload),
        clients: a.clients,
        in_flight: a.in_flight,
        offered_rate: a.rate,
        arrivals: if a.rate == 0 {
            String::new()
        } else {
            format!("{:?}", a.arrivals).to_lowercase()
        },
        batch: config.params.batch_max_requests,
        request_bytes: a.request_bytes,
        value_bytes: a.value_bytes,
        buckets: a.buckets,
        duration_s: elapsed,
        ops,
        errors: stats.errors.load(Ordering::Relaxed) - errors0,
        shed: shed.load(Ordering::Relaxed) - shed0,
        throughput_ops: ops as f64 / elapsed,
        p50_ms: lat.p50_ms,
        p95_ms: lat.p95_ms,
        p99_ms: lat.p99_ms,
        max_ms: lat.max_ms,
        commit_p50_ms: commit.p50_ms,
        commit_p99_ms: commit.p99_ms,
        pacing_late_p50_ms: pacing.p50_ms,
        pacing_late_p99_ms: pacing.p99_ms,
        replica_cpu_s: cpu0.iter().zip(&cpu1).map(|(a, b)| b - a).collect(),
        replica_peak_rss_mib: rss,
        timeline,
        killed,
    })
}

/// The workload must be the service the cluster runs: `--service` defaults
/// to `kv`, and against a `null` cluster that silently preloaded 10 000
/// records and drove `kv` operations (2026-11-27). The replica files
/// `chorus keygen` wrote name the service; without them, nothing to check.
fn check_target_service(dir: &std::path::Path, service: &str) -> Result<()> {
    let file = dir.join("replica-0.toml");
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Ok(());
    };
    let node: chorus_node::node_config::NodeConfig =
        toml::from_str(&text).with_context(|| format!("reading {}", file.display()))?;
    if node.service != service {
        bail!(
            "the cluster in {} runs service {:?} ({}), not {service:?}: pass --service {}",
            dir.display(),
            node.service,
            file.display(),
            node.service
        );
    }
    Ok(())
}

/// Insert the records YCSB reads, spread over all clients.
async fn preload(clients: &[Arc<chorus_client::Client>], records: u64, value_bytes: usize) -> Result<()> {
    let value = bytes::Bytes::from(vec![b'v'; value_bytes]);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in clients {
        for _ in 0..16 {
            let c = c.clone();
            let next = next.clone();
            let value = value.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= records {
                        return Ok::<_, anyhow::Error>(());
                    }
                    c.invoke(KvOp::put(Generator::key(i), value.clone()))
                        .await
                        .map_err(|e| anyhow!("preloading record {i}: {e}"))?;
                }
            }));
        }
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

async fn closed_loop(
    client: Arc<chorus_client::Client>,
    mut g: Generator,
    stats: Arc<LoadStats>,
    seed: u64,
    ordered_reads: bool,
) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    while !stats.stop.load(Ordering::Relaxed) {
        let op = g.next(&mut rng);
        let started = Instant::now();
        let r = if op.read_only && !ordered_reads {
            client.invoke_read_only_timed(op.bytes).await
        } else {
            client.invoke_timed(op.bytes).await
        };
        match r {
            Ok(t) => stats.record_timed(started, t.first_reply),
            Err(e) => stats.note_error(&e),
        }
    }
}

/// Sends the pacer's arrivals (`pacer.rs`), each on the client it names.
async fn open_loop(
    clients: Vec<Arc<chorus_client::Client>>,
    mut gens: Vec<Generator>,
    mut arrivals: tokio::sync::mpsc::Receiver<crate::pacer::Arrival>,
    stats: Arc<LoadStats>,
    ordered_reads: bool,
    shed: Arc<AtomicU64>,
) {
    let mut rngs: Vec<_> = (0..clients.len())
        .map(|i| rand_chacha::ChaCha8Rng::seed_from_u64(i as u64))
        .collect();
    let outstanding: Vec<Arc<AtomicU64>> = (0..clients.len()).map(|_| Arc::new(AtomicU64::new(0))).collect();
    while let Some(arrival) = arrivals.recv().await {
        if stats.stop.load(Ordering::Relaxed) {
            return;
        }
        let i = arrival.client;
        stats.record_pacing(arrival.scheduled);
        if outstanding[i].load(Ordering::Relaxed) >= OPEN_LOOP_OUTSTANDING_MAX {
            shed.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let op = gens[i].next(&mut rngs[i]);
        // Latency counts from the intended send time, so a slow system cannot
        // hide queueing (no coordinated omission).
        let scheduled = arrival.scheduled;
        let c = clients[i].clone();
        let s = stats.clone();
        let o = outstanding[i].clone();
        o.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let r = if op.read_only && !ordered_reads {
                c.invoke_read_only_timed(op.bytes).await
            } else {
                c.invoke_timed(op.bytes).await
            };
            match r {
                Ok(t) => s.record_timed(scheduled, t.first_reply),
                Err(e) => s.note_error(&e),
            }
            o.fetch_sub(1, Ordering::Relaxed);
        });
    }
}
