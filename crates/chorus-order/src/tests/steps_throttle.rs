//! The throttling rule (`lane/throttle.rs`, RCC §IV) in `cop` and `rcc`: a
//! lane that holds the others at the drift bound is suspected a timeout
//! after it started to, however many slots it trickles through, unless it
//! drains a whole drift window (σ slots) meanwhile.

use super::util::{msg, params, replica, setup, Setup};
use crate::replica::Replica;
use chorus_core::{Batch, LaneId, LeaderRotation, OrderingMode, ReplicaMsg, Slot};

const L0: LaneId = LaneId(0);
const SIGMA: u64 = 4;

/// n = 4, four lanes, σ = 4. In `cop` with fixed rotation replica 0 leads
/// every lane of view 0; in `rcc` replica `i` leads instance `i`.
fn throttle_setup(mode: OrderingMode) -> Setup {
    let p = chorus_core::ProtocolParams {
        max_lane_drift_slots: SIGMA,
        leader_rotation: LeaderRotation::Fixed,
        ..params(mode, 4)
    };
    setup(4, 4, p)
}

fn leader(s: &Setup, lane: u32) -> u32 {
    match s.cfg.params.mode {
        OrderingMode::Rcc => lane,
        _ => 0,
    }
}

/// Decide a no-op at `slot` of `lane` in view 0 at replica `me`.
fn decide(s: &Setup, r: &mut Replica, me: u32, now: u64, lane: u32, slot: u64) {
    let batch = Batch::noop();
    let from = leader(s, lane);
    let pp = s.pre_prepare(from, lane, 0, slot, &batch);
    msg(r, now, from, ReplicaMsg::PrePrepare(pp));
    for p in (0..4).filter(|p| *p != from && *p != me) {
        let prepare = s.prepare(p, lane, 0, slot, batch.digest());
        msg(r, now, p, ReplicaMsg::Prepare(prepare));
    }
    for p in (0..4).filter(|p| *p != me) {
        let commit = s.commit(p, lane, 0, slot, batch.digest());
        msg(r, now, p, ReplicaMsg::Commit(commit));
    }
}

/// Replica 1 with lanes 1–3 pre-prepared up to slot 7 at time 0 and lane 0
/// at slot 0: 7 ≥ σ − 1 rounds behind, the others blocked on it.
fn lane_0_behind(s: &Setup) -> Replica {
    let mut r1 = replica(s, 1);
    for lane in 1..4 {
        for slot in 0..8 {
            let from = leader(s, lane);
            let pp = s.pre_prepare(from, lane, 0, slot, &Batch::noop());
            msg(&mut r1, 0, from, ReplicaMsg::PrePrepare(pp));
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
/// lane was held to its pace for the rest of the run. Before the rule held
/// in `cop`, the decision below moved the deadline to 3/4 + 1 timeout.
#[test]
fn a_throttling_lane_is_suspected_although_it_trickles_decisions() {
    for mode in [OrderingMode::Cop, OrderingMode::Rcc] {
        let s = throttle_setup(mode);
        let timeout = s.cfg.params.view_change_timeout_ms;
        let mut r1 = lane_0_behind(&s);
        assert_eq!(deadline(&r1), timeout, "{mode:?}: armed when it fell behind");
        decide(&s, &mut r1, 1, timeout * 3 / 4, 0, 0);
        assert_eq!(r1.status().next_undecided[0], Slot(1), "{mode:?}");
        assert_eq!(
            deadline(&r1),
            timeout,
            "{mode:?}: throttling since 0, a decision must not push the timer back"
        );
    }
}

/// A correct lane can sit at the bound too (clients skewed to its pillar, a
/// pipeline σ deep), but it drains the whole drift window far within a
/// timeout: that restarts the measure, so load alone never costs a view
/// change. Before, the deadline stayed at `timeout`.
#[test]
fn a_loaded_lane_that_drains_a_drift_window_is_not_suspected() {
    for mode in [OrderingMode::Cop, OrderingMode::Rcc] {
        let s = throttle_setup(mode);
        let timeout = s.cfg.params.view_change_timeout_ms;
        let mut r1 = lane_0_behind(&s);
        let at = timeout * 3 / 4;
        for slot in 0..SIGMA {
            decide(&s, &mut r1, 1, at, 0, slot);
        }
        assert_eq!(r1.status().next_undecided[0], Slot(SIGMA), "{mode:?}");
        // Still σ − 1 behind slot 7: at the bound, measured afresh from now.
        assert_eq!(deadline(&r1), at + timeout, "{mode:?}");
    }
}
