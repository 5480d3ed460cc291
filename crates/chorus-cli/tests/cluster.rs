//! Integration tests with real replica processes on loopback (issue: "A real replica").

mod common;

use bytes::Bytes;
use chorus_apps::kv_op::KvOp;
use chorus_client::{Client, ClientOptions, ClientStats};
use chorus_core::{ClientId, Identity, OrderingMode, PrepareAuth};
use common::{rt, TestCluster};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

/// Write `count` keys from `clients` concurrent clients; return what was acknowledged.
async fn write_keys(c: &TestCluster, clients: usize, count: usize, prefix: &str) -> HashMap<Bytes, Bytes> {
    write_keys_with(c, clients, count, prefix, ClientOptions::default()).await
}

/// `write_keys` with these client options.
async fn write_keys_with(
    c: &TestCluster,
    clients: usize,
    count: usize,
    prefix: &str,
    opts: ClientOptions,
) -> HashMap<Bytes, Bytes> {
    let mut connected = Vec::new();
    for ci in 0..clients {
        connected.push(Arc::new(c.client_with(ci, opts.clone()).await));
    }
    write_keys_on(&connected, count, prefix).await
}

/// `count` keys from these clients, 8 in flight each.
async fn write_keys_on(clients: &[Arc<Client>], count: usize, prefix: &str) -> HashMap<Bytes, Bytes> {
    let mut tasks = Vec::new();
    for (ci, client) in clients.iter().enumerate() {
        let per_client = count / clients.len();
        for lane in 0..8 {
            let client = client.clone();
            let prefix = prefix.to_string();
            tasks.push(tokio::spawn(async move {
                let mut acked = HashMap::new();
                for i in (lane..per_client).step_by(8) {
                    let k = Bytes::from(format!("{prefix}-{ci}-{i}"));
                    let v = Bytes::from(format!("v{i}"));
                    if client.invoke(KvOp::put(k.clone(), v.clone())).await.is_ok() {
                        acked.insert(k, v);
                    }
                }
                acked
            }));
        }
    }
    let mut all = HashMap::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

#[test]
fn four_replicas_serve_thousands_of_operations_and_agree() {
    let c = TestCluster::new(OrderingMode::Cop, 2, 4, |_| {});
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = rt();
    let acked = rt.block_on(write_keys(&c, 4, 2_000, "bulk"));
    assert_eq!(
        acked.len(),
        2_000,
        "every write must be acknowledged on a healthy cluster"
    );
    rt.block_on(common::check_readable(&c, 0, &acked, 1));
    let (executed, digest) = c.wait_converged(Duration::from_secs(20));
    assert!(executed > 0);
    // The typed status a client library user sees says the same.
    let status = rt.block_on(async { c.client(0).await.cluster_status(Duration::from_secs(3)).await });
    assert_eq!(status.answered(), 4, "{:?}", status.replicas);
    assert!(status.digests_agree());
    assert_eq!(status.max_executed(), Some(executed));
    assert!(status
        .reports()
        .all(|r| r.state_digest == digest && r.mode == "cop" && r.lanes == 2));
}

fn kill_restart(victim: usize) {
    kill_restart_with(victim, PrepareAuth::Signature);
}

fn kill_restart_with(victim: usize, prepare_auth: PrepareAuth) {
    let mut c = TestCluster::new(OrderingMode::Cop, 2, 4, |p| p.prepare_auth = prepare_auth);
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = rt();
    let mut acked = rt.block_on(write_keys(&c, 2, 400, "before"));
    c.kill(victim);
    acked.extend(rt.block_on(write_keys(&c, 2, 400, "during")));
    assert!(
        acked.len() >= 700,
        "the cluster must keep serving with one replica down, got {}",
        acked.len()
    );
    c.start(victim);
    c.wait_up(&[victim], Duration::from_secs(20));
    acked.extend(rt.block_on(write_keys(&c, 2, 200, "after")));
    c.wait_converged(Duration::from_secs(60));
    rt.block_on(common::check_readable(&c, 0, &acked, 1));
}

#[test]
fn sigkill_of_a_backup_then_restart_converges_and_loses_nothing() {
    kill_restart(3);
}

#[test]
fn sigkill_of_the_primary_then_restart_converges_and_loses_nothing() {
    // Replica 0 leads view 0 of every lane's first slot.
    kill_restart(0);
}

/// MAC-only prepares (docs/decisions.md): the primary's SIGKILL forces view
/// changes decided from unproven claims; nothing acknowledged is lost and
/// the replicas converge.
#[test]
fn with_mac_prepares_sigkill_of_the_primary_then_restart_converges_and_loses_nothing() {
    kill_restart_with(0, PrepareAuth::Mac);
}

/// PBFT §4.1 (`ClientOptions::leader_first`): clients send each request to
/// the primary alone. Its SIGKILL leaves their requests unanswered until
/// they retransmit to every replica; the backups change the view, the
/// clients learn it from f + 1 status reports and send to the new primary,
/// and nothing acknowledged is lost.
#[test]
fn leader_first_clients_outlive_the_primarys_sigkill_and_lose_nothing() {
    let mut c = TestCluster::new(OrderingMode::Pbft, 1, 4, |_| {});
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = rt();
    let opts = ClientOptions {
        leader_first: true,
        ..ClientOptions::default()
    };
    let clients: Vec<Arc<Client>> = rt.block_on(async {
        let mut v = Vec::new();
        for ci in 0..2 {
            v.push(Arc::new(c.client_with(ci, opts.clone()).await));
        }
        v
    });
    let total = |f: fn(&ClientStats) -> u64| clients.iter().map(|c| f(&c.stats())).sum::<u64>();
    let mut acked = rt.block_on(write_keys_on(&clients, 200, "before"));
    assert_eq!(acked.len(), 200);
    // All but each client's first ones (8 in flight each): sent to every
    // replica while it learns the view from f + 1 replicas, while its
    // probe of the primary is out, and in slow start (the primary earns
    // two requests alone per one accepted): 143 of 200 when measured.
    let alone = total(|s| s.sent_to_primary);
    assert!(
        (120..=200).contains(&alone),
        "the primary alone got the requests: {alone} of 200"
    );
    assert_eq!(total(|s| s.primary_silences), 0);
    c.kill(0);
    acked.extend(rt.block_on(write_keys_on(&clients, 400, "during")));
    assert!(
        acked.len() >= 590,
        "the cluster must keep serving leader-first clients with the primary down, got {}",
        acked.len()
    );
    assert!(total(|s| s.primary_silences) >= 1, "the dead primary was noticed");
    // Past the cooling-off period, the clients ask for the view when a
    // probe or a reply gives them the occasion, learn it, and the new
    // primary alone gets the next requests (a probe to the old one may
    // still be out for the first few; its late silence does not count).
    std::thread::sleep(Duration::from_millis(1_500));
    let (sent, silences) = (total(|s| s.sent_to_primary), total(|s| s.primary_silences));
    acked.extend(rt.block_on(write_keys_on(&clients, 200, "settled")));
    let stats: Vec<ClientStats> = clients.iter().map(|c| c.stats()).collect();
    // Each client's first few go to every replica until the probe is
    // answered and in slow start (8 in flight each): 149 of 200 measured.
    assert!(
        total(|s| s.sent_to_primary) - sent >= 120,
        "the clients found the new primary: {sent} before, {stats:?}"
    );
    assert_eq!(
        total(|s| s.primary_silences),
        silences,
        "and it answers: {stats:?}"
    );
    c.start(0);
    c.wait_up(&[0], Duration::from_secs(20));
    acked.extend(rt.block_on(write_keys_on(&clients, 100, "after")));
    c.wait_converged(Duration::from_secs(60));
    rt.block_on(common::check_readable(&c, 0, &acked, 1));
}

#[test]
fn a_peer_with_the_wrong_key_is_refused_and_random_bytes_close_only_that_connection() {
    let c = TestCluster::new(OrderingMode::Cop, 2, 2, |_| {});
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = rt();
    rt.block_on(async {
        // An impostor claiming to be replica 1 with a key the configuration does not list.
        let impostor = Identity::from_seed(b"impostor");
        let stream = tokio::net::TcpStream::connect(c.replica_addr(0, 0))
            .await
            .unwrap();
        let expected = chorus_net::Expected::replica_pillar(&c.config, chorus_core::ReplicaId(0), 0).unwrap();
        let r = chorus_net::connect(
            stream,
            &impostor,
            chorus_net::PeerRole::Replica {
                id: chorus_core::ReplicaId(1),
                pillar: 0,
            },
            &expected,
            &chorus_net::NetLimits::from_config(&c.config),
            &Arc::new(chorus_net::Counters::default()),
        )
        .await;
        if let Ok((_, mut reader, _)) = r {
            // The dialler may finish its half; the acceptor must then close the connection.
            let next = tokio::time::timeout(Duration::from_secs(5), reader.next()).await;
            assert!(
                !matches!(next, Ok(Ok(Some(_)))),
                "an impostor must not receive frames"
            );
        }
        // A client with a key not in the config.
        let stream = tokio::net::TcpStream::connect(c.client_addr(1)).await.unwrap();
        let expected =
            chorus_net::Expected::replica_any_pillar(&c.config, chorus_core::ReplicaId(1)).unwrap();
        let r = chorus_net::connect(
            stream,
            &impostor,
            chorus_net::PeerRole::Client { id: ClientId(0) },
            &expected,
            &chorus_net::NetLimits::from_config(&c.config),
            &Arc::new(chorus_net::Counters::default()),
        )
        .await;
        if let Ok((_, mut reader, _)) = r {
            let next = tokio::time::timeout(Duration::from_secs(5), reader.next()).await;
            assert!(!matches!(next, Ok(Ok(Some(_)))));
        }
    });
    // Random bytes into every replica and client port.
    let mut junk = vec![0u8; 4096];
    let mut x: u32 = 12345;
    for b in junk.iter_mut() {
        x = x.wrapping_mul(1103515245).wrapping_add(12345);
        *b = (x >> 16) as u8;
    }
    for r in 0..4 {
        for addr in [c.replica_addr(r, 0), c.replica_addr(r, 1), c.client_addr(r)] {
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
            let _ = s.write_all(&junk);
            let mut buf = [0u8; 64];
            // The replica closes this connection (EOF or reset), it does not answer.
            let n = s.read(&mut buf).unwrap_or(0);
            assert_eq!(n, 0, "junk on {addr} must not be answered");
        }
    }
    // Everyone else is still served.
    let acked = rt.block_on(write_keys(&c, 2, 100, "after-junk"));
    assert_eq!(acked.len(), 100);
    for r in 0..4 {
        assert!(c.status(r).is_some(), "replica {r} must survive junk input");
    }
}

#[test]
fn a_dead_backup_costs_the_leader_bounded_memory() {
    // Found 2026-11-27 (BENCHMARKS.md "a dead peer's queue"): the leader's
    // link to a killed backup queued up to 8 192 frames whatever their size,
    // most of them pre-prepares of ~100 KB, and the leader grew past 1 GiB.
    // Here 1 200 puts of 192 KB send ~230 MB towards the dead backup; its
    // queue may hold ~43 MiB (`frame_queue.rs`, 1 pillar, n = 4).
    let mut c = TestCluster::new(OrderingMode::Cop, 1, 4, |p| p.max_op_bytes = 256 << 10);
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    c.kill(3);
    let rt = rt();
    let acked = rt.block_on(async {
        let value = Bytes::from(vec![b'v'; 192 << 10]);
        let mut tasks = Vec::new();
        for ci in 0..4 {
            let client = Arc::new(c.client(ci).await);
            for lane in 0..4 {
                let (client, value) = (client.clone(), value.clone());
                tasks.push(tokio::spawn(async move {
                    let mut ok = 0;
                    for _ in 0..75 {
                        // Overwrites: the state stays ~3 MB, the traffic is not.
                        let k = format!("big-{ci}-{lane}");
                        if client.invoke(KvOp::put(k, value.clone())).await.is_ok() {
                            ok += 1;
                        }
                    }
                    ok
                }));
            }
        }
        let mut ok = 0;
        for t in tasks {
            ok += t.await.unwrap();
        }
        ok
    });
    assert_eq!(acked, 1_200, "every put completes with one backup down");
    let leader = c.peak_rss_mib(0).expect("leader alive");
    let backup = c.peak_rss_mib(2).expect("backup alive");
    eprintln!("peak RSS: leader {leader:.0} MiB, backup {backup:.0} MiB");
    assert!(
        leader < backup + 150.0,
        "the leader kept what it queued for the dead backup: {leader:.0} MiB vs a backup's {backup:.0} MiB"
    );
}

#[test]
fn a_client_flood_gets_back_pressure_not_unbounded_memory() {
    // Tiny pool and per-client share so the flood hits the limits: five
    // clients with 16 requests in flight each against a pool of 32.
    let c = TestCluster::new(OrderingMode::Cop, 2, 6, |p| {
        p.pool_max_requests = 32;
        p.pool_max_per_client = 16;
    });
    c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
    let rt = rt();
    let outcome = rt.block_on(async {
        let mut clients = Vec::new();
        for k in 1..6 {
            clients.push(Arc::new(c.client(k).await));
        }
        let mut tasks = Vec::new();
        for i in 0..2_000u32 {
            let client = clients[i as usize % clients.len()].clone();
            tasks.push(tokio::spawn(async move {
                client
                    .invoke(KvOp::put(format!("flood-{i}"), "x"))
                    .await
                    .map_err(|e| e.to_string())
            }));
        }
        let mut ok = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => ok += 1,
                Err(e) => eprintln!("flood request failed: {e}"),
            }
        }
        let busy: u64 = clients.iter().map(|c| c.stats().busy_backoffs).sum();
        eprintln!("flood: {ok} of 2000 succeeded, {busy} busy back-offs");
        (ok, busy)
    });
    // The pool said "busy" (back-pressure) and the clients backed off; no
    // request was lost or left unanswered.
    assert!(outcome.1 > 0, "the flood never hit the pool limit");
    assert_eq!(outcome.0, 2000, "every flood request completes after back-off");
    // Back-pressure may slow the flood down, but it completes and every replica stays up
    // with bounded memory.
    for r in 0..4 {
        let s = c.status(r).expect("replica alive after a flood");
        assert!(s["core"]["pool_len"].as_u64().unwrap() <= 64);
        let rss = c.peak_rss_mib(r).expect("replica pid");
        assert!(rss < 1024.0, "replica {r} peak RSS {rss} MiB under a flood");
    }
}

/// A client's requests read in the same burst as the frame that ends its
/// connection (here an undecodable one) are still ordered: the pillar
/// hands on what it had read before it closes. Found by review (800fedb):
/// the burst was dropped with the connection, so requests that had passed
/// every check vanished without a trace. Checked with the core ordering
/// (one pillar) and with the lanes on their pillars (two).
#[test]
fn requests_read_just_before_a_connection_ends_are_still_ordered() {
    use chorus_core::{ClientMsg, ReplicaId, RequestSeq};
    const WRITES: u64 = 12;
    for pillars in [1, 2] {
        let c = TestCluster::new(OrderingMode::Cop, pillars, 2, |_| {});
        c.wait_up(&[0, 1, 2, 3], Duration::from_secs(20));
        let rt = rt();
        let key = |i: u64| Bytes::from(format!("burst-{pillars}-{i}"));
        rt.block_on(async {
            let me = c.client_identity(0);
            let auth = chorus_client::RequestAuth::new(&c.config, ClientId(0), me.clone());
            let limits = chorus_net::NetLimits::from_config(&c.config);
            let counters = Arc::new(chorus_net::Counters::default());
            let mut readers = Vec::new();
            for r in 0..4 {
                let stream = tokio::net::TcpStream::connect(c.client_addr(r)).await.unwrap();
                let expected =
                    chorus_net::Expected::replica_any_pillar(&c.config, ReplicaId(r as u32)).unwrap();
                let (_, reader, mut writer) = chorus_net::connect(
                    stream,
                    &me,
                    chorus_net::PeerRole::Client { id: ClientId(0) },
                    &expected,
                    &limits,
                    &counters,
                )
                .await
                .expect("client 0's key authenticates");
                // One write: the requests, then a frame that authenticates
                // but does not decode, which closes the connection.
                for i in 1..=WRITES {
                    let req = auth.request(RequestSeq(i), false, 0, KvOp::put(key(i), Bytes::from("v")));
                    writer
                        .feed(&chorus_core::encode(&ClientMsg::Request(req)))
                        .await
                        .unwrap();
                }
                writer.feed(&[0xff; 40]).await.unwrap();
                writer.flush().await.unwrap();
                readers.push((reader, writer));
            }
            for (mut reader, _writer) in readers {
                // The replica closes the connection (it may send replies first).
                let closed = tokio::time::timeout(Duration::from_secs(10), async {
                    while let Ok(Some(_)) = reader.next().await {}
                })
                .await;
                assert!(closed.is_ok(), "the undecodable frame must close the connection");
            }
        });
        let acked: HashMap<Bytes, Bytes> = (1..=WRITES).map(|i| (key(i), Bytes::from("v"))).collect();
        rt.block_on(common::check_readable(&c, 1, &acked, 1));
    }
}
