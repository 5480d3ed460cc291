//! The periodic status as one bundle per peer per pillar (`replica/status_bundle.rs`).

use super::util::{broadcasts, handle, msg, params, replica, sends, setup, Setup};
use crate::io::{Event, TimerId};
use chorus_core::{
    LaneId, LaneProgress, OrderingMode, ProtocolParams, ReplicaId, ReplicaMsg, Seq, Slot, StatusBundle, View,
};

fn rcc(pillars: u32) -> Setup {
    let p = ProtocolParams {
        max_lane_drift_slots: 4,
        ..params(OrderingMode::Rcc, pillars)
    };
    setup(4, 4, p)
}

fn entry(lane: u32, next_undecided: u64) -> LaneProgress {
    LaneProgress {
        lane: LaneId(lane),
        view: View(0),
        next_undecided: Slot(next_undecided),
        suspects: false,
        awaits_new_view: false,
    }
}

fn lanes_of(b: &StatusBundle) -> Vec<u32> {
    b.lanes.iter().map(|e| e.lane.0).collect()
}

/// Under RCC every replica runs a lane; a status tick sends one bundle per
/// pillar holding that pillar's lanes, and no per-lane `Status` at all (n³
/// messages per interval before, docs/known-issues.md).
#[test]
fn a_status_tick_sends_one_bundle_per_pillar_and_no_per_lane_status() {
    for (pillars, expected) in [(1, vec![vec![0, 1, 2, 3]]), (2, vec![vec![0, 2], vec![1, 3]])] {
        let s = rcc(pillars);
        let mut r1 = replica(&s, 1);
        let e = handle(&mut r1, 50, Event::Timer(TimerId::Status));
        let sent = broadcasts(&e);
        assert!(
            !sent.iter().any(|m| matches!(m, ReplicaMsg::Status(_))),
            "pillars {pillars}: no per-lane status"
        );
        let bundles: Vec<Vec<u32>> = sent
            .iter()
            .filter_map(|m| match m {
                ReplicaMsg::Statuses(b) => Some(lanes_of(b)),
                _ => None,
            })
            .collect();
        assert_eq!(bundles, expected, "pillars {pillars}");
    }
}

/// Each entry of a peer's bundle is handled as that lane's `Status`: a peer
/// that reports lane 2 behind gets the lane's `Decided` notices.
#[test]
fn a_bundle_reporting_a_lane_behind_gets_that_lanes_decisions() {
    let s = rcc(1);
    let mut r1 = replica(&s, 1);
    let b = s.batch(2, 1..2);
    let d = b.digest();
    msg(
        &mut r1,
        1,
        2,
        ReplicaMsg::PrePrepare(s.pre_prepare(2, 2, 0, 0, &b)),
    );
    for p in [0, 3] {
        msg(&mut r1, 2, p, ReplicaMsg::Prepare(s.prepare(p, 2, 0, 0, d)));
    }
    for p in [0, 2, 3] {
        msg(&mut r1, 3, p, ReplicaMsg::Commit(s.commit(p, 2, 0, 0, d)));
    }
    assert_eq!(r1.lane(LaneId(2)).map(|l| l.next_undecided()), Some(Slot(1)));
    let bundle = StatusBundle {
        stable_seq: Seq(0),
        lanes: vec![entry(0, 0), entry(1, 0), entry(2, 0), entry(3, 0)],
    };
    let e = msg(&mut r1, 10, 3, ReplicaMsg::Statuses(bundle));
    let decided: Vec<(ReplicaId, u32, u64)> = sends(&e)
        .into_iter()
        .filter_map(|(to, m)| match m {
            ReplicaMsg::Decided(n) => Some((to, n.lane.0, n.slot.0)),
            _ => None,
        })
        .collect();
    assert_eq!(decided, vec![(ReplicaId(3), 2, 0)]);
}

/// A bundle naming a lane that does not exist, or lanes of two pillars, is
/// refused whole (a correct sender never builds one); one with lanes out of
/// order does not pass the codec's bounds.
#[test]
fn malformed_bundles_are_refused_whole() {
    let s = rcc(2);
    let mut r1 = replica(&s, 1);
    let bundle = |lanes| {
        ReplicaMsg::Statuses(StatusBundle {
            stable_seq: Seq(0),
            lanes,
        })
    };
    msg(&mut r1, 10, 3, bundle(vec![entry(0, 0), entry(4, 0)]));
    msg(&mut r1, 10, 3, bundle(vec![entry(0, 0), entry(1, 0)]));
    assert_eq!(r1.counters.rejected("bad-status-bundle"), 2);
    msg(&mut r1, 10, 3, bundle(vec![entry(2, 0), entry(0, 0)]));
    msg(&mut r1, 10, 3, bundle(vec![]));
    assert_eq!(r1.counters.rejected("invalid-bounds"), 2);
}
