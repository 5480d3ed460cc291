//! What a backup checks about the requests of a proposed batch (DESIGN §4,
//! §6): issue 8 findings 4 (Aardvark's "Big MAC" attack) and 12 (a request
//! of another lane).

use super::harness::Cluster;
use super::util::{broadcasts, effects, params, replica, setup, Setup};
use crate::io::{Action, Event, Outbox, PersistRecord};
use crate::replica::Replica;
use chorus_core::{
    Authenticator, Batch, LaneId, LeaderRotation, Mac, Millis, OrderingMode, ProtocolParams, ReplicaId,
    ReplicaMsg, Request, Slot, View,
};

fn pbft() -> ProtocolParams {
    params(OrderingMode::Pbft, 1)
}

fn msg(r: &mut Replica, now: u64, from: u32, m: ReplicaMsg) -> Vec<Action> {
    let mut out = Outbox::new();
    r.handle(
        Millis(now),
        Event::Message {
            from: ReplicaId(from),
            msg: m,
        },
        &mut out,
    );
    effects(&mut out)
}

/// A request whose MAC vector is valid only at the replicas in `valid`.
fn partial_mac(s: &Setup, client: usize, seq: u64, valid: &[usize]) -> Request {
    let mut r = s.request(client, seq, format!("c{client}s{seq}").as_bytes());
    if let Authenticator::Macs(m) = &mut r.auth {
        for (i, mac) in std::sync::Arc::make_mut(m).iter_mut().enumerate() {
            if !valid.contains(&i) {
                *mac = Mac([0x5A; 16]);
            }
        }
    }
    r
}

/// Aardvark §4.2 (Big MAC): the request's MAC is valid at the primary 0 and
/// at replica 1 only (f+1 at n=4). Backup 2 cannot verify it, but must not
/// refuse the correct primary's pre-prepare for it: it holds it until f
/// other backups prepared the batch, then accepts and prepares it itself.
#[test]
fn a_backup_holds_a_batch_it_cannot_verify_until_f_plus_one_vouch() {
    let s = setup(4, 2, pbft());
    let mut r = replica(&s, 2);
    let batch = Batch {
        requests: vec![s.request(0, 1, b"ok"), partial_mac(&s, 0, 2, &[0, 1])],
        time_ms: 0,
    };
    let pp = s.pre_prepare(0, 0, 0, 0, &batch);
    assert!(msg(&mut r, 1, 0, ReplicaMsg::PrePrepare(pp.clone())).is_empty());
    assert_eq!(r.counters().rejected_total(), 0, "{:?}", r.counters().rejected);
    assert_eq!(r.counters().held_for_vouchers, 1);
    // A retransmission changes nothing; an equivocating one is refused.
    assert!(msg(&mut r, 2, 0, ReplicaMsg::PrePrepare(pp)).is_empty());
    let other = Batch {
        requests: vec![partial_mac(&s, 0, 3, &[0, 1])],
        time_ms: 0,
    };
    assert!(msg(
        &mut r,
        2,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &other))
    )
    .is_empty());
    assert_eq!(r.counters().rejected("equivocation"), 1);
    // Replica 1 (whose MAC is valid) prepares: with the primary, f+1 vouch.
    let e = msg(
        &mut r,
        3,
        1,
        ReplicaMsg::Prepare(s.prepare(1, 0, 0, 0, batch.digest())),
    );
    // (Its own prepare and replica 1's are the 2f a certificate needs, so it
    // also commits.)
    assert_eq!(
        e[..2],
        vec![
            Action::Persist(PersistRecord::Accepted {
                lane: LaneId(0),
                view: View(0),
                slot: Slot(0),
                digest: batch.digest(),
                batch: batch.clone(),
            }),
            Action::Broadcast {
                msg: ReplicaMsg::Prepare(s.prepare(2, 0, 0, 0, batch.digest())),
            },
        ]
    );
    assert!(broadcasts(&e)
        .iter()
        .any(|m| matches!(m, ReplicaMsg::Commit(c) if c.digest == batch.digest())));
    // Commits from 0 and 1 decide it.
    msg(
        &mut r,
        4,
        0,
        ReplicaMsg::Commit(s.commit(0, 0, 0, 0, batch.digest())),
    );
    msg(
        &mut r,
        4,
        1,
        ReplicaMsg::Commit(s.commit(1, 0, 0, 0, batch.digest())),
    );
    assert_eq!(r.counters().decided, 1);
}

/// A Byzantine primary cannot slip in a request nobody can verify: without
/// f other replicas vouching, the held pre-prepare is never accepted, and a
/// prepare of another digest, or of an older view, does not vouch.
#[test]
fn a_held_batch_without_vouchers_is_never_accepted() {
    let s = setup(4, 2, pbft());
    let mut r = replica(&s, 2);
    let forged = Batch {
        requests: vec![partial_mac(&s, 0, 1, &[0])],
        time_ms: 0,
    };
    assert!(msg(
        &mut r,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &forged))
    )
    .is_empty());
    let other = s.batch(0, 5..6);
    assert!(msg(
        &mut r,
        2,
        1,
        ReplicaMsg::Prepare(s.prepare(1, 0, 0, 0, other.digest()))
    )
    .is_empty());
    // The proposer's own prepare is refused and does not count twice.
    assert!(msg(
        &mut r,
        3,
        0,
        ReplicaMsg::Prepare(s.prepare(0, 0, 0, 0, forged.digest()))
    )
    .is_empty());
    assert_eq!(r.counters().rejected("prepare-from-leader"), 1);
    assert_eq!(r.lane(LaneId(0)).map(|l| l.open_slots(8)), Some(0));
}

/// Whole cluster, n=4 (f=1), fixed rotation: a client whose MAC vector is
/// valid only at the primary and one backup costs no view change, its
/// request executes once everywhere, and a correct client's request after it
/// completes too. Before the fix backups 2 and 3 refused every pre-prepare
/// carrying it and the lane changed view for ever.
#[test]
fn a_partial_mac_vector_costs_no_view_change() {
    let p = ProtocolParams {
        leader_rotation: LeaderRotation::Fixed,
        ..pbft()
    };
    let mut c = Cluster::new(4, 2, p);
    let req = partial_mac(&c.s, 0, 1, &[0, 1]);
    c.submit_request(req);
    c.run_for(50);
    c.submit(1, 1);
    c.run_for(5_000);
    for i in 0..4 {
        assert_eq!(c.replica(i).counters().view_changes, 0, "replica {i}");
    }
    assert!(c.all_executed(&[(0, 1), (1, 1)]));
    c.check_agreement();
}

/// Issue 8 finding 12: requests are owned by lane `client mod P`
/// (`ClusterConfig::owner_lane`); a leader of another lane must not propose
/// them (they could be ordered twice, once per lane).
#[test]
fn a_request_of_another_lane_is_rejected() {
    let s = setup(4, 2, params(OrderingMode::Cop, 2));
    let mut r = replica(&s, 1);
    // Client 1 belongs to lane 1; replica 0 leads slot 0 of lane 0.
    let batch = s.batch(1, 1..2);
    assert_eq!(s.cfg.owner_lane(batch.requests[0].client), LaneId(1));
    let e = msg(
        &mut r,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &batch)),
    );
    assert!(e.is_empty(), "{e:?}");
    assert_eq!(r.counters().rejected("wrong-lane-request"), 1);
    // The same request in its own lane is fine.
    let e = msg(
        &mut r,
        2,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 1, 0, 0, &batch)),
    );
    assert_eq!(broadcasts(&e).len(), 1);
}
