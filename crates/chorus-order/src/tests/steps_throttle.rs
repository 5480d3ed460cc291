//! The throttling rule (`lane/throttle.rs`, RCC §IV) in `cop`: a lane that
//! holds the others at the drift bound is suspected a timeout after it
//! started to, however many slots it trickles through, unless it drains a
//! whole drift window (σ slots) meanwhile. (`steps_rcc.rs` has the rcc case.)
//!
//! Replica 1 observes; with fixed rotation replica 0 leads every lane of
//! view 0, so replica 1 proposes nothing itself: the states below are the
//! ones a correct cluster reaches (the others never run past the delivery
//! point's round + σ − 1).

use super::util::{effects, handle, kinds, msg, params, replica, setup, Setup};
use crate::io::{Event, Outbox};
use crate::replica::Replica;
use chorus_core::{Batch, LaneId, LeaderRotation, OrderingMode, ReplicaMsg, Slot};

const L0: LaneId = LaneId(0);
const SIGMA: u64 = 4;

/// n = 4, four lanes, σ = 4, fixed rotation.
fn cop() -> Setup {
    let p = chorus_core::ProtocolParams {
        max_lane_drift_slots: SIGMA,
        leader_rotation: LeaderRotation::Fixed,
        ..params(OrderingMode::Cop, 4)
    };
    setup(4, 4, p)
}

/// Decide a no-op at `slot` of `lane` in view 0 at replica 1.
fn decide(s: &Setup, r: &mut Replica, now: u64, lane: u32, slot: u64) {
    let batch = Batch::noop();
    let pp = s.pre_prepare(0, lane, 0, slot, &batch);
    msg(r, now, 0, ReplicaMsg::PrePrepare(pp));
    for p in [2, 3] {
        let prepare = s.prepare(p, lane, 0, slot, batch.digest());
        msg(r, now, p, ReplicaMsg::Prepare(prepare));
    }
    for p in [0, 2, 3] {
        let commit = s.commit(p, lane, 0, slot, batch.digest());
        msg(r, now, p, ReplicaMsg::Commit(commit));
    }
}

/// Lanes 1–3 decided rounds 0..σ at time 0, lane 0 nothing: σ − 1 rounds
/// behind, and the others may go no further.
fn lane_0_behind(s: &Setup) -> Replica {
    let mut r1 = replica(s, 1);
    for lane in 1..4 {
        for slot in 0..SIGMA {
            decide(s, &mut r1, 0, lane, slot);
        }
    }
    r1
}

fn deadline(r: &Replica) -> u64 {
    r.lane(L0)
        .and_then(|l| l.timer_deadline())
        .expect("timer armed")
        .0
}

/// Sim seed 9982058 (cop, n = 4, a twins leader of lane 0): lane 0 decided
/// a slot only every ~0.5 s, each decision pushed its timer back, and every
/// lane went at its pace. Lane 0 decides round 0, delivery lets the others
/// decide round σ: the deadline stays a timeout after lane 0 fell behind.
/// Failed before the rule held in `cop` (the decision re-armed the timer),
/// and before its hysteresis (the decision took lane 0 a round below the
/// bound and restarted the measure: at a replica that leads none of the
/// other lanes, on every trickled decision).
#[test]
fn a_throttling_lane_is_suspected_although_it_trickles_decisions() {
    let s = cop();
    let timeout = s.cfg.params.view_change_timeout_ms;
    let mut r1 = lane_0_behind(&s);
    assert_eq!(deadline(&r1), timeout);
    let at = timeout * 3 / 4;
    decide(&s, &mut r1, at, 0, 0);
    assert_eq!(r1.status().next_delivery.0, 4, "round 0 delivered");
    for lane in 1..4 {
        decide(&s, &mut r1, at, lane, SIGMA);
    }
    assert_eq!(r1.status().next_undecided[0], Slot(1));
    assert_eq!(
        deadline(&r1),
        timeout,
        "throttling since 0: a trickled decision must not push the timer back"
    );
    // It expires: replica 1 signs its timeout for the view.
    let mut out = Outbox::new();
    r1.handle(
        chorus_core::Millis(timeout),
        Event::Timer(crate::io::TimerId::ViewChange(L0)),
        &mut out,
    );
    let sent = kinds(&effects(&mut out));
    assert!(sent.iter().any(|k| k == "broadcast timeout"), "{sent:?}");
}

/// A correct lane can sit at the bound too (clients skewed to its pillar, a
/// pipeline σ deep), but it drains a whole drift window far within a
/// timeout: that restarts the measure, so load alone never costs a view
/// change. Lane 0 pre-prepared rounds 0..σ at time 0 and decides them at
/// 3/4 of a timeout while the others follow round by round, so it stays
/// within the hysteresis throughout. Before, the deadline stayed at
/// `timeout`.
#[test]
fn a_loaded_lane_that_drains_a_drift_window_is_not_suspected() {
    let s = cop();
    let timeout = s.cfg.params.view_change_timeout_ms;
    let mut r1 = lane_0_behind(&s);
    for slot in 0..SIGMA {
        let pp = s.pre_prepare(0, 0, 0, slot, &Batch::noop());
        msg(&mut r1, 0, 0, ReplicaMsg::PrePrepare(pp));
    }
    assert_eq!(deadline(&r1), timeout);
    let at = timeout * 3 / 4;
    for slot in 0..SIGMA {
        decide(&s, &mut r1, at, 0, slot);
        if slot + 1 < SIGMA {
            for lane in 1..4 {
                decide(&s, &mut r1, at, lane, slot + SIGMA);
            }
            assert_eq!(deadline(&r1), timeout, "slot {slot}: fewer than σ decided");
        }
    }
    assert_eq!(r1.status().next_undecided[0], Slot(SIGMA));
    // Still ≥ σ/2 behind round 2σ − 2: at the bound, measured afresh.
    assert_eq!(deadline(&r1), at + timeout);
}

/// An idle lane behind a loaded one proposes a no-op for
/// every round up to the frontier at once, not `proposal_depth` at a time:
/// filling two per round trip kept it at the drift bound, where the
/// throttling rule would suspect its correct leader on a slow network.
/// Replica 0 leads every lane; client 1's requests go to lane 1.
#[test]
fn an_idle_lane_fills_every_round_up_to_the_frontier_at_once() {
    let s = cop();
    let mut r0 = replica(&s, 0);
    let batch = s.cfg.params.batch_max_requests as u64;
    let pre_prepared = |actions: &[crate::io::Action], lane: LaneId| -> Vec<u64> {
        super::util::broadcasts(actions)
            .into_iter()
            .filter_map(|m| match m {
                ReplicaMsg::PrePrepare(pp) if pp.lane == lane => Some(pp.slot.0),
                _ => None,
            })
            .collect()
    };
    let mut lane0 = Vec::new();
    let mut lane1 = Vec::new();
    // σ full batches for lane 1 (full batches go up to the drift bound).
    for seq in 1..=SIGMA * batch {
        let e = handle(&mut r0, 1, Event::Request(s.request(1, seq, b"op")));
        lane0.extend(pre_prepared(&e, L0));
        lane1.extend(pre_prepared(&e, LaneId(1)));
    }
    assert_eq!(lane1, (0..SIGMA).collect::<Vec<_>>(), "lane 1 pipelines σ rounds");
    assert_eq!(
        lane0,
        (0..SIGMA).collect::<Vec<_>>(),
        "lane 0 fills every round lane 1 proposed, beyond the depth of {}",
        s.cfg.params.proposal_depth
    );
}

/// A lane with a trickle of requests behind a loaded one is no different:
/// each round lane 1 proposes, lane 0 proposes its few requests at once,
/// past its depth (second review: filling only idle lanes left a lightly
/// loaded one at the bound).
#[test]
fn a_lightly_loaded_lane_fills_every_round_too() {
    let s = cop();
    let mut r0 = replica(&s, 0);
    let batch = s.cfg.params.batch_max_requests as u64;
    let mut lane0 = Vec::new();
    let mut seq1 = 0;
    let mut collect = |e: &[crate::io::Action]| {
        lane0.extend(super::util::broadcasts(e).into_iter().filter_map(|m| match m {
            ReplicaMsg::PrePrepare(pp) if pp.lane == L0 => Some((pp.slot.0, pp.batch.requests.len())),
            _ => None,
        }))
    };
    for round in 0..SIGMA {
        // Lane 0's request first (it waits: its pipeline is busy), then a
        // full batch for lane 1, which puts lane 0 behind.
        collect(&handle(
            &mut r0,
            1,
            Event::Request(s.request(0, round + 1, b"op")),
        ));
        for _ in 0..batch {
            seq1 += 1;
            collect(&handle(&mut r0, 1, Event::Request(s.request(1, seq1, b"op"))));
        }
    }
    let want: Vec<(u64, usize)> = (0..SIGMA).map(|slot| (slot, 1)).collect();
    assert_eq!(lane0, want, "one request per round, beyond the depth");
}

/// A throttling suspicion says the lane is slow as a whole, not that the
/// leader of the slot it happens to wait at failed: leaving on it blames
/// the proposer the lane waited for longest during the measure (with
/// block-wise rotation a throttler releases its own slot just before the
/// deadline, and the next correct leader was blamed: `throttle.rs` tests
/// the accounting). Here, fixed rotation, that is r0, whose slot 1 the
/// lane waits at, proposed.
#[test]
fn leaving_on_a_throttling_suspicion_blames_the_throttler() {
    let s = cop();
    let timeout = s.cfg.params.view_change_timeout_ms;
    let mut r1 = lane_0_behind(&s);
    let at = timeout * 3 / 4;
    decide(&s, &mut r1, at, 0, 0);
    for lane in 1..4 {
        decide(&s, &mut r1, at, lane, SIGMA);
    }
    let pp = s.pre_prepare(0, 0, 0, 1, &Batch::noop());
    msg(&mut r1, at, 0, ReplicaMsg::PrePrepare(pp));
    assert_eq!(deadline(&r1), timeout);
    handle(&mut r1, timeout, Event::Timer(crate::io::TimerId::ViewChange(L0)));
    super::util::peer_gave_up(&mut r1, timeout + 1, 2, 0, 0, 1);
    assert!(r1.status().views[0] > chorus_core::View(0), "left view 0");
    let failures: Vec<u32> = r1
        .lane(LaneId(0))
        .unwrap()
        .penalties
        .by_replica
        .iter()
        .map(|p| p.failures)
        .collect();
    assert_eq!(failures, vec![1, 0, 0, 0]);
}
