//! Issue 16 finding 6: signing keys reused in two clusters. Every request
//! authenticator and every signed replica message is bound to the cluster
//! (`chorus_core::domain`), so what a Byzantine client or replica of cluster
//! A signed is rejected, and counted, by the replicas of cluster B even
//! though the same keys verify it.

use super::util::{broadcasts, handle, msg, params, replica, setup, Setup};
use crate::certs::{verify_checkpoint_cert, verify_prepared_cert, verify_view_change_sig};
use crate::io::{Action, Event, RejectReason};
use bytes::Bytes;
use chorus_core::{
    Batch, ClientId, Digest, LaneId, NewView, OrderingMode, ReplicaId, ReplicaMsg, Request, RequestSeq,
    SigKind, Signature, View, ViewChange,
};
use std::sync::Arc;

/// Two clusters with the very same replica and client keys, told apart only
/// by their cluster id.
fn twins() -> (Setup, Setup) {
    let named = |id: &str| {
        let mut s = setup(4, 2, params(OrderingMode::Pbft, 1));
        let mut cfg = (*s.cfg).clone();
        cfg.params.cluster_id = id.into();
        s.cfg = Arc::new(cfg);
        s
    };
    let (a, b) = (named("cluster-a"), named("cluster-b"));
    assert_eq!(a.cfg.replicas, b.cfg.replicas, "same replica keys");
    assert_eq!(a.cfg.clients, b.cfg.clients, "same client keys");
    (a, b)
}

fn view_change(s: &Setup, replica: u32, view: u64) -> ViewChange {
    s.view_change(replica, view, None, vec![])
}

fn rejected(actions: &[Action]) -> Vec<RejectReason> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Reject { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_request_authenticated_for_another_cluster_is_rejected_with_the_same_keys() {
    let (a, b) = twins();
    let signed = |s: &Setup, seq| {
        Request::with_signature(
            &s.tag(),
            ClientId(1),
            RequestSeq(seq),
            0,
            Bytes::from_static(b"op"),
            &a.clients[1],
        )
    };
    // The same requests are good in cluster A...
    let mut ra = replica(&a, 0);
    assert!(rejected(&handle(&mut ra, 1, Event::Request(a.request(0, 1, b"op")))).is_empty());
    assert!(rejected(&handle(&mut ra, 1, Event::Request(signed(&a, 2)))).is_empty());
    assert_eq!(ra.counters().requests_admitted, 2);
    // ...and rejected by a replica of B, MAC vector and signature alike.
    let mut rb = replica(&b, 0);
    let e = handle(&mut rb, 1, Event::Request(a.request(0, 1, b"op")));
    assert_eq!(rejected(&e), vec![RejectReason::BadAuthenticator]);
    let e = handle(&mut rb, 1, Event::Request(signed(&a, 2)));
    assert_eq!(rejected(&e), vec![RejectReason::BadAuthenticator]);
    assert_eq!(rb.counters().requests_admitted, 0);
    assert_eq!(rb.counters().requests_rejected.get("bad-authenticator"), Some(&2));
    // B's own client still gets in.
    assert!(rejected(&handle(&mut rb, 2, Event::Request(b.request(0, 1, b"op")))).is_empty());
    assert_eq!(rb.counters().requests_admitted, 1);

    // A B-signed pre-prepare carrying a request signed for A is refused too.
    let mut backup = replica(&b, 2);
    let batch = Batch {
        requests: vec![b.request(0, 1, b"ok"), signed(&a, 3)],
        time_ms: 0,
    };
    let e = msg(
        &mut backup,
        1,
        0,
        ReplicaMsg::PrePrepare(b.pre_prepare(0, 0, 0, 0, &batch)),
    );
    assert!(broadcasts(&e).is_empty(), "{e:?}");
    assert_eq!(backup.counters().rejected("bad-request-auth"), 1);
}

#[test]
fn signed_replica_messages_from_another_cluster_are_rejected_and_counted() {
    let (a, b) = twins();
    let batch = b.batch(0, 1..2);
    let d = batch.digest();

    // Pre-prepare: A's leader signature is refused by B's backup (the batch
    // itself is B's, so only the signature is foreign).
    let mut r1 = replica(&b, 1);
    let e = msg(
        &mut r1,
        1,
        0,
        ReplicaMsg::PrePrepare(a.pre_prepare(0, 0, 0, 0, &batch)),
    );
    assert!(broadcasts(&e).is_empty(), "{e:?}");
    assert_eq!(r1.counters().rejected("bad-signature"), 1);
    // B's own pre-prepare is accepted: replica 1 prepares.
    let e = msg(
        &mut r1,
        2,
        0,
        ReplicaMsg::PrePrepare(b.pre_prepare(0, 0, 0, 0, &batch)),
    );
    assert!(broadcasts(&e).iter().any(|m| matches!(m, ReplicaMsg::Prepare(_))));

    // Prepares: A-signed ones never complete the certificate.
    for p in [2, 3] {
        let e = msg(&mut r1, 3, p, ReplicaMsg::Prepare(a.prepare(p, 0, 0, 0, d)));
        assert!(broadcasts(&e).is_empty(), "{e:?}");
    }
    assert_eq!(r1.counters().rejected("bad-signature"), 3);
    let e = msg(&mut r1, 4, 2, ReplicaMsg::Prepare(b.prepare(2, 0, 0, 0, d)));
    assert!(broadcasts(&e).iter().any(|m| matches!(m, ReplicaMsg::Commit(_))));

    // Checkpoint vote.
    let e = msg(
        &mut r1,
        5,
        2,
        ReplicaMsg::Checkpoint(a.vote(2, 4, Digest::of(b"s"))),
    );
    assert!(e.is_empty(), "{e:?}");
    assert_eq!(r1.counters().rejected("bad-vote-signature"), 1);

    // View change.
    let before = r1.counters().rejected("bad-signature");
    msg(&mut r1, 6, 2, ReplicaMsg::ViewChange(view_change(&a, 2, 1)));
    assert_eq!(r1.counters().rejected("bad-signature"), before + 1);
    assert!(verify_view_change_sig(&b.cfg, &view_change(&b, 2, 1)).is_ok());

    // New view (replica 1 is lane 0's new-view primary of view 1).
    let mut nv = NewView {
        lane: LaneId(0),
        view: View(1),
        view_changes: (1..4).map(|r| view_change(&a, r, 1)).collect(),
        reproposals: vec![],
        replica: ReplicaId(1),
        sig: Signature([0; 64]),
        excluded: vec![],
    };
    nv.sig = a.sign(1, SigKind::NewView, &nv.signing_digest());
    let mut r2 = replica(&b, 2);
    msg(&mut r2, 1, 1, ReplicaMsg::NewView(nv));
    assert_eq!(r2.counters().rejected("bad-signature"), 1);
}

/// The certificates that travel as evidence (state transfer's checkpoint
/// certificate, view changes' prepared certificates) are checked against
/// the verifier's cluster, not the signer's.
#[test]
fn certificates_from_another_cluster_do_not_verify() {
    let (a, b) = twins();
    let state = Digest::of(b"state");
    assert_eq!(
        verify_checkpoint_cert(&a.cfg, &a.checkpoint_cert(4, state, &[0, 1, 2])),
        Ok(())
    );
    assert_eq!(
        verify_checkpoint_cert(&b.cfg, &a.checkpoint_cert(4, state, &[0, 1, 2])),
        Err("bad-vote-signature")
    );
    let batch = b.batch(0, 1..2);
    assert_eq!(
        verify_prepared_cert(&a.cfg, &a.prepared_cert(0, 0, 0, 0, &batch, &[1, 2])),
        Ok(())
    );
    assert_eq!(
        verify_prepared_cert(&b.cfg, &a.prepared_cert(0, 0, 0, 0, &batch, &[1, 2])),
        Err("cert-bad-pre-prepare-sig")
    );
    // A's prepares under B's pre-prepare signature.
    let mut mixed = b.prepared_cert(0, 0, 0, 0, &batch, &[1, 2]);
    mixed.prepares = a.prepared_cert(0, 0, 0, 0, &batch, &[1, 2]).prepares;
    assert_eq!(verify_prepared_cert(&b.cfg, &mixed), Err("cert-bad-prepare-sig"));
}
