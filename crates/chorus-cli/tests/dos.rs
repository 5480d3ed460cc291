//! Issue 16 findings 1 and 2 against real replica processes, on 127.0.0.1
//! only: while strangers hold idle connections on every client port and one
//! process floods replica 0 with replayed hellos, new clients connect and
//! commit, a restarted replica brings all its pillar links up within
//! seconds, and replica 0 spends little CPU on the flood.
//!
//! The attack is bounded: `IDLE_PER_PORT` sockets per client port and
//! `FLOOD_TASKS` flooding tasks, for as long as the test runs (< 60 s).

mod common;

use chorus_apps::kv_op::KvOp;
use chorus_core::{ClientId, OrderingMode};
use chorus_net::PeerRole;
use common::TestCluster;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Idle sockets per client port, reopened as soon as the replica closes them
/// (more than the 64 shared handshake slots that the issue exhausted).
const IDLE_PER_PORT: usize = 100;
/// Concurrent tasks replaying a recorded hello against replica 0.
const FLOOD_TASKS: usize = 4;
/// Replica 0's extra CPU per replayed hello (above its idle baseline, which
/// includes the idle-socket churn and the clients): the flood must be refused
/// before any public-key work. Before the fix each one cost two X25519
/// operations and an Ed25519 signature, ~150 µs.
const CPU_PER_HELLO_BOUND: Duration = Duration::from_micros(80);
/// And in total, whatever rate the flood reaches on this machine.
const CPU_BOUND: f64 = 1.5;
/// A restarted replica must have all its pillar links up within this.
const LINKS_WITHIN: Duration = Duration::from_secs(10);

/// Keep `IDLE_PER_PORT` idle connections open to `port` until `stop`.
fn idle_sockets(port: u16, stop: Arc<AtomicBool>) {
    for _ in 0..IDLE_PER_PORT {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let mut buf = [0u8; 64];
                // Say nothing; the replica closes us at its hello deadline.
                let _ = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await;
            }
        });
    }
}

/// Replay a recorded hello naming client 0 (which always exists) with a
/// made-up proof, as fast as the replica answers, until `stop`.
fn hello_flood(port: u16, stop: Arc<AtomicBool>, attempts: Arc<AtomicU64>) {
    let hello = chorus_net::recorded_hello(PeerRole::Client { id: ClientId(0) });
    let mut msg = (hello.len() as u32).to_be_bytes().to_vec();
    msg.extend_from_slice(&hello);
    msg.extend_from_slice(&16u32.to_be_bytes());
    msg.extend_from_slice(&[0xab; 16]);
    let msg = Arc::new(msg);
    for _ in 0..FLOOD_TASKS {
        let (stop, attempts, msg) = (stop.clone(), attempts.clone(), msg.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                if s.write_all(&msg).await.is_ok() {
                    let mut sink = Vec::new();
                    let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut sink)).await;
                    attempts.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
}

#[test]
fn strangers_cannot_stop_clients_or_peer_links_or_burn_replica_cpu() {
    let t0 = Instant::now();
    let mut c = TestCluster::new_in_range(2_000, 10, OrderingMode::Cop, 2, 4, |_| {});
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Replica 0's CPU before the attack (status traffic only).
    let (b0, bt) = (c.cpu_seconds(0).unwrap(), Instant::now());
    std::thread::sleep(Duration::from_millis(1500));
    let baseline = (c.cpu_seconds(0).unwrap() - b0) / bt.elapsed().as_secs_f64();
    let stop = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(AtomicU64::new(0));
    let _guard = rt.enter();
    for r in &c.config.replicas {
        idle_sockets(r.client_port, stop.clone());
    }
    hello_flood(c.config.replicas[0].client_port, stop.clone(), attempts.clone());

    // Replica 3 restarts under attack and must reconnect every pillar link.
    c.kill(3);
    c.start(3);
    let restarted = Instant::now();
    let pillar_links = 2 * 3;
    loop {
        let links = c
            .status(3)
            .and_then(|s| s["peer_connections"].as_u64())
            .unwrap_or(0);
        if links == pillar_links {
            break;
        }
        assert!(
            restarted.elapsed() < LINKS_WITHIN,
            "restarted replica 3 has {links} of {pillar_links} pillar links after {:?}; log:\n{}",
            restarted.elapsed(),
            c.log(3)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let links_up = restarted.elapsed();

    // Fresh clients connect (a quorum within the default 5 s) and commit.
    let cpu_start = c.cpu_seconds(0).unwrap();
    let (attempts_start, wall) = (attempts.load(Ordering::Relaxed), Instant::now());
    for round in 0..4 {
        rt.block_on(async {
            let client = c.client(round % 4).await;
            for i in 0..10 {
                client
                    .invoke(KvOp::put(format!("dos-{round}-{i}"), "v"))
                    .await
                    .unwrap_or_else(|e| panic!("put {round}/{i} failed under attack: {e}"));
            }
        });
    }
    // Keep the flood on for a measurement window of at least 5 s.
    while wall.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let secs = wall.elapsed().as_secs_f64();
    let cpu = (c.cpu_seconds(0).unwrap() - cpu_start) / secs;
    let flooded = attempts.load(Ordering::Relaxed) - attempts_start;
    stop.store(true, Ordering::Relaxed);
    let rate = flooded as f64 / secs;
    let per_hello = Duration::from_secs_f64(((cpu - baseline).max(0.0) / rate.max(1.0)).min(1.0));
    eprintln!(
        "links up after {links_up:?}; replica 0 at {cpu:.2} CPU-s/s (idle {baseline:.2}) under {rate:.0} \
         replayed hellos/s = {per_hello:?} per hello; test took {:?}",
        t0.elapsed()
    );
    assert!(flooded > 100, "the flood must actually run ({flooded} attempts)");
    assert!(
        per_hello < CPU_PER_HELLO_BOUND,
        "replica 0 spent {per_hello:?} per replayed hello"
    );
    assert!(cpu < CPU_BOUND, "replica 0 used {cpu:.2} CPU-s/s under the flood");
    drop(_guard);
    rt.shutdown_timeout(Duration::from_secs(1));
}

/// Issue 16 finding 4: a replica's key does not buy unbounded connections to
/// another replica's pillar: beyond `PEER_CONNS_MAX` (2) the oldest is closed.
#[test]
fn a_peer_holds_at_most_two_connections_per_pillar() {
    let c = TestCluster::new_in_range(2_000, 10, OrderingMode::Cop, 2, 1, |_| {});
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let text = std::fs::read_to_string(c.path().join("keys/replica-3.key")).unwrap();
    let key: chorus_node::node_config::KeyFile = toml::from_str(&text).unwrap();
    let r3 = key.to_identity().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let expected = chorus_net::Expected::replica_pillar(&c.config, chorus_core::ReplicaId(0), 0).unwrap();
        let me = PeerRole::Replica {
            id: chorus_core::ReplicaId(3),
            pillar: 0,
        };
        let limits = chorus_net::NetLimits::from_config(&c.config);
        let counters = Arc::new(chorus_net::Counters::default());
        let port = c.config.replicas[0].peer_base_port;
        let mut readers = Vec::new();
        for _ in 0..6 {
            let s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let (_, rd, wr) = chorus_net::connect(s, &r3, me, &expected, &limits, &counters)
                .await
                .expect("replica 3's key authenticates");
            readers.push((rd, wr));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut open = 0;
        for (rd, _) in &mut readers {
            // An evicted connection reads EOF (or an error) at once; a kept one blocks.
            match tokio::time::timeout(Duration::from_millis(500), rd.next()).await {
                Err(_) => open += 1,
                Ok(r) => assert!(
                    !matches!(r, Ok(Some(_))),
                    "replicas send nothing on inbound links"
                ),
            }
        }
        assert!(
            open <= 2,
            "{open} of 6 connections from one peer pillar are still open"
        );
        // The newest ones are the ones kept.
        let (rd, _) = readers.last_mut().unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(200), rd.next())
            .await
            .is_err());
    });
}
