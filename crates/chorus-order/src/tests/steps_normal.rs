//! PBFT §4.2, step by step, asserting the exact actions emitted.

use super::util::{effects, params, setup, timers, Setup};
use crate::io::{Action, Event, Outbox, PersistRecord, RejectReason, TimerId};
use crate::replica::Replica;
use chorus_core::{
    Batch, Cell, ClientId, LaneId, Millis, OrderingMode, PreparedCert, ProtocolParams, ReplicaId, ReplicaMsg,
    RequestSeq, Seq, Slot, View,
};
use std::sync::Arc;

fn pbft() -> ProtocolParams {
    params(OrderingMode::Pbft, 1)
}

fn replica(s: &Setup, me: u32) -> Replica {
    let mut out = Outbox::new();
    let r = Replica::new(
        s.cfg.clone(),
        ReplicaId(me),
        s.keys[me as usize].clone(),
        Millis(0),
        &mut out,
    );
    assert_eq!(timers(&out), vec![(TimerId::Status, Some(Millis(50)))]);
    r
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

const L0: LaneId = LaneId(0);

#[test]
fn backup_accepts_pre_prepare_persists_then_broadcasts_prepare() {
    let s = setup(4, 2, pbft());
    let mut r = replica(&s, 1);
    let batch = s.batch(0, 1..3);
    let pp = s.pre_prepare(0, 0, 0, 0, &batch);
    let mut out = Outbox::new();
    r.handle(
        Millis(5),
        Event::Message {
            from: ReplicaId(0),
            msg: ReplicaMsg::PrePrepare(pp.clone()),
        },
        &mut out,
    );
    // An undecided slot starts the lane's progress timer.
    assert_eq!(timers(&out), vec![(TimerId::ViewChange(L0), Some(Millis(405)))]);
    assert_eq!(
        effects(&mut out),
        vec![
            Action::Persist(PersistRecord::Accepted {
                lane: L0,
                view: View(0),
                slot: Slot(0),
                digest: batch.digest(),
                batch: Arc::new(batch.clone()),
            }),
            Action::Broadcast {
                msg: ReplicaMsg::Prepare(s.prepare(1, 0, 0, 0, batch.digest())),
            },
        ]
    );
    // A retransmission changes nothing.
    assert!(msg(&mut r, 6, 0, ReplicaMsg::PrePrepare(pp)).is_empty());
}

#[test]
fn prepared_persists_certificate_then_broadcasts_commit_and_commit_quorum_delivers() {
    let s = setup(4, 2, pbft());
    let mut r = replica(&s, 1);
    let batch = s.batch(0, 1..3);
    let d = batch.digest();
    msg(
        &mut r,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &batch)),
    );
    // Own prepare + replica 2's = 2f prepares from non-leaders: prepared.
    let e = msg(&mut r, 2, 2, ReplicaMsg::Prepare(s.prepare(2, 0, 0, 0, d)));
    let cert = PreparedCert {
        lane: L0,
        view: View(0),
        slot: Slot(0),
        digest: d,
        pre_prepare_sig: s.pre_prepare(0, 0, 0, 0, &batch).sig,
        prepares: vec![s.prepare(1, 0, 0, 0, d), s.prepare(2, 0, 0, 0, d)],
    };
    assert_eq!(
        e,
        vec![
            Action::Persist(PersistRecord::Prepared { cert }),
            Action::Broadcast {
                msg: ReplicaMsg::Commit(s.commit(1, 0, 0, 0, d)),
            },
        ]
    );
    assert!(msg(&mut r, 3, 3, ReplicaMsg::Prepare(s.prepare(3, 0, 0, 0, d))).is_empty());
    // Own commit + the leader's: 2 < 2f+1.
    assert!(msg(&mut r, 4, 0, ReplicaMsg::Commit(s.commit(0, 0, 0, 0, d))).is_empty());
    let mut out = Outbox::new();
    r.handle(
        Millis(5),
        Event::Message {
            from: ReplicaId(2),
            msg: ReplicaMsg::Commit(s.commit(2, 0, 0, 0, d)),
        },
        &mut out,
    );
    // Nothing is left to do in the lane: the progress timer stops.
    assert_eq!(timers(&out), vec![(TimerId::ViewChange(L0), None)]);
    let cell = Cell {
        lane: L0,
        slot: Slot(0),
    };
    assert_eq!(
        effects(&mut out),
        vec![
            Action::Persist(PersistRecord::Decided {
                cell,
                digest: d,
                batch: Arc::new(batch.clone()),
            }),
            Action::Deliver {
                seq: Seq(0),
                cell,
                batch: Arc::new(batch),
            },
        ]
    );
    assert_eq!(r.status().next_delivery, Seq(1));
    assert_eq!(r.counters().decided, 1);
}

#[test]
fn leader_cuts_a_batch_persists_then_broadcasts_pre_prepare() {
    let mut p = pbft();
    p.batch_max_requests = 2;
    let s = setup(4, 2, p);
    let mut r = replica(&s, 0);
    let mut out = Outbox::new();
    let q1 = s.request(0, 1, b"a");
    // Nothing of the lane is undecided: the request goes at once, alone,
    // instead of waiting the batch delay for company.
    r.handle(Millis(1), Event::Request(q1.clone()), &mut out);
    assert!(
        !timers(&out).iter().any(|(id, _)| matches!(id, TimerId::Batch(_))),
        "{:?}",
        timers(&out)
    );
    let batch = Batch {
        requests: vec![q1],
        time_ms: 0,
    };
    assert_eq!(
        effects(&mut out),
        vec![
            Action::Persist(PersistRecord::Accepted {
                lane: L0,
                view: View(0),
                slot: Slot(0),
                digest: batch.digest(),
                batch: Arc::new(batch.clone()),
            }),
            Action::Broadcast {
                msg: ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &batch)),
            },
        ]
    );
    // Slot 1 belongs to replica 1 (block-wise rotation): replica 0 waits.
    r.handle(Millis(9), Event::Request(s.request(0, 2, b"c")), &mut out);
    assert!(effects(&mut out).is_empty());
    assert_eq!(r.counters().proposals, 1);
}

/// Adaptive batching at low load (issue 13): an idle leader proposes a
/// partial batch at once; with one of its proposals undecided, a partial
/// batch waits the batch delay and collects what arrives meanwhile, and a
/// full one goes at once.
#[test]
fn an_idle_leader_proposes_at_once_and_a_busy_one_waits_the_batch_delay() {
    let mut p = pbft();
    p.leader_rotation = chorus_core::LeaderRotation::Fixed;
    p.batch_max_requests = 3;
    let s = setup(4, 2, p);
    let mut r = replica(&s, 0);
    let mut out = Outbox::new();
    r.handle(Millis(1), Event::Request(s.request(0, 1, b"a")), &mut out);
    assert_eq!(r.counters().proposals, 1, "idle: at once");
    effects(&mut out);
    r.handle(Millis(2), Event::Request(s.request(0, 2, b"b")), &mut out);
    assert!(
        timers(&out).contains(&(TimerId::Batch(L0), Some(Millis(3)))),
        "{:?}",
        timers(&out)
    );
    r.handle(Millis(2), Event::Request(s.request(1, 1, b"c")), &mut out);
    assert_eq!(
        r.counters().proposals,
        1,
        "slot 0 is undecided: a partial batch waits"
    );
    r.handle(Millis(3), Event::Timer(TimerId::Batch(L0)), &mut out);
    assert_eq!(r.counters().proposals, 2);
    let sizes: Vec<usize> = effects(&mut out)
        .iter()
        .filter_map(|a| match a {
            Action::Broadcast {
                msg: ReplicaMsg::PrePrepare(pp),
            } => Some(pp.batch.requests.len()),
            _ => None,
        })
        .collect();
    assert_eq!(sizes, vec![2], "the two that waited, in one batch");
    for seq in 2..5 {
        r.handle(Millis(4), Event::Request(s.request(1, seq, b"d")), &mut out);
    }
    assert_eq!(r.counters().proposals, 3, "a full batch goes at once");
}

/// With one lane an idle leader still spaces its batches by the batch delay
/// (a slot costs the same CPU whatever it carries): a request that finds
/// the lane idle but its last batch younger than the delay waits for the
/// spacing to end, not for its own delay, and then goes.
#[test]
fn an_idle_single_lane_leader_spaces_its_batches_by_the_batch_delay() {
    let (s, mut r) = spaced_after_slot_0(OrderingMode::Pbft, 1);
    assert_eq!(r.counters().proposals, 1, "nothing proposed before: at once");
    assert_eq!(
        r.status().next_delivery,
        Seq(1),
        "slot 0 decided: the lane is idle"
    );
    let mut out = Outbox::new();
    r.handle(Millis(12), Event::Request(s.request(0, 2, b"b")), &mut out);
    assert_eq!(r.counters().proposals, 1, "the last batch went at 10: wait");
    assert!(
        timers(&out).contains(&(TimerId::Batch(L0), Some(Millis(15)))),
        "armed for the end of the spacing, not the request's own delay (17): {:?}",
        timers(&out)
    );
    r.handle(Millis(15), Event::Timer(TimerId::Batch(L0)), &mut out);
    assert_eq!(r.counters().proposals, 2);
}

/// `mode` with `lanes` lanes, a fixed leader, batches of 3 and a 5 ms batch
/// delay; replica 0 led and decided slot 0 of lane 0 (one request of client
/// 0, whose owner lane it is) at 10–11.
fn spaced_after_slot_0(mode: OrderingMode, lanes: u32) -> (Setup, Replica) {
    let mut p = params(mode, lanes);
    p.leader_rotation = chorus_core::LeaderRotation::Fixed;
    p.batch_max_requests = 3;
    p.batch_delay_ms = 5;
    let s = setup(4, 2, p);
    let mut r = replica(&s, 0);
    lead_and_decide_slot_0(&s, &mut r, 0, s.request(0, 1, b"a"));
    (s, r)
}

/// Replica 0 leads slot 0 of `lane` with the one-request batch `q` at 10;
/// replicas 1–3 prepare and commit it at 11.
fn lead_and_decide_slot_0(s: &Setup, r: &mut Replica, lane: u32, q: chorus_core::Request) {
    let mut out = Outbox::new();
    r.handle(Millis(10), Event::Request(q.clone()), &mut out);
    let d = Batch {
        requests: vec![q],
        time_ms: 0,
    }
    .digest();
    for p in 1..4 {
        msg(r, 11, p, ReplicaMsg::Prepare(s.prepare(p, lane, 0, 0, d)));
    }
    for p in 1..4 {
        msg(r, 11, p, ReplicaMsg::Commit(s.commit(p, lane, 0, 0, d)));
    }
}

/// The spacing holds back only partial batches: a full one goes at once.
#[test]
fn a_full_batch_goes_during_the_single_lane_spacing() {
    let (s, mut r) = spaced_after_slot_0(OrderingMode::Pbft, 1);
    assert_eq!(r.status().next_delivery, Seq(1));
    let mut out = Outbox::new();
    r.handle(Millis(12), Event::Request(s.request(0, 2, b"b")), &mut out);
    r.handle(Millis(12), Event::Request(s.request(1, 1, b"c")), &mut out);
    assert_eq!(r.counters().proposals, 1, "partial: waits for the spacing");
    r.handle(Millis(12), Event::Request(s.request(1, 2, b"d")), &mut out);
    assert_eq!(r.counters().proposals, 2, "full: at once");
}

/// Where lanes interleave, every round waits for its slowest lane: an idle
/// lane proposes at once however recent its last batch (cop, 2 pillars).
#[test]
fn an_idle_lane_of_several_proposes_at_once_after_a_recent_batch() {
    let (s, mut r) = spaced_after_slot_0(OrderingMode::Cop, 2);
    let mut out = Outbox::new();
    r.handle(Millis(12), Event::Request(s.request(0, 2, b"b")), &mut out);
    let lane0_slot1 = effects(&mut out).iter().any(|a| {
        matches!(a, Action::Broadcast { msg: ReplicaMsg::PrePrepare(pp) }
            if pp.lane == L0 && pp.slot == Slot(1) && pp.batch.requests.len() == 1)
    });
    assert!(lane0_slot1, "lane 0 proposed slot 1 at once");
}

#[test]
fn bad_requests_are_rejected_with_a_reason() {
    let s = setup(4, 2, pbft());
    let mut r = replica(&s, 1);
    let mut out = Outbox::new();
    let mut bad = s.request(0, 1, b"a");
    bad.op = bytes::Bytes::from_static(b"tampered");
    r.handle(Millis(1), Event::Request(bad), &mut out);
    let mut unknown = s.request(0, 2, b"a");
    unknown.client = ClientId(77);
    r.handle(Millis(1), Event::Request(unknown), &mut out);
    assert_eq!(
        effects(&mut out),
        vec![
            Action::Reject {
                client: ClientId(0),
                seq: RequestSeq(1),
                reason: RejectReason::BadAuthenticator,
            },
            Action::Reject {
                client: ClientId(77),
                seq: RequestSeq(2),
                reason: RejectReason::UnknownClient,
            },
        ]
    );
    assert_eq!(r.status().pool_len, 0);
}

#[test]
fn invalid_pre_prepares_are_rejected_and_change_nothing() {
    let s = setup(4, 2, pbft());
    let mut r = replica(&s, 1);
    let batch = s.batch(0, 1..3);
    let before = r.status();
    // Slot 0's leader is replica 0, not 2.
    let e = msg(
        &mut r,
        1,
        2,
        ReplicaMsg::PrePrepare(s.pre_prepare(2, 0, 0, 0, &batch)),
    );
    assert!(e.is_empty());
    assert_eq!(r.counters().rejected("wrong-leader"), 1);
    // Signed by someone else.
    msg(
        &mut r,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(3, 0, 0, 0, &batch)),
    );
    assert_eq!(r.counters().rejected("bad-signature"), 1);
    // Digest does not match the batch.
    let mut pp = s.pre_prepare(0, 0, 0, 0, &batch);
    pp.batch.requests.pop();
    msg(&mut r, 1, 0, ReplicaMsg::PrePrepare(pp));
    assert_eq!(r.counters().rejected("bad-digest"), 1);
    // A request whose signature is wrong (a MAC entry wrong only here is
    // held for vouchers instead: `steps_request_auth.rs`).
    let mut forged = chorus_core::Request::with_signature(
        &s.tag(),
        ClientId(1),
        RequestSeq(5),
        0,
        bytes::Bytes::from_static(b"x"),
        &s.clients[1],
    );
    forged.op = bytes::Bytes::from_static(b"y");
    let bad_batch = Batch {
        requests: vec![s.request(0, 1, b"ok"), forged],
        time_ms: 0,
    };
    msg(
        &mut r,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &bad_batch)),
    );
    assert_eq!(r.counters().rejected("bad-request-auth"), 1);
    // A request from a client that does not exist.
    let mut stranger = s.request(0, 9, b"x");
    stranger.client = ClientId(55);
    let stranger_batch = Batch {
        requests: vec![stranger],
        time_ms: 0,
    };
    msg(
        &mut r,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &stranger_batch)),
    );
    assert_eq!(r.counters().rejected("unknown-client"), 1);
    // Commit claiming to be someone else's.
    msg(
        &mut r,
        1,
        2,
        ReplicaMsg::Commit(s.commit(3, 0, 0, 0, batch.digest())),
    );
    assert_eq!(r.counters().rejected("replica-mismatch"), 1);
    // Prepare from the slot's leader.
    msg(
        &mut r,
        1,
        0,
        ReplicaMsg::Prepare(s.prepare(0, 0, 0, 0, batch.digest())),
    );
    assert_eq!(r.counters().rejected("prepare-from-leader"), 1);
    // Out-of-range sender and lane.
    msg(
        &mut r,
        1,
        9,
        ReplicaMsg::Commit(s.commit(9, 0, 0, 0, batch.digest())),
    );
    assert_eq!(r.counters().rejected("bad-sender"), 1);
    msg(
        &mut r,
        1,
        2,
        ReplicaMsg::Commit(s.commit(2, 3, 0, 0, batch.digest())),
    );
    assert_eq!(r.counters().rejected("bad-lane"), 1);
    let mut after = r.status();
    after.counters = before.counters.clone();
    assert_eq!(after, before);
}

#[test]
fn leader_equivocation_is_detected_and_only_one_prepare_sent() {
    let s = setup(4, 2, pbft());
    let mut r = replica(&s, 1);
    let a = s.batch(0, 1..2);
    let b = s.batch(1, 1..2);
    let e = msg(
        &mut r,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &a)),
    );
    assert_eq!(e.len(), 2);
    let e = msg(
        &mut r,
        2,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &b)),
    );
    assert!(e.is_empty());
    assert_eq!(r.counters().rejected("equivocation"), 1);
}

#[test]
fn messages_for_future_views_and_above_the_window_are_buffered_with_a_bound() {
    let mut p = pbft();
    p.future_msgs_per_peer = 3;
    let s = setup(4, 2, p);
    let mut r = replica(&s, 1);
    let d = s.batch(0, 1..2).digest();
    for slot in 0..3 {
        msg(&mut r, 1, 2, ReplicaMsg::Prepare(s.prepare(2, 0, 4, slot, d)));
    }
    msg(&mut r, 1, 2, ReplicaMsg::Prepare(s.prepare(2, 0, 0, 40, d)));
    assert_eq!(r.counters().buffered, 3);
    assert_eq!(r.counters().rejected("buffer-full"), 1);
    assert_eq!(r.lane(L0).map(|l| l.buffered()), Some(3));
}

#[test]
fn single_replica_orders_on_its_own() {
    let mut p = pbft();
    p.batch_max_requests = 1;
    let s = setup(1, 1, p);
    let mut out = Outbox::new();
    let mut r = Replica::new(
        s.cfg.clone(),
        ReplicaId(0),
        s.keys[0].clone(),
        Millis(0),
        &mut out,
    );
    out.drain();
    r.handle(Millis(1), Event::Request(s.request(0, 1, b"x")), &mut out);
    let kinds = super::util::kinds(&effects(&mut out));
    assert_eq!(
        kinds,
        vec![
            "persist accepted",
            "broadcast pre-prepare",
            "persist prepared",
            "broadcast commit",
            "persist decided",
            "deliver 0"
        ]
    );
}

#[test]
fn a_prepare_with_a_bad_signature_never_makes_a_certificate() {
    // Prepare signatures are checked lazily, when a certificate could form.
    let s = setup(4, 2, pbft());
    let mut r = replica(&s, 1);
    let batch = s.batch(0, 1..3);
    let d = batch.digest();
    msg(
        &mut r,
        1,
        0,
        ReplicaMsg::PrePrepare(s.pre_prepare(0, 0, 0, 0, &batch)),
    );
    // Replica 2's prepare carrying replica 3's signature: dropped when checked.
    let mut forged = s.prepare(2, 0, 0, 0, d);
    forged.sig = s.prepare(3, 0, 0, 0, d).sig;
    assert!(msg(&mut r, 2, 2, ReplicaMsg::Prepare(forged)).is_empty());
    assert_eq!(r.counters().rejected("bad-signature"), 1);
    // Replica 3's valid prepare makes the certificate, without the forged one.
    let e = msg(&mut r, 3, 3, ReplicaMsg::Prepare(s.prepare(3, 0, 0, 0, d)));
    let cert = PreparedCert {
        lane: L0,
        view: View(0),
        slot: Slot(0),
        digest: d,
        pre_prepare_sig: s.pre_prepare(0, 0, 0, 0, &batch).sig,
        prepares: vec![s.prepare(1, 0, 0, 0, d), s.prepare(3, 0, 0, 0, d)],
    };
    assert_eq!(
        e,
        vec![
            Action::Persist(PersistRecord::Prepared { cert: cert.clone() }),
            Action::Broadcast {
                msg: ReplicaMsg::Commit(s.commit(1, 0, 0, 0, d)),
            },
        ]
    );
    assert!(crate::certs::verify_prepared_cert(&s.cfg, &cert).is_ok());
    // Replica 2 may still send its real prepare; it changes nothing now.
    assert!(msg(&mut r, 4, 2, ReplicaMsg::Prepare(s.prepare(2, 0, 0, 0, d))).is_empty());
}

#[test]
fn a_verified_request_skips_only_the_authenticator_check() {
    let s = setup(4, 2, pbft());
    let mut r = replica(&s, 1);
    let mut out = Outbox::new();
    r.handle_verified_request(Millis(1), s.request(0, 1, b"ok"), &mut out);
    assert_eq!(r.status().pool_len, 1);
    // Shape checks still apply: an unknown client is refused.
    let mut unknown = s.request(0, 2, b"x");
    unknown.client = ClientId(99);
    let mut out = Outbox::new();
    r.handle_verified_request(Millis(2), unknown, &mut out);
    assert!(effects(&mut out).iter().any(|a| matches!(
        a,
        Action::Reject {
            reason: RejectReason::UnknownClient,
            ..
        }
    )));
    assert_eq!(r.status().pool_len, 1);
}

#[test]
fn with_the_pipeline_full_a_leader_only_proposes_full_batches() {
    for depth in [1, 2, 4] {
        pipeline_full_at(depth);
    }
}

fn pipeline_full_at(depth: u32) {
    let mut p = pbft();
    p.proposal_depth = depth;
    p.leader_rotation = chorus_core::LeaderRotation::Fixed;
    p.batch_max_requests = 2;
    p.pool_max_per_client = 64;
    let s = setup(4, 2, p);
    let mut r = replica(&s, 0);
    let mut out = Outbox::new();
    let mut seq = 0;
    // Partial batches go out once the batch delay passed, until
    // `proposal_depth` slots are undecided.
    for i in 0..depth as u64 {
        seq += 1;
        r.handle(Millis(10 * i), Event::Request(s.request(0, seq, b"a")), &mut out);
        r.handle(Millis(10 * i + 5), Event::Timer(TimerId::Batch(L0)), &mut out);
    }
    effects(&mut out);
    assert_eq!(r.counters().proposals, depth as u64);
    // The next partial batch waits however long it has waited...
    seq += 1;
    r.handle(Millis(100), Event::Request(s.request(0, seq, b"b")), &mut out);
    r.handle(Millis(200), Event::Timer(TimerId::Batch(L0)), &mut out);
    assert_eq!(r.counters().proposals, depth as u64);
    // ...but a full one goes.
    seq += 1;
    r.handle(Millis(201), Event::Request(s.request(1, seq, b"c")), &mut out);
    assert_eq!(r.counters().proposals, depth as u64 + 1);
}
