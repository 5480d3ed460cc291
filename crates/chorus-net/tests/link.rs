//! The reconnecting peer link.

mod common;

use bytes::Bytes;
use chorus_core::ReplicaId;
use chorus_net::{accept, spawn_peer_link, Backoff, Inbound, LinkSpec, PeerRole};
use common::*;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const R0: PeerRole = PeerRole::Replica {
    id: ReplicaId(0),
    pillar: 1,
};
const R1: PeerRole = PeerRole::Replica {
    id: ReplicaId(1),
    pillar: 1,
};

async fn link_survives_restarts_of_the_peer() {
    let c = cluster();
    // Reserve a port, then leave it closed so the link's first attempts fail.
    let port = listener().await.1;
    let mut spec = LinkSpec::replica_pillar(&c.config, ReplicaId(0), ReplicaId(1), 1).unwrap();
    spec.port = port;
    spec.backoff = Backoff {
        min: Duration::from_millis(10),
        max: Duration::from_millis(80),
    };
    assert_eq!(spec.my_role, R0);
    let lc = counters();
    let (in_tx, mut in_rx) = mpsc::channel(16);
    let link = spawn_peer_link(
        spec,
        Arc::new(c.replicas[0].clone()),
        limits(),
        lc.clone(),
        Some(in_tx),
    );
    assert!(link.try_send(Bytes::from_static(b"queued while down")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!link.is_connected());
    assert!(lc.snapshot().link_connect_failures >= 1);

    let l = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    for round in 0..2u8 {
        let (s, _) = l.accept().await.unwrap();
        let (peer, mut rd, mut wr) = accept(s, &c.replicas[1], R1, &c.config, &limits(), &counters())
            .await
            .unwrap();
        assert_eq!(peer, R0);
        if round == 0 {
            assert_eq!(&rd.next().await.unwrap().unwrap()[..], b"queued while down");
        }
        assert!(link.try_send(Bytes::from(vec![round; 5])));
        assert_eq!(&rd.next().await.unwrap().unwrap()[..], &[round; 5]);
        assert_eq!(link.queued_bytes(), 0, "frames taken release their bytes");
        // The peer talks back on the same connection.
        wr.send(b"back").await.unwrap();
        let got: Inbound = in_rx.recv().await.unwrap();
        assert_eq!((got.from, &got.frame[..]), (R1, &b"back"[..]));
        assert!(link.is_connected());
        // The peer "restarts": the link must dial again.
    }
    assert_eq!(link.connects(), 2);
    assert_eq!(lc.snapshot().link_connects, 2);
}

#[tokio::test]
async fn link_reconnects_on_a_current_thread_runtime() {
    link_survives_restarts_of_the_peer().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_reconnects_on_a_multi_thread_runtime() {
    link_survives_restarts_of_the_peer().await;
}

/// A client's link to a port nobody listens on (no retry for 5 s): what
/// is sent piles up in its queue.
async fn link_to_nobody(lim: chorus_net::NetLimits) -> (chorus_net::PeerLink, Arc<chorus_net::Counters>) {
    let c = cluster();
    let port = listener().await.1; // nobody listens: frames pile up
    let mut spec = LinkSpec::client_port(&c.config, chorus_core::ClientId(0), ReplicaId(2)).unwrap();
    spec.port = port;
    spec.backoff = Backoff {
        min: Duration::from_secs(5),
        max: Duration::from_secs(5),
    };
    let lc = counters();
    let link = spawn_peer_link(spec, Arc::new(c.clients[0].clone()), lim, lc.clone(), None);
    (link, lc)
}

#[tokio::test]
async fn a_full_queue_drops_the_new_frame_and_counts_it() {
    let mut lim = limits();
    lim.max_buffered_frames = 3;
    let (link, lc) = link_to_nobody(lim).await;
    let sent: Vec<bool> = (0..5).map(|i| link.try_send(Bytes::from(vec![i]))).collect();
    assert_eq!(sent, vec![true, true, true, false, false]);
    assert_eq!(link.queued(), 3);
    assert_eq!(lc.snapshot().link_dropped, 2);
}

#[tokio::test]
async fn a_queue_holding_its_bytes_drops_the_new_frame() {
    // A link to a replica that is down holds what was queued for it: large
    // frames must not pile up to the frame bound (a byte bound, like the
    // replica's own peer queues; BENCHMARKS.md "a dead peer's queue").
    let mut lim = limits();
    lim.max_buffered_frames = 100;
    lim.max_queued_bytes = 1_000;
    let (link, lc) = link_to_nobody(lim).await;
    let sent: Vec<bool> = (0..4)
        .map(|_| link.try_send(Bytes::from(vec![0u8; 600])))
        .collect();
    assert_eq!(
        sent,
        vec![true, true, false, false],
        "below the bound: one frame over it, then none"
    );
    assert_eq!(link.queued(), 2);
    assert_eq!(link.queued_bytes(), 1_200);
    assert_eq!(lc.snapshot().link_dropped, 2);
}
