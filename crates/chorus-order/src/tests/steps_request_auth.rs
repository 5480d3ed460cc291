//! What a backup checks about the requests of a proposed batch (DESIGN §4,
//! §6): issue 8 findings 4 (Aardvark's "Big MAC" attack) and 12 (a request
//! of another lane).

use super::harness::Cluster;
use super::util::{broadcasts, effects, params, replica, setup, Setup};
use crate::io::{Action, Event, Outbox, PersistRecord, RejectReason};
use crate::replica::Replica;
use chorus_core::{
    Authenticator, Batch, ClientId, LaneId, LeaderRotation, Mac, Millis, OrderingMode, ProtocolParams,
    ReplicaId, ReplicaMsg, Request, RequestSeq, Slot, UnverifiableRequest, View,
};
use std::sync::Arc;

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
    // Held, and every replica hears which request failed here.
    let held = msg(&mut r, 1, 0, ReplicaMsg::PrePrepare(pp.clone()));
    let expected = UnverifiableRequest {
        lane: LaneId(0),
        view: View(0),
        slot: Slot(0),
        client: ClientId(0),
        seq: RequestSeq(2),
        content: batch.requests[1].digest(),
        auth: batch.requests[1].auth_digest(),
    };
    assert_eq!(
        held,
        vec![Action::Broadcast {
            msg: ReplicaMsg::Unverifiable(expected)
        }]
    );
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
                batch: Arc::new(batch.clone()),
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
    // Held: the only effect is the report of the request that failed here.
    let held = msg(
        &mut r,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &forged)),
    );
    assert!(
        matches!(
            held.as_slice(),
            [Action::Broadcast {
                msg: ReplicaMsg::Unverifiable(_)
            }]
        ),
        "{held:?}"
    );
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

/// Seed 10800016: f+1 replicas report a request unverifiable at them. A
/// replica that verified the very same request from its client (replica 1,
/// the vector's valid entries being 0 and 1) strikes the client: its held
/// copy is dropped and its further MAC-vector requests are refused. f
/// reports, a report about another authenticator (a Byzantine leader's
/// altered copy), or a request learnt only from a pre-prepare do nothing.
#[test]
fn f_plus_one_reports_strike_a_client_whose_own_vector_is_partial() {
    let s = setup(4, 2, pbft());
    let mut r = replica(&s, 1);
    let bad = partial_mac(&s, 0, 2, &[0, 1]);
    let report = |req: &Request| UnverifiableRequest {
        lane: LaneId(0),
        view: View(0),
        slot: Slot(0),
        client: req.client,
        seq: req.seq,
        content: req.digest(),
        auth: req.auth_digest(),
    };
    let client = |r: &mut Replica, req: Request| {
        let mut out = Outbox::default();
        r.handle(Millis(1), Event::Request(req), &mut out);
        effects(&mut out)
    };
    client(&mut r, bad.clone());
    assert_eq!(r.status().pool_len, 1);
    // Another authenticator for the same request: not ours, ignored.
    let mut altered = bad.clone();
    if let Authenticator::Macs(m) = &mut altered.auth {
        std::sync::Arc::make_mut(m)[0] = Mac([7; 16]);
    }
    for from in [2, 3] {
        msg(&mut r, 2, from, ReplicaMsg::Unverifiable(report(&altered)));
    }
    assert_eq!((r.status().pool_len, r.counters().clients_proven_partial), (1, 0));
    // f = 1 report is not enough; f+1 distinct ones are (a repeat is not).
    msg(&mut r, 2, 2, ReplicaMsg::Unverifiable(report(&bad)));
    msg(&mut r, 2, 2, ReplicaMsg::Unverifiable(report(&bad)));
    assert_eq!((r.status().pool_len, r.counters().clients_proven_partial), (1, 0));
    msg(&mut r, 2, 3, ReplicaMsg::Unverifiable(report(&bad)));
    assert_eq!((r.status().pool_len, r.counters().clients_proven_partial), (0, 1));
    // The client's next MAC-vector request is refused ("busy").
    let next = client(&mut r, partial_mac(&s, 0, 3, &[0, 1, 2, 3]));
    assert!(
        next.iter().any(|a| matches!(
            a,
            Action::Reject {
                reason: RejectReason::Busy,
                ..
            }
        )),
        "{next:?}"
    );
    assert_eq!(r.status().pool_len, 0);
}
