//! RCC §III-E SWITCHINSTANCE hand-over at the σ boundaries (`rcc_switch`):
//! a switch delivered at round `r_d` moves client `c` from lane `i` to `j`;
//! `i` owns rounds `<= r_d + σ`, `j` rounds above; a backup that cannot know
//! yet holds the pre-prepare; the old primary stops at once.

use super::util::{broadcasts, handle, kinds, msg, params, replica, sends, setup, Setup};
use crate::io::{Action, Event, RejectReason, TimerId};
use crate::replica::Replica;
use bytes::Bytes;
use chorus_core::{
    flags, switch_op, Assignments, Batch, ClientId, LaneId, OrderingMode, ReplicaMsg, Request, RequestSeq,
    Seq, Slot, StateChunk, Status, SwitchPolicy, View,
};

/// σ = 4 rounds, 4 instances, clients 0..8 (client 1 is owned by lane 1).
fn rcc() -> Setup {
    let p = chorus_core::ProtocolParams {
        max_lane_drift_slots: 4,
        ..params(OrderingMode::Rcc, 4)
    };
    setup(4, 8, p)
}

const C: usize = 1;

fn switch(s: &Setup, client: usize, seq: u64, to: u32) -> Request {
    let macs: Vec<_> = s
        .keys
        .iter()
        .map(|r| s.clients[client].pairwise_key(&r.public()))
        .collect();
    Request::with_macs(
        &s.tag(),
        ClientId(client as u64),
        RequestSeq(seq),
        flags::SWITCH_INSTANCE,
        switch_op(to),
        &macs,
    )
}

fn one(r: Request) -> Batch {
    Batch {
        requests: vec![r],
        time_ms: 0,
    }
}

/// Round 0 at replica 1: the others pre-prepare (the switch moving client C
/// to lane 2, in lane 2); replica 1, behind, pre-prepares a no-op in its own
/// lane.
fn round_0_with_the_switch(s: &Setup, r1: &mut Replica, sw: &Batch) {
    for lane in [0u32, 2, 3] {
        let b = if lane == 2 { sw.clone() } else { Batch::noop() };
        msg(
            r1,
            10,
            lane,
            ReplicaMsg::PrePrepare(s.pre_prepare(lane, lane, 0, 0, &b)),
        );
    }
}

/// Decide `batch` at `slot` of `lane` at replica `me` (its own lane's slot
/// must already carry its own pre-prepare of `batch`).
fn decide(s: &Setup, r: &mut Replica, me: u32, now: u64, lane: u32, slot: u64, batch: &Batch) -> Vec<Action> {
    let mut all = Vec::new();
    if lane != me {
        all.extend(msg(
            r,
            now,
            lane,
            ReplicaMsg::PrePrepare(s.pre_prepare(lane, lane, 0, slot, batch)),
        ));
    }
    for p in (0..4).filter(|p| *p != lane && *p != me) {
        all.extend(msg(
            r,
            now,
            p,
            ReplicaMsg::Prepare(s.prepare(p, lane, 0, slot, batch.digest())),
        ));
    }
    for p in (0..4).filter(|p| *p != me) {
        all.extend(msg(
            r,
            now,
            p,
            ReplicaMsg::Commit(s.commit(p, lane, 0, slot, batch.digest())),
        ));
    }
    all
}

/// Deliver round `round` at replica `me`: every lane decides a no-op except
/// those in `special`. The replica proposes a no-op in its own lane itself
/// (it is behind the others).
fn deliver_round(s: &Setup, r: &mut Replica, me: u32, round: u64, special: &[(u32, Batch)]) -> Vec<Action> {
    let batch_of = |lane: u32| {
        special
            .iter()
            .find(|(l, _)| *l == lane)
            .map_or_else(Batch::noop, |(_, b)| b.clone())
    };
    let mut all = Vec::new();
    for lane in (0..4).filter(|l| *l != me) {
        all.extend(msg(
            r,
            10 + round,
            lane,
            ReplicaMsg::PrePrepare(s.pre_prepare(lane, lane, 0, round, &batch_of(lane))),
        ));
    }
    for lane in 0..4 {
        all.extend(decide(s, r, me, 10 + round, lane, round, &batch_of(lane)));
    }
    assert_eq!(
        r.status().next_delivery,
        Seq((round + 1) * 4),
        "round {round} delivered"
    );
    all
}

fn prepared(actions: &[Action], lane: u32, slot: u64) -> bool {
    broadcasts(actions)
        .iter()
        .any(|m| matches!(m, ReplicaMsg::Prepare(p) if p.lane == LaneId(lane) && p.slot == Slot(slot)))
}

/// Replica 3 with client 1 switched from lane 1 to lane 2 at round 1.
fn switched_at_round_1() -> (Setup, Replica) {
    let s = rcc();
    let mut r3 = replica(&s, 3);
    deliver_round(&s, &mut r3, 3, 0, &[]);
    deliver_round(&s, &mut r3, 3, 1, &[(2, one(switch(&s, C, 1, 2)))]);
    assert_eq!(r3.counters().switches.get("applied"), Some(&1));
    (s, r3)
}

/// (a) The σ boundaries: with r_d = 1 and σ = 4, lane 1 may still carry the
/// client's requests in round 5 but not 6; lane 2 from round 6 on, not 5.
#[test]
fn the_old_lane_owns_rounds_up_to_rd_plus_sigma_and_the_new_one_above() {
    let (s, mut r3) = switched_at_round_1();
    let pp = |lane: u32, slot: u64, seq: u64| {
        ReplicaMsg::PrePrepare(s.pre_prepare(lane, lane, 0, slot, &one(s.request(C, seq, b"x"))))
    };
    let e = msg(&mut r3, 100, 1, pp(1, 5, 10));
    assert!(prepared(&e, 1, 5), "old lane at r_d+σ: {:?}", kinds(&e));
    let e = msg(&mut r3, 101, 1, pp(1, 6, 11));
    assert!(!prepared(&e, 1, 6), "old lane at r_d+σ+1");
    assert_eq!(r3.counters().rejected("wrong-lane-request"), 1);
    let e = msg(&mut r3, 102, 2, pp(2, 5, 12));
    assert!(!prepared(&e, 2, 5), "new lane at r_d+σ");
    assert_eq!(r3.counters().rejected("wrong-lane-request"), 2);
    let e = msg(&mut r3, 103, 2, pp(2, 6, 13));
    assert!(prepared(&e, 2, 6), "new lane at r_d+σ+1: {:?}", kinds(&e));
}

/// (b) The old primary stops proposing the client at once: a request of
/// the client pending at replica 1 (lane 1's primary) when the switch is
/// delivered moves to lane 2's queue and is never proposed in lane 1,
/// although rounds up to r_d + σ would still be lane 1's.
#[test]
fn the_old_primary_stops_proposing_the_client_once_it_delivers_the_switch() {
    let s = rcc();
    let mut r1 = replica(&s, 1);
    let sw = one(switch(&s, C, 1, 2));
    round_0_with_the_switch(&s, &mut r1, &sw);
    assert_eq!(r1.status().lanes[1].next_free_slot, Slot(1));
    // The client's request arrives; lane 1 is not behind, so it waits for
    // the batch delay…
    let e = handle(&mut r1, 10, Event::Request(s.request(C, 2, b"x")));
    assert!(broadcasts(&e).is_empty(), "{:?}", kinds(&e));
    assert_eq!(r1.status().lanes[1].pending, 1);
    // …and meanwhile round 0, with the switch, is delivered (replica 1's
    // own slot last: an idle leader proposes at once, and its lane would
    // be idle before the round, with the switch, is delivered).
    for lane in [0u32, 2, 3, 1] {
        let b = if lane == 2 { sw.clone() } else { Batch::noop() };
        decide(&s, &mut r1, 1, 10, lane, 0, &b);
    }
    assert_eq!(r1.status().next_delivery, Seq(4));
    assert_eq!(r1.status().lanes[1].pending, 0);
    assert_eq!(r1.status().lanes[2].pending, 1);
    let e = handle(&mut r1, 50, Event::Timer(TimerId::Batch(LaneId(1))));
    let proposed_c = broadcasts(&e).iter().any(|m| {
        matches!(m, ReplicaMsg::PrePrepare(pp)
            if pp.batch.requests.iter().any(|r| r.client == ClientId(C as u64)))
    });
    assert!(!proposed_c, "{:?}", kinds(&e));
}

/// The other interleaving: the old primary's own slot of the switch's round
/// decides before the switch's lane, its lane is idle, and it proposes the
/// client's pending request at once, before it delivers the switch. That
/// round is still its own (≤ r_d + σ, "no overlap" above), so the request is
/// ordered there, once, and never handed over to the new owner as well.
#[test]
fn an_old_primary_may_propose_its_client_within_the_drift_bound_and_it_is_ordered_once() {
    let s = rcc();
    let mut r1 = replica(&s, 1);
    let sw = one(switch(&s, C, 1, 2));
    round_0_with_the_switch(&s, &mut r1, &sw);
    let e = handle(&mut r1, 10, Event::Request(s.request(C, 2, b"x")));
    assert!(
        broadcasts(&e).is_empty(),
        "slot 0 of lane 1 is undecided: it waits"
    );
    let is_c = |r: &Request| r.client == ClientId(C as u64) && r.seq == RequestSeq(2);
    let mut proposed: Option<(Slot, Batch)> = None;
    for lane in 0..4u32 {
        let b = if lane == 2 { sw.clone() } else { Batch::noop() };
        for m in broadcasts(&decide(&s, &mut r1, 1, 10, lane, 0, &b)) {
            if let ReplicaMsg::PrePrepare(pp) = m {
                if pp.lane == LaneId(1) && pp.batch.requests.iter().any(is_c) {
                    proposed = Some((pp.slot, pp.batch.clone()));
                }
            }
        }
    }
    let (slot, batch) = proposed.expect("proposed while its lane was idle");
    assert_eq!(slot, Slot(1));
    assert!(
        slot.0 <= 4,
        "round {} is within σ = 4 of the switch's round 0",
        slot.0
    );
    assert_eq!(r1.status().next_delivery, Seq(4));
    assert_eq!(
        r1.status().lanes[2].pending,
        0,
        "in flight in lane 1, not handed over"
    );
    let mut delivered = 0;
    for lane in 0..4u32 {
        let b = if lane == 1 { batch.clone() } else { Batch::noop() };
        for a in decide(&s, &mut r1, 1, 20, lane, 1, &b) {
            if let Action::Deliver { batch, .. } = a {
                delivered += batch.requests.iter().filter(|r| is_c(r)).count();
            }
        }
    }
    assert_eq!(r1.status().next_delivery, Seq(8));
    assert_eq!(delivered, 1, "ordered once");
    assert_eq!(r1.status().lanes[2].pending, 0);
}

/// (c) A backup that has not delivered round ρ − σ − 1 holds a
/// pre-prepare for round ρ instead of judging it, and accepts it once
/// delivery catches up.
#[test]
fn a_pre_prepare_whose_owner_is_unknown_is_held_until_delivery_catches_up() {
    let s = rcc();
    let mut r3 = replica(&s, 3);
    let b = one(s.request(C, 1, b"x"));
    let e = msg(
        &mut r3,
        5,
        1,
        ReplicaMsg::PrePrepare(s.pre_prepare(1, 1, 0, 5, &b)),
    );
    assert!(!prepared(&e, 1, 5), "{:?}", kinds(&e));
    assert_eq!(r3.counters().switches.get("held"), Some(&1));
    assert!(r3.counters().rejected.is_empty(), "{:?}", r3.counters().rejected);
    let e = deliver_round(&s, &mut r3, 3, 0, &[]);
    assert!(prepared(&e, 1, 5), "released once round 0 is delivered");
}

/// (c') The hold matters: the switch delivered meanwhile (round 0) makes
/// lane 2 the owner from round 5 on, so the held pre-prepare of lane 1 for
/// round 5 is refused on release. Judged at once it would have been accepted.
#[test]
fn a_held_pre_prepare_is_judged_with_the_switches_delivered_meanwhile() {
    let s = rcc();
    let mut r3 = replica(&s, 3);
    let b = one(s.request(C, 2, b"x"));
    msg(
        &mut r3,
        5,
        1,
        ReplicaMsg::PrePrepare(s.pre_prepare(1, 1, 0, 5, &b)),
    );
    let e = deliver_round(&s, &mut r3, 3, 0, &[(2, one(switch(&s, C, 1, 2)))]);
    assert!(!prepared(&e, 1, 5), "{:?}", kinds(&e));
    assert_eq!(r3.counters().rejected("wrong-lane-request"), 1);
}

/// (d) A switch to the client's owner, to an instance that does not exist,
/// or outside `rcc` is refused at admission; a proposed switch in another
/// lane than its target, or beyond m, is refused by backups.
#[test]
fn a_switch_to_the_owner_or_out_of_range_or_outside_rcc_is_rejected() {
    let s = rcc();
    let mut r0 = replica(&s, 0);
    let refused = |e: &[Action]| {
        e.iter().any(|a| {
            matches!(
                a,
                Action::Reject {
                    reason: RejectReason::BadSwitch,
                    ..
                }
            )
        })
    };
    assert!(refused(&handle(&mut r0, 1, Event::Request(switch(&s, C, 1, 1)))));
    assert!(refused(&handle(&mut r0, 1, Event::Request(switch(&s, C, 2, 4)))));
    let e = handle(&mut r0, 1, Event::Request(switch(&s, C, 3, 2)));
    assert!(!refused(&e));
    assert_eq!(
        r0.status().lanes[2].pending,
        1,
        "a switch waits in its target lane"
    );
    let pbft = setup(4, 8, params(OrderingMode::Pbft, 1));
    let mut p0 = replica(&pbft, 0);
    assert!(refused(&handle(
        &mut p0,
        1,
        Event::Request(switch(&pbft, C, 1, 0))
    )));
    let mut r3 = replica(&s, 3);
    for (lane, to) in [(2u32, 0u32), (2, 9)] {
        let e = msg(
            &mut r3,
            2,
            lane,
            ReplicaMsg::PrePrepare(s.pre_prepare(lane, lane, 0, 0, &one(switch(&s, C, 5, to)))),
        );
        assert!(!prepared(&e, lane, 0));
    }
    assert_eq!(r3.counters().rejected("wrong-lane-switch"), 2);
    // sarek: PREDICT() would let the partition's leader order it as a plain
    // op (review of SWITCHINSTANCE, finding 6); backups refuse it.
    let sarek = setup(4, 8, params(OrderingMode::Sarek, 4));
    let mut k3 = replica(&sarek, 3);
    let e = msg(
        &mut k3,
        0,
        0,
        ReplicaMsg::PrePrepare(sarek.pre_prepare(0, 0, 0, 0, &one(switch(&sarek, C, 1, 0)))),
    );
    assert!(!prepared(&e, 0, 0));
    assert_eq!(k3.counters().rejected("switch-not-rcc"), 1);
}

/// (e) Switching back within σ rounds of a switch changes nothing (one
/// hand-over at a time), and a replayed old switch neither: the client is
/// never owned by two lanes in one round.
#[test]
fn a_second_switch_before_the_hand_over_completes_or_a_replay_is_ignored() {
    let (s, mut r3) = switched_at_round_1();
    deliver_round(&s, &mut r3, 3, 2, &[(1, one(switch(&s, C, 2, 1)))]);
    assert_eq!(r3.counters().switches.get("in-progress"), Some(&1));
    deliver_round(&s, &mut r3, 3, 3, &[(2, one(switch(&s, C, 1, 2)))]);
    assert_eq!(r3.counters().switches.get("replayed"), Some(&1));
    let p = crate::rcc_switch::policy(&s.cfg);
    for round in 0..12 {
        let owner = r3.hub.assignments.owner_at(&p, ClientId(C as u64), Slot(round));
        assert_eq!(owner, LaneId(if round <= 5 { 1 } else { 2 }), "round {round}");
    }
}

/// State transfer carries the table: a replica that installs a snapshot
/// taken after a switch (the executor's, which begins with the table)
/// queues the client's requests in its new lane.
#[test]
fn an_installed_snapshot_brings_the_assignment_table_with_it() {
    let s = rcc();
    let p = SwitchPolicy { lanes: 4, sigma: 4 };
    let mut table = Assignments::default();
    table.apply(&p, &switch(&s, C, 1, 3), 1);
    let mut head = table.exec_snapshot_head();
    head.extend_from_slice(b"the rest of the executor's state");
    let snap = Bytes::from(head);
    let cert = s.checkpoint_cert(16, chorus_core::Digest::of(&snap), &[0, 1, 3]);
    let mut r2 = replica(&s, 2);
    for peer in [0u32, 1, 3] {
        let status = Status {
            lane: LaneId(0),
            view: View(0),
            next_undecided: Slot(4),
            stable_seq: Seq(16),
            suspects: false,
            awaits_new_view: false,
        };
        msg(&mut r2, 10, peer, ReplicaMsg::Status(status));
    }
    handle(&mut r2, 50, Event::Timer(TimerId::Status));
    let e = handle(&mut r2, 100, Event::Timer(TimerId::Status));
    let (peer, _) = sends(&e)
        .into_iter()
        .find(|(_, m)| matches!(m, ReplicaMsg::StateRequest(_)))
        .expect("state request");
    let chunk = StateChunk {
        cert,
        index: 0,
        count: 1,
        data: snap.clone(),
    };
    msg(&mut r2, 101, peer.0, ReplicaMsg::StateChunk(chunk));
    handle(
        &mut r2,
        102,
        Event::StateInstalled {
            seq: Seq(16),
            state_digest: chorus_core::Digest::of(&snap),
        },
    );
    assert_eq!(r2.status().next_delivery, Seq(16));
    assert_eq!(*r2.hub.assignments, table);
    handle(&mut r2, 103, Event::Request(s.request(C, 2, b"x")));
    assert_eq!(r2.status().lanes[3].pending, 1);
    assert_eq!(r2.status().lanes[1].pending, 0);
}

/// Liveness of the hand-over in a whole (idle) cluster: instance 1's
/// primary censors client 1 (it never gets its request) and the failure
/// timeout is far away. The client's SWITCHINSTANCE to lane 2 is delivered,
/// lane 2 moves the rounds on with no-ops to r_d + σ + 1 and proposes the
/// request there; it executes exactly once everywhere.
#[test]
fn a_censored_client_switches_and_its_request_executes() {
    let p = chorus_core::ProtocolParams {
        max_lane_drift_slots: 4,
        view_change_timeout_ms: 600_000,
        ..params(OrderingMode::Rcc, 4)
    };
    let mut c = super::harness::Cluster::new(4, 8, p);
    c.submit_to(C, 1, &[0, 2, 3]);
    c.run_for(2_000);
    assert!(!c.all_executed(&[(C, 1)]), "censored");
    let sw = switch(&c.s, C, 2, 2);
    c.submit_request(sw);
    assert!(
        c.run_until(30_000, |c| c.all_executed(&[(C, 1), (C, 2)])),
        "the switch and the request execute"
    );
    c.check_agreement();
    for i in 0..4 {
        let r = c.replica(i);
        assert_eq!(r.counters().switches.get("applied"), Some(&1));
        assert_eq!(r.counters().view_changes, 0, "no instance was stopped");
    }
}

/// Review of SWITCHINSTANCE, finding 1: the censored request waited longer
/// than the failure timeout at its old owner (only replica 0 has it, so its
/// suspicion of instance 1 never gathers a certificate) before the client
/// switched. Moved to the new owner, its wait must start again, and not
/// count while the new owner may not propose it yet: otherwise the replicas
/// holding it suspect the correct new owner at once, in the censor's place.
#[test]
fn a_request_that_waited_at_the_censor_does_not_make_the_new_owner_suspect() {
    let p = chorus_core::ProtocolParams {
        max_lane_drift_slots: 4,
        view_change_timeout_ms: 2_000,
        ..params(OrderingMode::Rcc, 4)
    };
    let mut c = super::harness::Cluster::new(4, 8, p);
    c.submit_to(C, 1, &[0]);
    c.run_for(2_500);
    assert!(!c.all_executed(&[(C, 1)]), "censored");
    assert!(
        c.replica(0).lane(LaneId(1)).unwrap().suspecting,
        "r0 suspects the censor, alone"
    );
    c.submit_request(switch(&c.s, C, 2, 2));
    // The client retransmits its request with the switch (the censor drops it).
    c.submit_to(C, 1, &[2, 3]);
    let mut suspected_new_owner = false;
    let done = c.run_until(30_000, |c| {
        suspected_new_owner |= (0..4).any(|i| c.replica(i).lane(LaneId(2)).unwrap().suspecting);
        c.all_executed(&[(C, 1), (C, 2)])
    });
    assert!(done, "the switch and the request execute");
    c.check_agreement();
    assert!(!suspected_new_owner, "no replica suspected instance 2");
}
