//! The client against a fake cluster of four replicas (n = 4, f = 1).

mod common;

use bytes::Bytes;
use chorus_client::{BlockingClient, Client, ClientError};
use chorus_core::{flags, ClientAuthKind, ClientId, ReplicaId};
use common::{result_for, start, Behavior::*, Fake};
use std::sync::Arc;
use std::time::Duration;

async fn invoke_ok(c: &Client, op: &str) {
    let got = c.invoke(Bytes::from(op.to_string())).await.unwrap();
    assert_eq!(got, result_for(op.as_bytes()));
}

/// `callers` tasks invoking one after another for `how_long`; how many
/// requests completed (each checked).
async fn invoke_for(c: &Arc<Client>, callers: usize, how_long: Duration) -> usize {
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|t| {
            let c = c.clone();
            tokio::spawn(async move {
                let mut i = 0;
                while started.elapsed() < how_long {
                    invoke_ok(&c, &format!("t{t}-{i}")).await;
                    i += 1;
                }
                i
            })
        })
        .collect();
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap();
    }
    done
}

#[tokio::test]
async fn honest_cluster_answers_many_concurrent_requests_with_increasing_seqs() {
    for auth in [ClientAuthKind::MacVector, ClientAuthKind::Signature] {
        let fake = start(&[Honest; 4], auth).await;
        let mut opts = Fake::opts();
        opts.max_in_flight = 8;
        let c = Arc::new(fake.client(0, opts).await);
        assert_eq!(c.connected_replicas(), 4);
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move { invoke_ok(&c, &format!("op{i}")).await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let s = c.stats();
        assert_eq!((s.invoked, s.completed, s.timeouts), (40, 40, 0));
        // Every replica got every request, authentic, first sent in strictly
        // increasing seq order (retransmissions may repeat older ones later).
        for r in 0..4 {
            let mut first_seen = vec![];
            for q in fake.seen_by(r) {
                if !first_seen.contains(&q.seq.0) {
                    first_seen.push(q.seq.0);
                }
            }
            assert_eq!(first_seen.len(), 40, "{auth:?} replica {r}");
            assert!(
                first_seen.windows(2).all(|w| w[0] < w[1]),
                "{auth:?}: seqs sent out of order: {first_seen:?}"
            );
        }
        assert_eq!(c.in_flight(), 0);
    }
}

/// PBFT §4.1, leader-first (`chorus_core::first_contact`): replica 0, the
/// primary, answers at once with a wrong result. One answer is not the
/// primary answering (only f + 1 matching results are), so the client
/// notices the silence, sends to every replica for the cooling-off period
/// and probes it again only after that: every result is right, and the
/// primary gets a request alone once per period.
#[tokio::test]
async fn a_primary_answering_alone_with_a_fake_result_is_not_trusted() {
    let params = chorus_core::ProtocolParams {
        mode: chorus_core::OrderingMode::Pbft,
        pillars: 1,
        ..chorus_core::ProtocolParams::default()
    };
    let fake = common::start_answering_views(&[Byzantine, Honest, Honest, Honest], params).await;
    let c = Arc::new(fake.client(1, Fake::opts()).await);
    let i = invoke_for(&c, 8, Duration::from_millis(2_500)).await;
    let s = c.stats();
    assert!(
        s.sent_to_primary >= 1,
        "the client learnt the view and probed: {s:?}"
    );
    assert!(s.primary_silences >= 1, "{s:?}");
    // Probes at ~0, ~1.05 and ~3.1 s (cooling off 1 s, then 2 s).
    assert!(
        s.sent_to_primary <= 3 && s.sent_to_primary <= s.primary_silences + 1,
        "{i} requests, {s:?}"
    );
}

#[tokio::test]
async fn one_byzantine_replica_cannot_change_the_result() {
    let fake = start(&[Byzantine, Honest, Honest, Honest], ClientAuthKind::MacVector).await;
    let c = fake.client(1, Fake::opts()).await;
    for i in 0..8 {
        invoke_ok(&c, &format!("x{i}")).await;
    }
    let r = c.invoke_read_only(Bytes::from_static(b"get")).await.unwrap();
    assert_eq!(r, result_for(b"get"));
}

#[tokio::test]
async fn a_silent_replica_is_tolerated_on_both_paths() {
    let fake = start(&[Honest, Honest, Silent, Honest], ClientAuthKind::MacVector).await;
    let c = fake.client(0, Fake::opts()).await;
    // Requests whose designated replica (seq mod 4) is the silent one get only
    // digests at first; the retransmission brings full replies.
    for i in 0..8 {
        invoke_ok(&c, &format!("s{i}")).await;
    }
    let r = c.invoke_read_only(Bytes::from_static(b"ro")).await.unwrap();
    assert_eq!(r, result_for(b"ro"));
    assert_eq!(c.stats().fallbacks, 0);
    // A replica never heard from is never relied on for a reply
    // (`chorus_core::reply_fanout`): no request stalls on it.
    let s = c.stats();
    assert_eq!((s.sent_few_replies, s.reply_shortfalls), (0, 0), "{s:?}");
}

#[tokio::test]
async fn digest_only_replies_never_make_a_result_without_the_full_bytes() {
    let fake = start(&[DigestOnly; 4], ClientAuthKind::MacVector).await;
    let mut opts = Fake::opts();
    opts.request_timeout = Duration::from_millis(300);
    let c = fake.client(0, opts).await;
    match c.invoke(Bytes::from_static(b"x")).await {
        Err(ClientError::Timeout { progress, .. }) => {
            assert!(progress.contains("full result missing"), "{progress}")
        }
        other => panic!("{other:?}"),
    }
}

/// Issue 16 finding 5: replies that answer another request under the same
/// seq are never accepted, even from every replica.
#[tokio::test]
async fn replies_for_another_request_under_the_same_seq_are_never_accepted() {
    let fake = start(&[OtherRequest; 4], ClientAuthKind::MacVector).await;
    let mut opts = Fake::opts();
    opts.request_timeout = Duration::from_millis(300);
    let c = fake.client(0, opts).await;
    let r = c.invoke(Bytes::from_static(b"x")).await;
    assert!(matches!(r, Err(ClientError::Timeout { .. })), "{r:?}");
    assert!(c.stats().bad_replies >= 3, "{:?}", c.stats());
    // Control: the same replicas echoing the right digest are accepted.
    let fake = start(&[Honest; 4], ClientAuthKind::MacVector).await;
    let c = fake.client(0, Fake::opts()).await;
    invoke_ok(&c, "y").await;
}

#[tokio::test]
async fn busy_replicas_cause_back_off_and_retry_until_success() {
    let fake = start(&[BusyFirst(2); 4], ClientAuthKind::MacVector).await;
    let c = fake.client(0, Fake::opts()).await;
    invoke_ok(&c, "busy").await;
    let s = c.stats();
    assert!(s.busy_backoffs >= 2, "{s:?}");
    // Same request (same seq) resent; no new sequence numbers were used.
    let seqs: std::collections::BTreeSet<u64> = fake.seen_by(0).iter().map(|q| q.seq.0).collect();
    assert_eq!(seqs.len(), 1);
}

#[tokio::test]
async fn rejection_by_f_plus_one_fails_the_call() {
    let fake = start(&[RejectAll; 4], ClientAuthKind::MacVector).await;
    let c = fake.client(0, Fake::opts()).await;
    match c.invoke(Bytes::from_static(b"x")).await {
        Err(ClientError::Rejected(why)) => assert_eq!(why, "nope"),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.stats().rejected, 1);
}

#[tokio::test]
async fn silence_times_out_with_a_clear_error() {
    let fake = start(&[Silent; 4], ClientAuthKind::MacVector).await;
    let mut opts = Fake::opts();
    opts.request_timeout = Duration::from_millis(250);
    let c = fake.client(0, opts).await;
    let t0 = tokio::time::Instant::now();
    match c.invoke(Bytes::from_static(b"x")).await {
        Err(e @ ClientError::Timeout { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("timed out") && msg.contains("4 silent"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "{took:?}"
    );
    let s = c.stats();
    assert_eq!(s.timeouts, 1);
    assert!(s.retransmissions >= 1, "{s:?}");
}

#[tokio::test]
async fn read_only_fast_path_needs_no_ordering_when_2f_plus_1_agree() {
    let fake = start(&[Honest, Honest, Honest, StaleReads], ClientAuthKind::MacVector).await;
    let c = fake.client(0, Fake::opts()).await;
    let t = c.invoke_read_only_timed(Bytes::from_static(b"k")).await.unwrap();
    assert_eq!(t.result, result_for(b"k"));
    assert!(!t.fell_back);
    let s = c.stats();
    assert_eq!((s.fast_path_completed, s.fallbacks), (1, 0));
    assert!(fake
        .seen_by(0)
        .iter()
        .all(|q| q.flags == flags::READ_ONLY | flags::DIGEST_SHA256));
}

#[tokio::test]
async fn read_only_falls_back_to_an_ordered_request_with_a_new_seq() {
    // Two replicas refuse the fast path: 2f+1 = 3 read-only replies are impossible.
    let fake = start(
        &[NoFastPath, NoFastPath, Honest, Honest],
        ClientAuthKind::Signature,
    )
    .await;
    let c = fake.client(1, Fake::opts()).await;
    let t = c.invoke_read_only_timed(Bytes::from_static(b"k")).await.unwrap();
    assert_eq!(t.result, result_for(b"k"));
    assert!(t.fell_back, "the caller is told the fast path failed");
    let s = c.stats();
    assert_eq!((s.fallbacks, s.fast_path_completed, s.completed), (1, 0, 1));
    let seen = fake.seen_by(2);
    let ro: Vec<_> = seen.iter().filter(|q| q.is_read_only()).collect();
    let ordered: Vec<_> = seen.iter().filter(|q| !q.is_read_only()).collect();
    assert!(!ro.is_empty() && !ordered.is_empty());
    assert!(ordered[0].seq > ro[0].seq, "fallback uses a new, higher seq");
    assert_eq!(ordered[0].op, ro[0].op);
}

#[tokio::test]
async fn read_only_falls_back_on_its_timer_when_replies_are_missing() {
    // Two silent replicas: the fast path's 2f+1 = 3 cannot be reached, but
    // ordering needs only f+1 = 2. The fast path gives up after read_only_timeout.
    let fake = start(&[Honest, Honest, Silent, Silent], ClientAuthKind::MacVector).await;
    let mut opts = Fake::opts();
    opts.connect_timeout = None;
    let read_only_timeout = opts.read_only_timeout;
    let c = fake.client(0, opts).await;
    let t0 = tokio::time::Instant::now();
    assert_eq!(
        c.invoke_read_only(Bytes::from_static(b"k")).await.unwrap(),
        result_for(b"k")
    );
    assert!(t0.elapsed() >= read_only_timeout);
    let s = c.stats();
    assert_eq!((s.fallbacks, s.fast_path_completed, s.completed), (1, 0, 1));
}

#[tokio::test]
async fn client_reconnects_after_a_replica_drops_the_connection() {
    let fake = start(&[DropFirstConnection; 4], ClientAuthKind::MacVector).await;
    let c = fake.client(0, Fake::opts()).await;
    invoke_ok(&c, "after reconnect").await;
    assert!(c.stats().retransmissions >= 1);
    assert!(c.net_counters().link_connects >= 8, "{:?}", c.net_counters());
}

#[tokio::test]
async fn in_flight_requests_are_bounded() {
    let fake = start(&[Silent; 4], ClientAuthKind::MacVector).await;
    let mut opts = Fake::opts();
    opts.max_in_flight = 2;
    opts.request_timeout = Duration::from_millis(1000);
    let c = Arc::new(fake.client(0, opts).await);
    let calls: Vec<_> = (0..5)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move { c.invoke(Bytes::from(format!("{i}"))).await })
        })
        .collect();
    while c.stats().invoked < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(c.in_flight(), 2);
    assert_eq!(c.stats().invoked, 2, "the other three wait for a slot");
    for t in calls {
        assert!(matches!(t.await.unwrap(), Err(ClientError::Timeout { .. })));
    }
    assert_eq!(c.stats().invoked, 5);
}

#[tokio::test]
async fn bad_inputs_are_refused_up_front() {
    let fake = start(&[Honest; 4], ClientAuthKind::MacVector).await;
    let c = fake.client(0, Fake::opts()).await;
    let max = fake.config.params.max_op_bytes as usize;
    assert!(matches!(
        c.invoke(vec![0u8; max + 1]).await,
        Err(ClientError::OpTooLarge { len, .. }) if len == max + 1
    ));
    let wrong = Client::connect(
        fake.config.clone(),
        ClientId(0),
        fake.clients[1].clone(),
        Fake::opts(),
    )
    .await;
    assert!(matches!(wrong, Err(ClientError::IdentityMismatch(ClientId(0)))));
    let unknown = Client::connect(
        fake.config.clone(),
        ClientId(9),
        fake.clients[1].clone(),
        Fake::opts(),
    )
    .await;
    assert!(matches!(unknown, Err(ClientError::UnknownClient(ClientId(9)))));
    assert_eq!(
        c.status(ReplicaId(3), Duration::from_secs(2)).await.unwrap(),
        "{\"replica\":3}"
    );
}

#[tokio::test]
async fn connect_fails_clearly_when_no_quorum_is_reachable() {
    let fake = start(&[Honest; 4], ClientAuthKind::MacVector).await;
    let mut config = (*fake.config).clone();
    for r in config.replicas.iter_mut().skip(1) {
        // Ports nobody listens on.
        r.client_port = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
    }
    let mut opts = Fake::opts();
    opts.connect_timeout = Some(Duration::from_millis(200));
    let r = Client::connect(Arc::new(config), ClientId(0), fake.clients[0].clone(), opts).await;
    match r {
        Err(ClientError::NotConnected {
            connected, needed, n, ..
        }) => assert_eq!((connected, needed, n), (1, 3, 4)),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected without a quorum"),
    }
}

/// Issue 14 item 4: a client whose files come from another keygen run saw
/// "connected to 0 of 4 replicas", the same as a dead cluster.
#[tokio::test]
async fn a_client_with_a_key_the_replicas_do_not_know_is_told_its_handshake_was_refused() {
    let fake = start(&[Honest; 4], ClientAuthKind::MacVector).await;
    // The client's own files agree with each other, the replicas' do not.
    let stale = chorus_core::Identity::from_seed(b"client 0 of another keygen run");
    let mut config = (*fake.config).clone();
    config.clients[0].identity = stale.public();
    let mut opts = Fake::opts();
    opts.connect_timeout = Some(Duration::from_millis(500));
    let r = Client::connect(Arc::new(config), ClientId(0), stale, opts).await;
    match r {
        Err(e @ ClientError::HandshakeRefused { refused: 4, n: 4, .. }) => {
            assert!(e.to_string().contains("handshake refused"), "{e}");
            assert!(e.to_string().contains("another key"), "{e}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected with a key the replicas do not know"),
    }
}

/// Issue 14 item 4: a client port pointed at an HTTP server reported
/// "frame of 1213486160 bytes exceeds the limit".
#[tokio::test]
async fn a_client_pointed_at_a_non_chorus_port_says_so() {
    use tokio::io::AsyncWriteExt;
    let fake = start(&[Honest; 4], ClientAuthKind::MacVector).await;
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = http.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = http.accept().await {
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        }
    });
    let mut config = (*fake.config).clone();
    for r in config.replicas.iter_mut() {
        r.client_port = port;
    }
    let mut opts = Fake::opts();
    opts.connect_timeout = Some(Duration::from_millis(500));
    let r = Client::connect(Arc::new(config), ClientId(0), fake.clients[0].clone(), opts).await;
    match r {
        Err(e @ ClientError::NotChorus { .. }) => {
            let text = e.to_string();
            assert!(text.contains("not a Chorus endpoint"), "{text}");
            assert!(text.contains(&format!(":{port}")), "names the address: {text}");
            assert!(text.contains("HTTP"), "{text}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected to an HTTP server"),
    }
}

#[test]
fn blocking_client_works_without_an_async_caller() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(start(&[Honest; 4], ClientAuthKind::MacVector));
    let _guard = rt.enter();
    let c = BlockingClient::connect(
        fake.config.clone(),
        ClientId(1),
        fake.clients[1].clone(),
        Fake::opts(),
    )
    .unwrap();
    assert_eq!(c.invoke(Bytes::from_static(b"a")).unwrap(), result_for(b"a"));
    assert_eq!(
        c.invoke_read_only(Bytes::from_static(b"b")).unwrap(),
        result_for(b"b")
    );
    assert_eq!(c.stats().completed, 2);
}

#[tokio::test]
async fn timed_invocations_report_first_reply_before_acceptance() {
    // Busy answers are not results: the first result-bearing reply comes
    // after the busy back-off, and acceptance needs f+1 of them.
    let fake = start(&[BusyFirst(1), Honest, Honest, Honest], ClientAuthKind::MacVector).await;
    let c = fake.client(0, Fake::opts()).await;
    for i in 0..8 {
        let op = format!("t{i}");
        let submitted = std::time::Instant::now();
        let t = c.invoke_timed(Bytes::from(op.clone())).await.unwrap();
        assert_eq!(t.result, result_for(op.as_bytes()));
        assert!(submitted <= t.first_reply, "first reply before submission");
        assert!(t.first_reply <= t.accepted, "accepted before the first reply");
    }
    let got = c.invoke_read_only_timed(Bytes::from_static(b"r")).await.unwrap();
    assert!(got.first_reply <= got.accepted);
}

/// `ClientOptions::few_replies` (`chorus_core::reply_fanout`): with every
/// replica answering, the client soon asks f + 1 of them only, and nothing
/// has to be resent for it.
#[tokio::test]
async fn an_honest_cluster_is_asked_for_few_replies_and_needs_no_resend() {
    let fake = start(&[Honest; 4], ClientAuthKind::MacVector).await;
    let c = fake.client(1, Fake::opts()).await;
    for i in 0..40 {
        invoke_ok(&c, &format!("h{i}")).await;
    }
    let s = c.stats();
    assert!(s.sent_few_replies >= 30, "{s:?}");
    assert_eq!((s.retransmissions, s.reply_shortfalls), (0, 0), "{s:?}");
}

/// A replica that answers everything except the requests it is designated
/// to answer (so the client keeps hearing from it): each such request costs
/// a retransmission, which starts a cooling-off period of every-replica
/// replies that doubles. Over 2.5 s with 8 callers: at most two periods
/// (2 s, then 4 s), so at most two windows of requests resent; a client
/// that kept asking for few replies would resend every one it sent.
#[tokio::test]
async fn a_replica_silent_when_designated_costs_a_resend_per_cooling_off_period() {
    let fake = start(
        &[Honest, SilentWhenDesignated, Honest, Honest],
        ClientAuthKind::MacVector,
    )
    .await;
    // Client 1's first designated repliers are replicas 1 and 2.
    let c = Arc::new(fake.client(1, Fake::opts()).await);
    let done = invoke_for(&c, 8, Duration::from_millis(2_500)).await;
    let s = c.stats();
    assert!(s.reply_shortfalls >= 1, "{done} requests, {s:?}");
    assert!(s.reply_shortfalls <= 2, "{done} requests, {s:?}");
    assert!(
        s.retransmissions <= 8 * s.reply_shortfalls,
        "a resend per request in flight per period at most: {done} requests, {s:?}"
    );
    assert!(done >= 100, "{done} requests, {s:?}");
}
