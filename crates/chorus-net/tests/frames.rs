//! Frames after the handshake: tampering, replay, reordering and over-size
//! frames are detected, counted, and end the connection.

mod common;

use chorus_core::ReplicaId;
use chorus_net::{accept, connect, Counters, CountersSnapshot, Expected, NetError, PeerRole};
use common::*;
use std::sync::Arc;

const R0: PeerRole = PeerRole::Replica {
    id: ReplicaId(0),
    pillar: 0,
};
const R1: PeerRole = PeerRole::Replica {
    id: ReplicaId(1),
    pillar: 0,
};

/// Replica 0 dials replica 1 through a proxy that applies `mutate` to the
/// client→server frames (0 = hello, 1 = auth, 2.. = data) and sends `payloads`.
/// Returns what replica 1's reader produced, in order, and its counters.
async fn through_proxy<F>(
    payloads: &[&[u8]],
    mutate: F,
) -> (Vec<Result<Option<Vec<u8>>, String>>, CountersSnapshot)
where
    F: FnMut(usize, Vec<u8>) -> Vec<Vec<u8>> + Send + 'static,
{
    let c = cluster();
    let (l, port) = listener().await;
    let sc = counters();
    let (cfg, key, sc2) = (c.config.clone(), c.replicas[1].clone(), sc.clone());
    let expect = payloads.len();
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let (_, mut rd, _wr) = accept(s, &key, R1, &cfg, &limits(), &sc2).await.unwrap();
        let mut got = vec![];
        loop {
            let r = rd.next().await;
            let stop = !matches!(r, Ok(Some(_)));
            got.push(r.map(|o| o.map(|b| b.to_vec())).map_err(|e| format!("{e:?}")));
            if stop || got.len() > expect {
                // After an error the reader stays failed.
                if got.last().unwrap().is_err() {
                    assert!(matches!(rd.next().await, Err(NetError::Poisoned)));
                }
                return got;
            }
        }
    });
    let proxy = spawn_proxy(port, mutate).await;
    let expected = Expected::replica_pillar(&c.config, ReplicaId(1), 0).unwrap();
    let (_, _rd, mut wr) = connect(
        dial(proxy).await,
        &c.replicas[0],
        R0,
        &expected,
        &limits(),
        &counters(),
    )
    .await
    .unwrap();
    for p in payloads {
        wr.send(p).await.unwrap();
    }
    wr.shutdown().await.unwrap();
    (server.await.unwrap(), sc.snapshot())
}

fn ok(b: &[u8]) -> Result<Option<Vec<u8>>, String> {
    Ok(Some(b.to_vec()))
}

#[tokio::test]
async fn an_untouched_stream_passes_the_proxy() {
    let (got, s) = through_proxy(&[b"a", b"b"], |_, f| vec![f]).await;
    assert_eq!(got, vec![ok(b"a"), ok(b"b"), Ok(None)]);
    assert_eq!(s.frames_in, 2);
}

#[tokio::test]
async fn a_tampered_payload_fails_the_mac_and_closes_the_connection() {
    let (got, s) = through_proxy(&[b"first", b"second", b"third"], |i, mut f| {
        if i == 4 {
            let last = f.len() - 1;
            f[last] ^= 0x01;
        }
        vec![f]
    })
    .await;
    assert_eq!(got[0], ok(b"first"));
    assert!(matches!(&got[1], Err(e) if e.contains("BadMac")), "{got:?}");
    assert_eq!(got.len(), 2, "nothing is read after a bad frame");
    assert_eq!((s.auth_failures, s.frames_in), (1, 1));
}

#[tokio::test]
async fn a_tampered_counter_or_mac_fails_the_mac() {
    for byte in [4 + 7, 4 + 8 + 3] {
        let (got, s) = through_proxy(&[b"x"], move |i, mut f| {
            if i == 3 {
                f[byte] ^= 0x80;
            }
            vec![f]
        })
        .await;
        assert!(matches!(&got[0], Err(e) if e.contains("BadMac")), "{got:?}");
        assert_eq!(s.auth_failures, 1);
    }
}

#[tokio::test]
async fn a_replayed_frame_is_refused() {
    let (got, s) = through_proxy(&[b"once", b"twice"], |i, f| {
        if i == 3 {
            vec![f.clone(), f]
        } else {
            vec![f]
        }
    })
    .await;
    assert_eq!(got[0], ok(b"once"));
    assert!(
        matches!(&got[1], Err(e) if e.contains("Replay { expected: 1, got: 0 }")),
        "{got:?}"
    );
    assert_eq!(s.replays, 1);
}

#[tokio::test]
async fn reordered_frames_are_refused() {
    let mut held = None;
    let (got, s) = through_proxy(&[b"one", b"two"], move |i, f| match i {
        3 => {
            held = Some(f);
            vec![]
        }
        4 => vec![f, held.take().unwrap()],
        _ => vec![f],
    })
    .await;
    assert!(
        matches!(&got[0], Err(e) if e.contains("Replay { expected: 0, got: 1 }")),
        "{got:?}"
    );
    assert_eq!(s.replays, 1);
}

#[tokio::test]
async fn a_dropped_frame_is_detected_at_the_next_one() {
    let (got, _) = through_proxy(&[b"lost", b"next"], |i, f| if i == 3 { vec![] } else { vec![f] }).await;
    assert!(
        matches!(&got[0], Err(e) if e.contains("Replay { expected: 0, got: 1 }")),
        "{got:?}"
    );
}

#[tokio::test]
async fn an_oversize_length_header_is_refused_before_the_body() {
    let (got, s) = through_proxy(&[b"fine", b"big"], |i, mut f| {
        if i == 4 {
            f[..4].copy_from_slice(&(10_000_000u32).to_be_bytes());
        }
        vec![f]
    })
    .await;
    assert_eq!(got[0], ok(b"fine"));
    assert!(matches!(&got[1], Err(e) if e.contains("Oversize")), "{got:?}");
    assert_eq!(s.oversize, 1);
}

#[tokio::test]
async fn a_frame_too_short_for_its_mac_is_refused() {
    let (got, s) = through_proxy(&[b"x"], |i, f| {
        if i == 3 {
            vec![vec![0, 0, 0, 3, 1, 2, 3]]
        } else {
            vec![f]
        }
    })
    .await;
    assert!(
        matches!(&got[0], Err(e) if e.contains("ShortFrame(3)")),
        "{got:?}"
    );
    assert_eq!(s.malformed, 1);
}

#[tokio::test]
async fn the_writer_refuses_an_oversize_payload_and_the_connection_survives() {
    let c = cluster();
    let (l, port) = listener().await;
    let (cfg, key) = (c.config.clone(), c.replicas[1].clone());
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let (_, mut rd, _) = accept(s, &key, R1, &cfg, &limits(), &counters()).await.unwrap();
        rd.next().await.unwrap().unwrap()
    });
    let cc: Arc<Counters> = counters();
    let expected = Expected::replica_pillar(&c.config, ReplicaId(1), 0).unwrap();
    let (_, _rd, mut wr) = connect(dial(port).await, &c.replicas[0], R0, &expected, &limits(), &cc)
        .await
        .unwrap();
    let max = limits().max_frame_bytes;
    let r = wr.send(&vec![0u8; max + 1]).await;
    assert!(
        matches!(r, Err(NetError::Oversize { len, max: m }) if len == max + 1 && m == max),
        "{r:?}"
    );
    assert_eq!(cc.snapshot().oversize, 1);
    // A payload of exactly the limit still goes through.
    wr.send(&vec![7u8; max]).await.unwrap();
    assert_eq!(server.await.unwrap().len(), max);
}
