//! Jepsen-style chaos on real processes (issue 9, docs/chaos.md): four
//! `chorus replica` processes in network namespaces this test creates,
//! every replica-to-replica connection through toxiproxy, while a client
//! workload records its history; faults are delay, loss, partitions that
//! heal, SIGKILL and SIGSTOP of the primary and of backups, and a backup
//! paused for a long time. Afterwards: no acknowledged write lost, every
//! key's history linearizable, equal state digests.
//!
//! Needs root, `ip netns` and a toxiproxy server (`$CHORUS_TOXIPROXY` or
//! `toxiproxy-server` on `PATH`); skips with a message otherwise. The full
//! run is `#[ignore]`d (use `scripts/chaos.sh`); the smoke run takes under
//! a minute and runs by default only where all of that is present.

mod cluster;
mod lincheck;
mod net;
mod toxi;
mod workload;

use chorus_client::{Client, ClientOptions};
use chorus_core::OrderingMode;
use cluster::{status, Cluster, N};
use net::Lab;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toxi::Toxiproxy;
use workload::{Workload, F};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// 40 ± 40 ms latency on every replica-to-replica link, both directions.
    Delay,
    /// Loss bursts: on three random links at a time, bytes are dropped for
    /// 200 ms and then the connection is closed (toxiproxy `timeout`).
    Loss,
    PartitionBackup,
    PartitionPrimary,
    KillBackup,
    KillPrimary,
    StopPrimary,
    StopBackup,
    /// SIGSTOP of a backup for `Plan::long_pause`, measuring the others' memory.
    LongStopBackup,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Delay => "delay 40±40 ms (all links)",
            Fault::Loss => "loss bursts (3 links at a time)",
            Fault::PartitionBackup => "partition backup (link down)",
            Fault::PartitionPrimary => "partition primary (link down)",
            Fault::KillBackup => "SIGKILL backup, restart",
            Fault::KillPrimary => "SIGKILL primary, restart",
            Fault::StopPrimary => "SIGSTOP primary, SIGCONT",
            Fault::StopBackup => "SIGSTOP backup, SIGCONT",
            Fault::LongStopBackup => "SIGSTOP backup (long), SIGCONT",
        }
    }
}

struct Plan {
    name: &'static str,
    mode: OrderingMode,
    warmup: Duration,
    fault_len: Duration,
    long_pause: Duration,
    faults: Vec<Fault>,
    clients: usize,
    workers_per_client: usize,
    /// How long a victim may take to catch up after heal before the run fails.
    recovery_limit: Duration,
}

fn mode_from_env() -> OrderingMode {
    match std::env::var("CHORUS_CHAOS_MODE").as_deref() {
        Ok("cop") => OrderingMode::Cop,
        Ok("sarek") => OrderingMode::Sarek,
        _ => OrderingMode::Pbft,
    }
}

impl Plan {
    fn full() -> Plan {
        Plan {
            name: "full",
            mode: mode_from_env(),
            warmup: Duration::from_secs(5),
            fault_len: Duration::from_secs(10),
            long_pause: Duration::from_secs(60),
            faults: vec![
                Fault::Delay,
                Fault::Loss,
                Fault::PartitionBackup,
                Fault::PartitionPrimary,
                Fault::KillBackup,
                Fault::KillPrimary,
                Fault::StopPrimary,
                Fault::StopBackup,
                Fault::LongStopBackup,
            ],
            clients: 4,
            workers_per_client: 4,
            recovery_limit: Duration::from_secs(30),
        }
    }

    fn smoke() -> Plan {
        Plan {
            name: "smoke",
            mode: mode_from_env(),
            warmup: Duration::from_secs(2),
            fault_len: Duration::from_secs(3),
            long_pause: Duration::from_secs(5),
            faults: vec![
                Fault::Delay,
                Fault::PartitionBackup,
                Fault::KillPrimary,
                Fault::LongStopBackup,
            ],
            clients: 2,
            workers_per_client: 4,
            recovery_limit: Duration::from_secs(15),
        }
    }
}

/// Why this machine cannot run the chaos test, if it cannot.
fn preflight() -> Result<std::path::PathBuf, String> {
    // The proxy first: without it the probe need not touch the network at all.
    let bin = toxi::find_server().ok_or_else(|| {
        "no toxiproxy server: set CHORUS_TOXIPROXY or put toxiproxy-server on PATH \
         (scripts/chaos.sh installs it with `go install`)"
            .to_string()
    })?;
    net::available()?;
    Ok(bin)
}

#[test]
#[ignore = "needs root and network namespaces, ~5 minutes: scripts/chaos.sh"]
fn chaos_full() {
    run(Plan::full());
}

#[test]
fn chaos_smoke() {
    run(Plan::smoke());
}

fn run(plan: Plan) {
    let toxi_bin = match preflight() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("SKIPPED chaos {}: {why}", plan.name);
            return;
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::Builder::new()
        .prefix("chorus-chaos-")
        .tempdir()
        .unwrap();
    let (report, ok) = {
        // Declaration order is teardown order reversed: replicas and proxy
        // stop before the namespaces and the blackhole route go.
        let lab = Lab::new(N).unwrap_or_else(|e| panic!("setting up namespaces: {e}"));
        let seed: u64 = std::env::var("CHORUS_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| rand::thread_rng().gen());
        let toxi = Toxiproxy::start(&toxi_bin, &dir.path().join("toxiproxy.log"), seed).unwrap();
        let mut cluster = Cluster::new(&lab, dir.path(), plan.mode, plan.clients + 5);
        cluster.create_proxies(&lab, &toxi);
        rt.block_on(chaos(&plan, &lab, &toxi, &mut cluster, seed))
    };
    println!("{report}");
    if let Some(path) = std::env::var_os("CHORUS_CHAOS_REPORT") {
        std::fs::write(&path, &report).unwrap();
    }
    if !ok || std::env::var_os("CHORUS_CHAOS_KEEP").is_some() {
        let kept = dir.keep();
        eprintln!(
            "chaos {}: logs, history.jsonl and toxiproxy.log in {}",
            plan.name,
            kept.display()
        );
        assert!(ok, "chaos {} found problems (see the report above)", plan.name);
    }
}

struct Row {
    fault: Fault,
    victim: String,
    secs: f64,
    commit_again_ms: Option<f64>,
    caught_up_ms: Option<f64>,
    gap_ms: f64,
    note: String,
}

fn opts() -> ClientOptions {
    ClientOptions {
        request_timeout: Duration::from_secs(10),
        connect_timeout: Some(Duration::from_secs(20)),
        // Clients send to the primary first (`ClientOptions::leader_first`,
        // PBFT §4.1, the default); `CHORUS_CHAOS_BROADCAST=1`: every request
        // to every replica.
        leader_first: std::env::var_os("CHORUS_CHAOS_BROADCAST").is_none(),
        ..ClientOptions::default()
    }
}

async fn statuses(probe: &Client) -> Vec<Option<chorus_node::status::StatusReport>> {
    let w = Duration::from_millis(800);
    let (a, b, c, d) = tokio::join!(
        status(probe, 0, w),
        status(probe, 1, w),
        status(probe, 2, w),
        status(probe, 3, w)
    );
    vec![a, b, c, d]
}

/// Leader of lane 0 in the highest view a replica reports (fixed rotation: view mod n).
async fn primary(probe: &Client) -> usize {
    let view = statuses(probe)
        .await
        .iter()
        .flatten()
        .filter_map(|s| s.core.views.first().copied())
        .max()
        .unwrap_or(0);
    (view % N as u64) as usize
}

async fn chaos(plan: &Plan, lab: &Lab, toxi: &Toxiproxy, cluster: &mut Cluster, seed: u64) -> (String, bool) {
    let started = Instant::now();
    for i in 0..N {
        cluster.start(i);
    }
    let probe_id = plan.clients;
    let probe = cluster.client(probe_id, opts()).await;
    let up = Instant::now() + Duration::from_secs(30);
    while statuses(&probe).await.iter().any(|s| s.is_none()) {
        assert!(
            Instant::now() < up,
            "replicas did not come up:\n{}",
            cluster.log_tail(0, 20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let w = Workload::new(Instant::now());
    let mut workers = Vec::new();
    for c in 0..plan.clients {
        let client = Arc::new(cluster.client(c, opts()).await);
        for k in 0..plan.workers_per_client {
            let process = (c * 100 + k) as u64;
            workers.push(tokio::spawn(w.clone().worker(
                client.clone(),
                process,
                seed ^ process,
            )));
        }
    }
    tokio::time::sleep(plan.warmup).await;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut rows = Vec::new();
    let mut findings = Vec::new();
    let mut rss_line = String::new();
    for (k, &fault) in plan.faults.iter().enumerate() {
        let p = primary(&probe).await;
        // Backups rotate so different replicas take the faults.
        let backup = (p + 1 + k % (N - 1)) % N;
        let t_start = w.now_us();
        let mut victims: Vec<usize> = Vec::new();
        let mut len = plan.fault_len;
        eprintln!(
            "[{:>6.1}s] fault: {} (primary r{p})",
            started.elapsed().as_secs_f64(),
            fault.name()
        );
        match fault {
            Fault::Delay => {
                let links = cluster.links();
                for &l in &links {
                    toxi.add_toxic(
                        &Cluster::proxy_name(l),
                        "delay",
                        "latency",
                        1.0,
                        serde_json::json!({"latency": 40, "jitter": 40}),
                    );
                }
                tokio::time::sleep(len).await;
                for &l in &links {
                    toxi.remove_toxic(&Cluster::proxy_name(l), "delay");
                }
                victims.extend(0..N);
            }
            Fault::Loss => {
                let links = cluster.links();
                let until = Instant::now() + len;
                while Instant::now() < until {
                    let hit: Vec<_> = rand::seq::index::sample(&mut rng, links.len(), 3)
                        .into_iter()
                        .map(|i| links[i])
                        .collect();
                    for &l in &hit {
                        toxi.add_toxic(
                            &Cluster::proxy_name(l),
                            "loss",
                            "timeout",
                            1.0,
                            serde_json::json!({"timeout": 200}),
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    for &l in &hit {
                        toxi.remove_toxic(&Cluster::proxy_name(l), "loss");
                    }
                }
                victims.extend(0..N);
            }
            Fault::PartitionBackup | Fault::PartitionPrimary => {
                let v = if fault == Fault::PartitionPrimary {
                    p
                } else {
                    backup
                };
                lab.set_link(v, false);
                tokio::time::sleep(len).await;
                lab.set_link(v, true);
                victims.push(v);
            }
            Fault::KillBackup | Fault::KillPrimary => {
                let v = if fault == Fault::KillPrimary { p } else { backup };
                cluster.kill(v);
                tokio::time::sleep(len).await;
                cluster.start(v);
                victims.push(v);
            }
            Fault::StopPrimary | Fault::StopBackup => {
                let v = if fault == Fault::StopPrimary { p } else { backup };
                cluster.signal(v, "STOP");
                tokio::time::sleep(len).await;
                cluster.signal(v, "CONT");
                victims.push(v);
            }
            Fault::LongStopBackup => {
                len = plan.long_pause;
                let v = backup;
                let others: Vec<usize> = (0..N).filter(|&i| i != v).collect();
                let before: Vec<f64> = others
                    .iter()
                    .map(|&i| cluster.rss_mib(i).unwrap_or(0.0))
                    .collect();
                let mut peak = before.clone();
                cluster.signal(v, "STOP");
                let until = Instant::now() + len;
                while Instant::now() < until {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    for (j, &i) in others.iter().enumerate() {
                        peak[j] = peak[j].max(cluster.rss_mib(i).unwrap_or(0.0));
                    }
                }
                let end: Vec<f64> = others
                    .iter()
                    .map(|&i| cluster.rss_mib(i).unwrap_or(0.0))
                    .collect();
                cluster.signal(v, "CONT");
                victims.push(v);
                let growth = (0..others.len()).map(|j| peak[j] - before[j]).fold(0.0, f64::max);
                let _ = write!(
                    rss_line,
                    "r{v} paused {} s; RSS of the others (MiB) before / peak / at resume: {}; largest growth {growth:.1} MiB",
                    len.as_secs(),
                    others
                        .iter()
                        .enumerate()
                        .map(|(j, i)| format!("r{i} {:.1} / {:.1} / {:.1}", before[j], peak[j], end[j]))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                // Bounded: the others may not keep everything the paused one missed.
                if growth > 256.0 {
                    findings.push(format!(
                        "RSS of a live replica grew {growth:.1} MiB while r{v} was paused"
                    ));
                }
            }
        }
        let t_heal = w.now_us();
        // Catch-up target: the highest position a replica that was not a victim had executed at heal.
        let now = statuses(&probe).await;
        let target = (0..N)
            .filter(|i| fault == Fault::Delay || fault == Fault::Loss || !victims.contains(i))
            .filter_map(|i| now[i].as_ref().map(|s| s.executed_seq))
            .max()
            .unwrap_or(0);
        let limit = Instant::now() + plan.recovery_limit;
        let mut caught_up = None;
        let mut commit_again = None;
        while Instant::now() < limit && (caught_up.is_none() || commit_again.is_none()) {
            if commit_again.is_none() {
                commit_again = w.first_fresh_write_ack(t_heal);
            }
            if caught_up.is_none() {
                let s = statuses(&probe).await;
                if victims
                    .iter()
                    .all(|&v| s[v].as_ref().is_some_and(|s| s.executed_seq >= target))
                {
                    caught_up = Some(w.now_us());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let end = caught_up
            .into_iter()
            .chain(commit_again)
            .max()
            .unwrap_or(w.now_us());
        let mut note = String::new();
        for (i, st) in cluster.exited() {
            let msg = format!("r{i} exited on its own ({st}) during {}", fault.name());
            eprintln!("{msg}\n{}", cluster.log_tail(i, 30));
            findings.push(msg.clone());
            note = msg;
            cluster.kill(i);
            cluster.start(i);
        }
        if caught_up.is_none() {
            findings.push(format!(
                "{}: r{victims:?} did not reach position {target} within {:?} of heal",
                fault.name(),
                plan.recovery_limit
            ));
        }
        if commit_again.is_none() {
            findings.push(format!(
                "{}: no write committed within {:?} of heal",
                fault.name(),
                plan.recovery_limit
            ));
        }
        let ms = |t: Option<u64>| t.map(|t| t.saturating_sub(t_heal) as f64 / 1000.0);
        rows.push(Row {
            fault,
            victim: if victims.len() == N {
                "all links".into()
            } else {
                victims
                    .iter()
                    .map(|v| format!("r{v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            },
            secs: len.as_secs_f64(),
            commit_again_ms: ms(commit_again),
            caught_up_ms: ms(caught_up),
            gap_ms: w.longest_gap_us(t_start, end) as f64 / 1000.0,
            note,
        });
    }

    // Quiesce: stop the workload, let every outstanding request finish or time out.
    w.stop.store(true, Ordering::Relaxed);
    for h in workers {
        let _ = tokio::time::timeout(Duration::from_secs(20), h).await;
    }
    // Final reads: one ordered read per key, through fresh clients, recorded in the history.
    let keys = w.keys();
    let mut readers = Vec::new();
    for r in 0..4 {
        let client = Arc::new(cluster.client(plan.clients + 1 + r, opts()).await);
        let mine: Vec<String> = keys.iter().skip(r).step_by(4).cloned().collect();
        let w = w.clone();
        readers.push(tokio::spawn(async move {
            let mut out = HashMap::new();
            let mut tasks = Vec::new();
            for chunk in mine.chunks(mine.len().div_ceil(8).max(1)) {
                let (client, w, chunk) = (client.clone(), w.clone(), chunk.to_vec());
                tasks.push(tokio::spawn(async move {
                    let mut out = HashMap::new();
                    for key in chunk {
                        let rec = w.op(&client, 9_000 + r as u64, key.clone(), F::Read(None)).await;
                        if rec.outcome == workload::Outcome::Ok {
                            if let F::Read(v) = rec.f {
                                out.insert(key, v);
                            }
                        }
                    }
                    out
                }));
            }
            for t in tasks {
                out.extend(t.await.unwrap());
            }
            out
        }));
    }
    let mut final_reads = HashMap::new();
    for r in readers {
        final_reads.extend(r.await.unwrap());
    }
    // Converged: every replica at the same position with the same digest.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last;
    loop {
        last = statuses(&probe).await;
        let keys: Vec<_> = last
            .iter()
            .flatten()
            .map(|s| (s.executed_seq, s.state_digest.clone()))
            .collect();
        if keys.len() == N && keys.windows(2).all(|x| x[0] == x[1]) {
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Liveness: a correct replica left in another view cannot take part in the next view change
    // with the others (issue 9's "same view at the end" checker, here on real processes).
    let views_deadline = Instant::now() + Duration::from_secs(10);
    let views_equal = loop {
        let views: Vec<_> = last
            .iter()
            .map(|s| s.as_ref().map(|s| s.core.views.clone()))
            .collect();
        if views.iter().all(|v| v.is_some()) && views.windows(2).all(|x| x[0] == x[1]) {
            break true;
        }
        if Instant::now() > views_deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        last = statuses(&probe).await;
    };
    if !views_equal {
        findings.push("replicas ended in different views (see the final rows)".into());
    }
    let digests: Vec<_> = last
        .iter()
        .map(|s| s.as_ref().map(|s| (s.executed_seq, s.state_digest.clone())))
        .collect();
    let digests_equal = digests.iter().all(|d| d.is_some()) && digests.windows(2).all(|x| x[0] == x[1]);
    let (footprint_line, mut grown) = footprint(cluster);
    findings.append(&mut grown);
    let history = w.history.lock().clone();
    let v = workload::check(&history, &final_reads);
    w.dump(&cluster.dir.join("history.jsonl"));

    let date = net::sh(&["date", "-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let mut r = String::new();
    let _ = writeln!(
        r,
        "### Chaos run `{}` — mode {:?}, n = {N}, {} clients × {} workers, seed {seed}, {}\n",
        plan.name,
        plan.mode,
        plan.clients,
        plan.workers_per_client,
        date.trim()
    );
    let _ = writeln!(r, "| fault | victim | length s | write commits again after heal ms | victim caught up after heal ms | longest gap without any ack ms | notes |");
    let _ = writeln!(r, "|---|---|---:|---:|---:|---:|---|");
    let f = |x: Option<f64>| x.map_or("**never**".to_string(), |x| format!("{x:.0}"));
    for row in &rows {
        let _ = writeln!(
            r,
            "| {} | {} | {:.0} | {} | {} | {:.0} | {} |",
            row.fault.name(),
            row.victim,
            row.secs,
            f(row.commit_again_ms),
            f(row.caught_up_ms),
            row.gap_ms,
            row.note
        );
    }
    let yes = |b: bool| if b { "yes" } else { "**NO**" };
    let _ = writeln!(r, "\n| check | result |\n|---|---|");
    let _ = writeln!(
        r,
        "| operations (ok / fail / info) | {} ({} / {} / {}) over {:.0} s |",
        v.ops,
        v.ok,
        v.fail,
        v.info,
        w.now_us() as f64 / 1e6
    );
    let _ = writeln!(
        r,
        "| acknowledged writes | {} on {} keys |",
        v.acked_writes, v.keys
    );
    let _ = writeln!(
        r,
        "| acknowledged writes lost | {} {:?} |",
        v.lost.len(),
        &v.lost[..v.lost.len().min(5)]
    );
    let _ = writeln!(r, "| keys whose final read failed | {} |", v.unread.len());
    let _ = writeln!(
        r,
        "| per-key histories linearizable | {} ({} not, {} undecided) {:?} |",
        yes(v.not_linearizable.is_empty() && v.unknown.is_empty()),
        v.not_linearizable.len(),
        v.unknown.len(),
        &v.not_linearizable[..v.not_linearizable.len().min(5)]
    );
    let _ = writeln!(r, "| state digests equal | {} |", yes(digests_equal));
    for (i, s) in last.iter().enumerate() {
        let _ = match s {
            Some(s) => writeln!(
                r,
                "| r{i} final | executed {} views {:?} digest {} |",
                s.executed_seq,
                s.core.views,
                &s.state_digest[..s.state_digest.len().min(16)]
            ),
            None => writeln!(r, "| r{i} final | unreachable |"),
        };
    }
    if !rss_line.is_empty() {
        let _ = writeln!(r, "| memory while a backup was paused | {rss_line} |");
    }
    let _ = writeln!(r, "| storage and memory at the end | {footprint_line} |");
    for x in &findings {
        let _ = writeln!(r, "| finding | {x} |");
    }
    let ok = v.lost.is_empty()
        && v.unread.is_empty()
        && v.not_linearizable.is_empty()
        && v.unknown.is_empty()
        && digests_equal
        && findings.is_empty();
    (r, ok)
}

/// Issue 8 finding 9: after every catch-up, each replica's storage must stay
/// proportional to the state plus the log since the stable checkpoint, and
/// its memory at the steady level: no replica may hold several times what
/// its peers hold. Returns the report line and the findings.
fn footprint(cluster: &Cluster) -> (String, Vec<String>) {
    let disk: Vec<f64> = (0..N).map(|i| cluster.storage_mib(i)).collect();
    let rss: Vec<f64> = (0..N).map(|i| cluster.rss_mib(i).unwrap_or(0.0)).collect();
    let mut findings = Vec::new();
    for i in 0..N {
        let others = |v: &[f64]| {
            let mut o: Vec<f64> = (0..N).filter(|&j| j != i).map(|j| v[j]).collect();
            o.sort_by(f64::total_cmp);
            o[o.len() / 2]
        };
        let (disk_bound, rss_bound) = (footprint_bound(others(&disk)), footprint_bound(others(&rss)));
        if disk[i] > disk_bound {
            findings.push(format!(
                "r{i} stores {:.1} MiB, over {disk_bound:.1} (3 x its peers' median + 16)",
                disk[i]
            ));
        }
        if rss[i] > rss_bound {
            findings.push(format!(
                "r{i} RSS is {:.1} MiB, over {rss_bound:.1} (3 x its peers' median + 16)",
                rss[i]
            ));
        }
    }
    let line = (0..N)
        .map(|i| format!("r{i} {:.1} MiB on disk, RSS {:.1} MiB", disk[i], rss[i]))
        .collect::<Vec<_>>()
        .join("; ");
    (line, findings)
}

/// A replica may hold up to 3 times its peers' median plus 16 MiB (a
/// checkpoint interval's log, a snapshot in transit) before it counts as
/// growth that never shrinks. On the hardened code the four replicas end
/// within 2x of each other (2.3-3.9 MiB on disk, 30-43 MiB RSS, 2026-11-25);
/// before the finding-9 fix one held 91.9 MiB against its peers' 13-17.
fn footprint_bound(peers_median: f64) -> f64 {
    3.0 * peers_median + 16.0
}
