//! Handshake: success in both directions, refusal of wrong keys, unknown or
//! unexpected roles, garbage and silence.

mod common;

use chorus_core::{ClientId, Identity, ReplicaId};
use chorus_net::{accept, connect, Expected, HandshakeRefusal, NetError, PeerRole};
use common::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn replica(id: u32, pillar: u32) -> PeerRole {
    PeerRole::Replica {
        id: ReplicaId(id),
        pillar,
    }
}

#[tokio::test]
async fn replica_pillars_authenticate_each_other_and_exchange_frames_both_ways() {
    let c = cluster();
    let (l, port) = listener().await;
    let (cfg, r1, lim) = (c.config.clone(), c.replicas[1].clone(), limits());
    let server_counters = counters();
    let sc = server_counters.clone();
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let (peer, mut rd, mut wr) = accept(s, &r1, replica(1, 1), &cfg, &lim, &sc).await.unwrap();
        assert_eq!(peer, replica(0, 1));
        assert_eq!(&rd.next().await.unwrap().unwrap()[..], b"ping");
        wr.send(b"pong").await.unwrap();
        // Several frames in one flush arrive separately and in order.
        for i in 0..10u8 {
            wr.feed(&[i; 3]).await.unwrap();
        }
        wr.flush().await.unwrap();
        assert!(
            rd.next().await.unwrap().is_none(),
            "clean EOF after the peer shuts down"
        );
    });
    let cc = counters();
    let expected = Expected::replica_pillar(&c.config, ReplicaId(1), 1).unwrap();
    let (peer, mut rd, mut wr) = connect(
        dial(port).await,
        &c.replicas[0],
        replica(0, 1),
        &expected,
        &limits(),
        &cc,
    )
    .await
    .unwrap();
    assert_eq!(peer, replica(1, 1));
    assert_eq!(rd.peer(), peer);
    wr.send(b"ping").await.unwrap();
    assert_eq!(&rd.next().await.unwrap().unwrap()[..], b"pong");
    for i in 0..10u8 {
        assert_eq!(&rd.next().await.unwrap().unwrap()[..], &[i; 3]);
    }
    wr.shutdown().await.unwrap();
    server.await.unwrap();
    let (s, k) = (server_counters.snapshot(), cc.snapshot());
    assert_eq!((s.handshakes_ok, k.handshakes_ok), (1, 1));
    assert_eq!(
        (s.frames_in, s.frames_out, k.frames_in, k.frames_out),
        (1, 11, 11, 1)
    );
    assert_eq!(s.handshake_failures + k.handshake_failures, 0);
}

#[tokio::test]
async fn client_reaches_any_pillar_of_a_replica_and_the_replica_learns_the_client_id() {
    let c = cluster();
    let (l, port) = listener().await;
    let (cfg, r2, lim) = (c.config.clone(), c.replicas[2].clone(), limits());
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let (peer, mut rd, mut wr) = accept(s, &r2, replica(2, 0), &cfg, &lim, &counters())
            .await
            .unwrap();
        let frame = rd.next().await.unwrap().unwrap();
        wr.send(&frame).await.unwrap();
        peer
    });
    let expected = Expected::replica_any_pillar(&c.config, ReplicaId(2)).unwrap();
    let role = PeerRole::Client { id: ClientId(1) };
    let (peer, mut rd, mut wr) = connect(
        dial(port).await,
        &c.clients[1],
        role,
        &expected,
        &limits(),
        &counters(),
    )
    .await
    .unwrap();
    assert_eq!(peer, replica(2, 0));
    wr.send(b"echo").await.unwrap();
    assert_eq!(&rd.next().await.unwrap().unwrap()[..], b"echo");
    assert_eq!(server.await.unwrap(), role);
}

/// Runs one handshake where either side may fail; returns both results.
async fn attempt(
    acceptor_key: Identity,
    acceptor_role: PeerRole,
    dialer_key: Identity,
    dialer_role: PeerRole,
    expected: Expected,
) -> (
    Result<PeerRole, NetError>,
    Result<PeerRole, NetError>,
    chorus_net::CountersSnapshot,
) {
    let c = cluster();
    let (l, port) = listener().await;
    let sc = counters();
    let sc2 = sc.clone();
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        accept(s, &acceptor_key, acceptor_role, &c.config, &limits(), &sc2)
            .await
            .map(|r| r.0)
    });
    let client = connect(
        dial(port).await,
        &dialer_key,
        dialer_role,
        &expected,
        &limits(),
        &counters(),
    )
    .await
    .map(|r| r.0);
    let server = server.await.unwrap();
    (server, client, sc.snapshot())
}

#[tokio::test]
async fn a_replica_holding_another_key_than_configured_is_refused_by_the_dialer() {
    let c = cluster();
    let expected = Expected::replica_pillar(&c.config, ReplicaId(1), 0).unwrap();
    let impostor = Identity::from_seed(b"not replica 1");
    let (server, client, _) = attempt(
        impostor,
        replica(1, 0),
        c.replicas[0].clone(),
        replica(0, 0),
        expected,
    )
    .await;
    // The impostor cannot check the dialler's proof (it lacks replica 1's
    // static key), and had it skipped the check, it could not sign as replica 1.
    assert!(matches!(server, Err(NetError::BadProof(_))), "{server:?}");
    assert!(client.is_err(), "{client:?}");
}

#[tokio::test]
async fn a_client_holding_another_key_than_configured_is_refused_by_the_acceptor() {
    let c = cluster();
    let expected = Expected::replica_any_pillar(&c.config, ReplicaId(0)).unwrap();
    let role = PeerRole::Client { id: ClientId(0) };
    // Client 1's key, claiming to be client 0.
    let (server, client, s) = attempt(
        c.replicas[0].clone(),
        replica(0, 0),
        c.clients[1].clone(),
        role,
        expected,
    )
    .await;
    // Refused at the proof of key possession, before any public-key work.
    assert!(
        matches!(server, Err(NetError::BadProof(r)) if r == role),
        "{server:?}"
    );
    // And the client is told so (issue 14 item 4), not left with a closed socket.
    assert!(
        matches!(client, Err(NetError::Refused(HandshakeRefusal::WrongKey))),
        "{client:?}"
    );
    let text = client.unwrap_err().to_string();
    assert!(text.contains("handshake refused"), "{text}");
    assert_eq!(
        (
            s.bad_proofs,
            s.bad_signatures,
            s.handshake_failures,
            s.handshakes_ok
        ),
        (1, 0, 1, 0)
    );
}

#[tokio::test]
async fn unknown_ids_and_pillars_are_refused_before_any_signature() {
    let c = cluster();
    let expected = Expected::replica_any_pillar(&c.config, ReplicaId(0)).unwrap();
    for role in [
        PeerRole::Client { id: ClientId(99) },
        replica(9, 0),
        replica(1, 2),
    ] {
        let (server, client, s) = attempt(
            c.replicas[0].clone(),
            replica(0, 0),
            c.replicas[1].clone(),
            role,
            expected,
        )
        .await;
        assert!(
            matches!(server, Err(NetError::UnknownPeer(r)) if r == role),
            "{server:?}"
        );
        assert!(
            matches!(client, Err(NetError::Refused(HandshakeRefusal::UnknownIdentity))),
            "{client:?}"
        );
        assert_eq!(s.unknown_peers, 1);
    }
}

#[tokio::test]
async fn reaching_another_replica_than_dialled_is_refused() {
    let c = cluster();
    let expected = Expected::replica_pillar(&c.config, ReplicaId(1), 0).unwrap();
    // Replica 2 answers with its own (valid) key where replica 1 was expected:
    // the dialler's proof was made for replica 1, so replica 2 refuses it.
    let (server, client, _) = attempt(
        c.replicas[2].clone(),
        replica(2, 0),
        c.replicas[0].clone(),
        replica(0, 0),
        expected,
    )
    .await;
    assert!(matches!(server, Err(NetError::BadProof(_))), "{server:?}");
    assert!(client.is_err(), "{client:?}");
    // Same replica, wrong pillar.
    let (_, client, _) = attempt(
        c.replicas[1].clone(),
        replica(1, 1),
        c.replicas[0].clone(),
        replica(0, 0),
        expected,
    )
    .await;
    assert!(
        matches!(client, Err(NetError::UnexpectedPeer { .. })),
        "{client:?}"
    );
}

/// An accept loop like the replica's: one task per connection.
async fn accept_loop(
    c: &Cluster,
) -> (
    u16,
    std::sync::Arc<chorus_net::Counters>,
    tokio::sync::mpsc::Receiver<Result<PeerRole, NetError>>,
) {
    let (l, port) = listener().await;
    let sc = counters();
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let (cfg, key, sc2) = (c.config.clone(), c.replicas[0].clone(), sc.clone());
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let (cfg, key, sc, tx) = (cfg.clone(), key.clone(), sc2.clone(), tx.clone());
            let mut lim = limits();
            lim.handshake_timeout = Duration::from_millis(300);
            tokio::spawn(async move {
                match accept(s, &key, replica(0, 0), &cfg, &lim, &sc).await {
                    Ok((peer, mut rd, mut wr)) => {
                        let _ = tx.send(Ok(peer)).await;
                        while let Ok(Some(f)) = rd.next().await {
                            if wr.send(&f).await.is_err() {
                                break;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                    }
                }
            });
        }
    });
    (port, sc, rx)
}

#[tokio::test]
async fn garbage_and_silence_close_only_their_own_connection() {
    use rand::{Rng, SeedableRng};
    let c = cluster();
    let (port, sc, mut results) = accept_loop(&c).await;

    // A legitimate client connects first and stays connected throughout.
    let expected = Expected::replica_any_pillar(&c.config, ReplicaId(0)).unwrap();
    let role = PeerRole::Client { id: ClientId(0) };
    let (_, mut rd, mut wr) = connect(
        dial(port).await,
        &c.clients[0],
        role,
        &expected,
        &limits(),
        &counters(),
    )
    .await
    .unwrap();
    assert_eq!(results.recv().await.unwrap().unwrap(), role);

    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut garbage: Vec<Vec<u8>> = (0..6)
        .map(|i| {
            let len = rng.gen_range(1..2048);
            let mut v: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if i % 2 == 0 {
                // A small, plausible length so the body reaches the hello parser.
                v[..4].copy_from_slice(&(60u32).to_be_bytes());
                v.resize(v.len().max(64), 0);
            }
            v
        })
        .collect();
    garbage.push(vec![0xff; 8]); // a 4 GiB length header
    for g in &garbage {
        let mut s = dial(port).await;
        s.write_all(g).await.unwrap();
        let r = results.recv().await.unwrap();
        assert!(matches!(r, Err(ref e) if e.is_protocol_violation()), "{r:?}");
        // The acceptor closed this connection.
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    }
    // A connection that says nothing is dropped at the handshake timeout.
    let mut silent = dial(port).await;
    let r = results.recv().await.unwrap();
    assert!(matches!(r, Err(NetError::HandshakeTimeout(_))), "{r:?}");
    let mut buf = [0u8; 8];
    assert!(matches!(silent.read(&mut buf).await, Ok(0) | Err(_)));

    // The legitimate connection is unaffected.
    wr.send(b"still here").await.unwrap();
    assert_eq!(&rd.next().await.unwrap().unwrap()[..], b"still here");
    let s = sc.snapshot();
    assert_eq!(s.handshake_failures, garbage.len() as u64 + 1);
    assert_eq!(s.handshake_timeouts, 1);
    assert!(s.oversize >= 1 && s.malformed >= 1, "{s:?}");
    assert_eq!(s.handshakes_ok, 1);
}

/// Issue 16 finding 2: a recorded hello, replayed by someone without the
/// role's key, must not make the responder do public-key work. Before the
/// fix the responder answered every hello naming a configured role with its
/// own hello and an Ed25519 signature (two X25519 operations and a signature).
#[tokio::test]
async fn a_replayed_hello_gets_only_a_cookie_and_no_signature() {
    let c = cluster();
    let (port, sc, mut results) = accept_loop(&c).await;
    // Record the first frame a real client sends.
    let recorded = std::sync::Arc::new(std::sync::Mutex::new(None::<Vec<u8>>));
    let rec = recorded.clone();
    let proxy = spawn_proxy(port, move |i, f| {
        if i == 0 {
            *rec.lock().unwrap() = Some(f.clone());
        }
        vec![f]
    })
    .await;
    let expected = Expected::replica_any_pillar(&c.config, ReplicaId(0)).unwrap();
    let role = PeerRole::Client { id: ClientId(0) };
    connect(
        dial(proxy).await,
        &c.clients[0],
        role,
        &expected,
        &limits(),
        &counters(),
    )
    .await
    .unwrap();
    assert_eq!(results.recv().await.unwrap().unwrap(), role);
    let hello = recorded.lock().unwrap().clone().unwrap();
    for _ in 0..3 {
        let mut s = dial(port).await;
        s.write_all(&hello).await.unwrap();
        // A proof made up without the key (what a replayer can send at best).
        let bogus = [&[0u8, 0, 0, 16][..], &[0xab; 16][..]].concat();
        s.write_all(&bogus).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut answer)).await;
        // 4-byte header + cookie; an Ed25519 signature alone would be 64 bytes.
        assert!(answer.len() < 64, "responder sent {} bytes", answer.len());
        let r = results.recv().await.unwrap();
        assert!(matches!(r, Err(NetError::BadProof(r)) if r == role), "{r:?}");
    }
    let s = sc.snapshot();
    assert_eq!((s.bad_proofs, s.handshakes_ok), (3, 1));
}

/// Issue 16 finding 6: the same keys in a cluster with another id do not
/// open a connection (the cluster tag is in the proof and the transcript).
#[tokio::test]
async fn keys_reused_in_another_cluster_do_not_connect() {
    let c = cluster();
    let mut other = c.config.clone();
    other.params.cluster_id = "another cluster".into();
    let (l, port) = listener().await;
    let (key, sc) = (c.replicas[0].clone(), counters());
    let sc2 = sc.clone();
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        accept(s, &key, replica(0, 0), &other, &limits(), &sc2)
            .await
            .map(|r| r.0)
    });
    let expected = Expected::replica_any_pillar(&c.config, ReplicaId(0)).unwrap();
    let role = PeerRole::Client { id: ClientId(1) };
    let client = connect(
        dial(port).await,
        &c.clients[1],
        role,
        &expected,
        &limits(),
        &counters(),
    )
    .await;
    assert!(client.is_err());
    assert!(matches!(server.await.unwrap(), Err(NetError::BadProof(_))));
}

/// Issue 16 finding 1: a connection that sends nothing is closed at the
/// short hello deadline, not at the whole handshake timeout.
#[tokio::test]
async fn a_silent_connection_is_dropped_at_the_hello_deadline() {
    let c = cluster();
    let (l, port) = listener().await;
    let (key, cfg) = (c.replicas[0].clone(), c.config.clone());
    let mut lim = limits();
    lim.handshake_timeout = Duration::from_secs(10);
    lim.hello_timeout = Duration::from_millis(200);
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let t = std::time::Instant::now();
        let r = accept(s, &key, replica(0, 0), &cfg, &lim, &counters()).await;
        (r.map(|r| r.0), t.elapsed())
    });
    let _silent = dial(port).await;
    let (r, took) = server.await.unwrap();
    assert!(matches!(r, Err(NetError::HandshakeTimeout(_))), "{r:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// Issue 14 item 4: a client pointed at an HTTP server reported "frame of
/// 1213486160 bytes exceeds the limit" (that number is "HTTP").
#[tokio::test]
async fn a_dialler_that_reaches_a_non_chorus_server_is_told_so() {
    let c = cluster();
    for answer in [
        &b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"[..],
        &b"\x00\x00\x00\x05hello"[..],
    ] {
        let (l, port) = listener().await;
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            s.write_all(answer).await.unwrap();
            let mut sink = [0u8; 256];
            let _ = tokio::time::timeout(Duration::from_secs(2), s.read(&mut sink)).await;
        });
        let expected = Expected::replica_any_pillar(&c.config, ReplicaId(0)).unwrap();
        let r = connect(
            dial(port).await,
            &c.clients[0],
            PeerRole::Client { id: ClientId(0) },
            &expected,
            &limits(),
            &counters(),
        )
        .await;
        let Err(e @ NetError::NotChorus(_)) = r else {
            panic!("expected NotChorus, got {:?}", r.map(|x| x.0));
        };
        assert!(e.to_string().contains("not a Chorus endpoint"), "{e}");
        if answer.starts_with(b"HTTP") {
            assert!(e.to_string().contains("HTTP"), "{e}");
        }
        server.abort();
    }
}
